import faulthandler
import signal
import sys
import time


def first_phase():
    time.sleep(4)


def second_phase():
    time.sleep(4)


faulthandler.register(signal.SIGUSR1, file=open(sys.argv[1], "w"), all_threads=True, chain=False)
first_phase()
second_phase()
