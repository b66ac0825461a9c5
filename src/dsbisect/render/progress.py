"""Progress on stderr while points build and run: never silent for long.

- A line per finished step ("[point 4 of 18] …", "about 6 min left" once a point has run).
- On a terminal, a live line for what is under way, its clock ticking on a timer (not only when
  something new happens): ``cpu_smoke · 0.18.7: compiling DeepSpeed's shm_comm op (first run of
  this venv)  1:42  (5:10 in all)``; a second one for a look-ahead build.
- Piped (CI logs), each new activity is one line, and while one lasts, a heartbeat line every
  ``DSBISECT_HEARTBEAT`` seconds (default 30; 0: none) in which nothing else was printed.

Kinds of progress: ``done`` and ``reused`` (a point finished), ``note``, ``env`` and ``run``
(what the current point does now), ``ahead`` (a look-ahead build; "" when it is over).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from dsbisect.core import eta
from dsbisect.core.clock import REAL, Clock
from dsbisect.core.errors import InputError
from dsbisect.core.outside import safe

err = Console(stderr=True, soft_wrap=True, markup=False, emoji=False, highlight=False)

HEARTBEAT_S = 30.0


def heartbeat_seconds(environ: Mapping[str, str]) -> float:
    """``DSBISECT_HEARTBEAT``: seconds between heartbeat lines when stderr is not a terminal (0: none)."""
    raw = environ.get("DSBISECT_HEARTBEAT", "").strip()
    if not raw:
        return HEARTBEAT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (0 <= value < 1e6):
        raise InputError(f"DSBISECT_HEARTBEAT={raw}: give the seconds between heartbeat lines (e.g. 30), or 0 for none")
    return value


@dataclass(frozen=True)
class Doing:
    """What is under way, since when (monotonic)."""

    text: str
    since: float


def status_text(doing: Doing, now: float, t0: float, left: str = "") -> str:
    """``0.18.7: compiling … op  1:42  (5:10 in all, about 6 min left)``."""
    extra = ", ".join(x for x in (f"{eta.clock(now - t0)} in all", left) if x)
    return f"{doing.text}  {eta.clock(now - doing.since)}  ({extra})"


class ProgressUI:
    """The progress callback of the runner (``kind, text``) and its display; see the module."""

    def __init__(self, quiet: bool = False, total: int = 0, heartbeat: float | None = None,
                 console: Console | None = None, clock: Clock = REAL):
        self.clock = clock  # what the heartbeat and every "since" are timed by
        self.quiet, self.total, self.finished = quiet, total, 0
        self.console = console or err
        self.heartbeat = heartbeat_seconds(os.environ) if heartbeat is None else heartbeat
        self.t0 = self.clock.monotonic()
        self.status: Live | None = None  # the live display, on a terminal while running (stop/start)
        self.main: Doing | None = None
        self.ahead: Doing | None = None
        self.rounds: list[float] = []  # wall seconds between finished points (not recorded ones)
        self.last_done = self.t0
        self.printed = self.t0  # when a line was last printed (the heartbeat waits for quiet)
        self.lock = threading.RLock()
        self.asking = False  # a question to the user is on screen: no heartbeat under it
        self.unrunnable = 0  # points still to come that this machine cannot run (no time: not rounds)

    def expect_unrunnable(self, n: int) -> None:
        """``n`` of the points to come will be skipped at once (too few GPUs here): the time
        left is the pace times the points that will run."""
        with self.lock:
            self.unrunnable = max(0, n)

    # ------------------------------------------------------------------ events

    def __call__(self, kind: str, text: str) -> None:
        if self.quiet:
            return
        text, now = safe(text), self.clock.monotonic()
        with self.lock:
            if kind in ("done", "reused", "unrunnable"):
                text = self._finished(kind, text, now)
            if kind in ("done", "reused", "unrunnable", "note"):
                self._print(Text(f"  {text}"), now)
                if kind != "note":
                    self.main = None
            elif kind == "ahead":
                self.ahead = Doing(text, now) if text else None
                if text and self.status is None:
                    self._print(Text(f"  {text}", style="dim"), now)
            else:
                self.main = Doing(text, now)
                if self.status is None:
                    self._print(Text(f"  {text}", style="dim"), now)

    def _finished(self, kind: str, text: str, now: float) -> str:
        if kind == "done":
            self.rounds.append(now - self.last_done)
        elif kind == "unrunnable":
            self.unrunnable = max(0, self.unrunnable - 1)
        self.last_done = now
        if not self.total:
            return text
        self.finished += 1
        left = eta.about(eta.time_left(self.rounds, self._to_run()))
        return f"[point {self.finished} of {self.total}] {text}" + (f" · {left} left" if left else "")

    def _to_run(self) -> int:
        return self.total - self.finished - self.unrunnable

    def _print(self, line: Text, now: float) -> None:
        self.console.print(line)
        self.printed = now

    def print_line(self, line: Text, now: float) -> None:
        """Print ``line`` (a heartbeat's) on the progress console; the next heartbeat waits from ``now``."""
        self._print(line, now)

    # ----------------------------------------------------------------- display

    def left(self) -> str:
        """"about 6 min left" for a matrix whose size is known, once a point has run."""
        if not self.total:
            return ""
        left = eta.about(eta.time_left(self.rounds, self._to_run()))
        return f"{left} left" if left else ""

    def lines(self, now: float) -> list[str]:
        with self.lock:
            shown = [status_text(d, now, self.t0, self.left() if d is self.main else "")
                     for d in (self.main, self.ahead) if d is not None]
        return shown

    def beat(self, now: float) -> str | None:
        """The heartbeat line due now (piped), or None: only while something is under way and
        nothing was printed for ``heartbeat`` seconds."""
        if not self.heartbeat or self.asking or now - self.printed < self.heartbeat:
            return None
        shown = self.lines(now)
        if not shown:
            return None
        return "  … still " + " | ".join(shown)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """While the user is asked something (``bisect --manual``): no live line, no heartbeat."""
        live = self.status
        if live is not None:
            live.stop()
        self.asking = True
        try:
            yield
        finally:
            self.asking = False
            self.printed = self.clock.monotonic()
            if live is not None:
                live.start()

    @contextmanager
    def running(self) -> Iterator[None]:
        if self.quiet:
            yield
            return
        if self.console.is_terminal:
            with Live(_Ticking(self), console=self.console, refresh_per_second=4, transient=True) as live:
                self.status = live
                try:
                    yield
                finally:
                    self.status = None
            return
        with _Heartbeat(self):
            yield


class _Ticking:
    """The live display: re-rendered by Live's refresh thread, so its clocks tick by themselves."""

    def __init__(self, ui: ProgressUI) -> None:
        self.ui = ui
        self.spinner = Spinner("dots")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        shown = self.ui.lines(self.ui.clock.monotonic())
        if not shown:
            return
        self.spinner.update(text=Text(shown[0]))
        yield Group(self.spinner, *(Text(f"  {line}", style="dim") for line in shown[1:]))


class _Heartbeat:
    """Piped: a thread that prints ``ProgressUI.beat``'s line when one is due."""

    def __init__(self, ui: ProgressUI) -> None:
        self.ui = ui
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="dsbisect-heartbeat", daemon=True)

    def __enter__(self) -> _Heartbeat:
        if self.ui.heartbeat:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)

    def _loop(self) -> None:
        clock = self.ui.clock
        while not clock.wait(self.stopped, min(1.0, self.ui.heartbeat / 4)):
            with self.ui.lock:
                line = self.ui.beat(clock.monotonic())
                if line is not None:
                    self.ui.print_line(Text(line, style="dim"), clock.monotonic())
