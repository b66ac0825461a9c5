"""core.clock: the real clock is the machine's; a driven one moves only when its test says."""

from __future__ import annotations

import threading

import pytest

from dsbisect.core.clock import REAL, ManualClock


def test_the_real_clock_is_the_machine_s():
    import time

    before = time.monotonic()
    assert before <= REAL.monotonic() <= time.monotonic()
    event = threading.Event()
    event.set()
    assert REAL.wait(event, 60) is True


def _looker(clock: ManualClock, every: float, seen: list, stop: threading.Event) -> threading.Thread:
    def loop():
        while not clock.wait(stop, every):
            seen.append(clock.monotonic())
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def test_a_driven_clock_stands_still_and_advance_gives_each_due_look_its_turn():
    clock, seen, stop = ManualClock(start=0.0), [], threading.Event()
    thread = _looker(clock, 1.0, seen, stop)
    clock.sleepers(1)
    assert seen == [] and clock.monotonic() == 0.0
    clock.advance(3.5)  # a look at 1, 2 and 3, each done when advance returns
    assert seen == [1.0, 2.0, 3.0] and clock.monotonic() == 3.5
    clock.advance(0.5)
    assert seen == [1.0, 2.0, 3.0, 4.0]
    stop.set()
    thread.join(60)
    assert not thread.is_alive()
    clock.advance(10)  # an ended thread holds nothing up
    assert seen[-1] == 4.0


def test_a_wait_ends_when_its_event_is_set_with_the_clock_still():
    clock, event, got = ManualClock(), threading.Event(), []
    thread = threading.Thread(target=lambda: got.append(clock.wait(event, 100)), daemon=True)
    thread.start()
    clock.sleepers(1)
    event.set()
    thread.join(60)
    assert got == [True]
    thread = threading.Thread(target=lambda: got.append(clock.wait(threading.Event(), 100)), daemon=True)
    thread.start()
    clock.sleepers(1)
    clock.advance(100)
    thread.join(60)
    assert got == [True, False]


def test_a_thread_that_never_waits_again_is_told_after_settle_s():
    clock, release = ManualClock(settle_s=0.2), threading.Event()

    def stuck():
        clock.sleep(1)
        release.wait(60)  # running, neither waiting on the clock nor ended
    thread = threading.Thread(target=stuck, daemon=True)
    thread.start()
    clock.sleepers(1)
    with pytest.raises(TimeoutError, match="still running"):
        clock.advance(1)
    release.set()
    thread.join(60)
