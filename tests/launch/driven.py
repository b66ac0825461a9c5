"""A real launch on a driven clock: the job's processes run in real time, the watch loop's
deadlines, idle limits and quiet times in the test's (``ManualClock``). The test waits for what
the job did (a line in its log, a file), then moves the clock: a limit of seconds is reached
when the test says, however loaded the machine, and nothing is asserted on how long it took."""

from __future__ import annotations

import threading
import time

from dsbisect.core.clock import ManualClock
from dsbisect.launch.supervise import POLL_S, LaunchResult, LaunchSpec, launch

REAL_LIMIT_S = 180.0  # the longest a step may take in real time on a loaded machine (a backstop)


class Driven:
    """``launch(spec, **hooks)`` on a thread of its own with a ``ManualClock``."""

    def __init__(self, spec: LaunchSpec, **hooks) -> None:
        self.clock = ManualClock(settle_s=REAL_LIMIT_S)
        self.result: LaunchResult | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(spec, hooks), daemon=True)
        self.thread.start()
        self.clock.sleepers(thread=self.thread)  # the watch loop's first look is done (not another thread's)

    def _run(self, spec: LaunchSpec, hooks: dict) -> None:
        try:
            self.result = launch(spec, clock=self.clock, **hooks)
        except BaseException as e:  # noqa: BLE001 - handed to the test by finish()
            self.error = e

    def until(self, predicate, what: str):
        """Wait in real time (up to REAL_LIMIT_S) for what the job does, the clock still."""
        deadline = time.monotonic() + REAL_LIMIT_S
        while not (got := predicate()):
            assert time.monotonic() < deadline, f"not within {REAL_LIMIT_S:g} s: {what}"
            time.sleep(0.05)
        return got

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def finish(self) -> LaunchResult:
        """Move the clock a look at a time until the launch returns (the job ends by itself)."""
        deadline = time.monotonic() + REAL_LIMIT_S
        while self.thread.is_alive():
            assert time.monotonic() < deadline, f"the launch did not end within {REAL_LIMIT_S:g} s"
            self.clock.advance(POLL_S)
            self.thread.join(0.01)
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result
