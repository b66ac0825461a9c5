import faulthandler
import os
import signal
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def step(t):
    dist.all_reduce(t)


def heartbeat():
    while True:
        time.sleep(0.5)


def main():
    rank = int(os.environ["RANK"])
    f = open(os.path.join(os.environ["TOY_STACKS"], f"rank{rank}.pid{os.getpid()}.txt"), "w")
    faulthandler.register(signal.SIGUSR1, file=f, all_threads=True, chain=False)
    threading.Thread(target=heartbeat, name="heartbeat", daemon=True).start()
    dist.init_process_group("gloo", timeout=timedelta(seconds=8))
    t = torch.ones(4)
    if rank == 0:
        step(t)
    else:
        time.sleep(20)  # rank 1 skips the collective
    dist.destroy_process_group()


main()
