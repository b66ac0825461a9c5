"""The time a watcher reads and waits on: the machine's (``REAL``) or one a test drives.

Everything that polls, times out or prints on a timer (the progress heartbeat, the phase watch,
the launch's watch loop and idle checks, the early verdict's rounds) takes a ``Clock``: its
``monotonic()`` for "now", ``sleep(s)`` between looks, and ``wait(event, s)`` where a thread
sleeps until it is stopped. ``ManualClock`` stands still until its test calls ``advance``,
which returns only once every thread that waits on it and was due has looked and is waiting
again (or ended): a test asserts on what happened at a given clock time, never after a real
sleep.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def time(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def wait(self, event: threading.Event, seconds: float | None) -> bool:
        """``event.wait(seconds)``: True when it was set, False when ``seconds`` passed first."""
        ...


class RealClock:
    """The machine's time (what runs outside the tests)."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float | None) -> bool:
        return event.wait(seconds)


REAL = RealClock()


class ManualClock:
    """A clock that moves only when ``advance`` says. Threads that ``sleep`` or ``wait`` on it
    block until the clock reaches their time (or their event is set); ``advance`` waits, in real
    time up to ``settle_s``, until each of them has run and waits again or has ended."""

    POLL_S = 0.005  # how often a waiting thread looks at its event (set without the clock knowing)

    def __init__(self, start: float = 1000.0, wall: float = 1.7e9, settle_s: float = 60.0) -> None:
        self.now, self.wall0, self.settle_s = start, wall - start, settle_s
        self.cond = threading.Condition()
        self.waiting: dict[threading.Thread, float | None] = {}  # thread -> its wake-up time (None: running)

    def monotonic(self) -> float:
        with self.cond:
            return self.now

    def time(self) -> float:
        return self.monotonic() + self.wall0

    def sleep(self, seconds: float) -> None:
        self.wait(threading.Event(), seconds)

    def wait(self, event: threading.Event, seconds: float | None) -> bool:
        me = threading.current_thread()
        with self.cond:
            due = None if seconds is None else self.now + max(seconds, 0.0)
            self.waiting[me] = float("inf") if due is None else due
            self.cond.notify_all()
            try:
                while not event.is_set() and (due is None or self.now < due):
                    self.cond.wait(self.POLL_S)
                return event.is_set()
            finally:
                self.waiting[me] = None  # running until it waits again or ends
                self.cond.notify_all()

    def advance(self, seconds: float) -> None:
        """Move the clock on by ``seconds``, one due time at a time (so that a thread that looks
        every second looks at each second), and return when every due thread has had its turn."""
        with self.cond:
            end = self.now + seconds
            while True:
                self._settle()
                due = [t for t in self.waiting.values() if t is not None and self.now < t <= end]
                self.now = min(due) if due else end
                self.cond.notify_all()
                if not due:
                    self._settle()
                    return

    def sleepers(self, n: int = 1, thread: threading.Thread | None = None) -> None:
        """Wait (in real time, up to ``settle_s``) until ``n`` threads wait on this clock (or
        ``thread`` does): a thread just started has not looked yet, and the clock must not move
        before it waits (its own times count from its first wait)."""
        def waiting() -> int:
            if thread is not None:
                return int(self.waiting.get(thread) is not None or not thread.is_alive()) * n
            return sum(due is not None and t.is_alive() for t, due in self.waiting.items())

        with self.cond:
            deadline = time.monotonic() + self.settle_s
            while waiting() < n:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"fewer than {n} threads wait on the clock after {self.settle_s:g} s")
                self.cond.wait(self.POLL_S)

    def settle(self) -> None:
        """Wait until every thread on this clock waits for a later time (or has ended)."""
        with self.cond:
            self._settle()

    def _settle(self) -> None:
        deadline = time.monotonic() + self.settle_s
        while any(t.is_alive() and (due is None or due <= self.now) for t, due in self.waiting.items()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"threads on the clock still running after {self.settle_s:g} s of real time")
            self.cond.wait(self.POLL_S)
