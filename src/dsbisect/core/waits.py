"""Waiting for a lock another process or thread holds: said, and never past a Ctrl-C.

Every lock dsbisect waits on (a venv being built, a wheel, a builder, a commit's build, the
store while it is repaired) is taken through ``held`` (or polled with ``Waiting``): after
``SAY_AFTER_S`` of waiting, one line says what it waits for and who holds it (the pid and
command line of the holder, read from the kernel's table of file locks), again every
``AGAIN_S``; the wait looks a few times a second at its thread's cancel event
(``proc.cancellable``: a look-ahead build no longer wanted, a run being stopped) and, in the main
thread, a Ctrl-C ends it at once.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
from filelock import FileLock, Timeout

from dsbisect.core import proc
from dsbisect.core.redact import redact
from dsbisect.core.tell import tell

SAY_AFTER_S = 2.0  # a wait shorter than this is not said
AGAIN_S = 30.0  # a long wait is said again this often
POLL_S = 0.2  # how often a wait looks at its cancel event


@contextmanager
def held(path: Path, what: str, clock: Callable[[], float] = time.monotonic) -> Iterator[None]:
    """Hold the file lock ``path`` within the block, waiting for it as the module says; ``what``
    names what it guards ("the venv of toy · dsb-toy 1.3.0")."""
    lock = FileLock(str(path))
    wait = Waiting(what, lambda: holders(path), clock)
    while True:
        try:
            lock.acquire(timeout=POLL_S)
            break
        except Timeout:
            wait.still()
    try:
        yield
    finally:
        lock.release()


class Waiting:
    """One wait, polled by its caller (``still`` once per look): said after ``SAY_AFTER_S`` and
    every ``AGAIN_S``; ``proc.Cancelled`` once its thread's cancel event is set."""

    def __init__(self, what: str, who: Callable[[], list[int]], clock: Callable[[], float] = time.monotonic):
        self.what, self.who, self.clock = what, who, clock
        self.start, self.said = clock(), None

    def still(self) -> None:
        stop = proc.stop_event()
        if stop is not None and stop.is_set():
            raise proc.Cancelled(f"waiting for {self.what}: no longer needed")
        waited = self.clock() - self.start
        if (self.said is None and waited >= SAY_AFTER_S) or (self.said is not None and waited - self.said >= AGAIN_S):
            self.said = waited
            tell(f"waiting for {self.what}: {described(self.who())} ({waited:.0f} s so far; Ctrl-C stops)")


def described(pids: list[int]) -> str:
    """Who holds it, in words: ``held by pid 4242 (dsbisect bisect deepspeed 0.18.6 0.18.7)``;
    a process that another dsbisect started (a rank of its run) with that dsbisect named too."""
    if not pids:
        return "held by another process"
    words = []
    for pid in pids[:2]:
        if pid == os.getpid():
            words.append(f"held by this dsbisect (pid {pid}, another of its threads)")
            continue
        line, owner = command_of(pid), _dsbisect_above(pid)
        words.append(f"held by pid {pid}" + (f" ({line})" if line else "")
                     + (f", started by pid {owner} ({command_of(owner)})" if owner else ""))
    return ", ".join(words)


def _dsbisect_above(pid: int) -> int | None:
    """The dsbisect process ``pid`` runs below (a rank of its run), None when there is none."""
    try:
        for parent in psutil.Process(pid).parents():
            argv = parent.cmdline()
            if any(Path(a).name == "dsbisect" for a in argv[:2]) or argv[1:3] == ["-m", "dsbisect"]:
                return parent.pid
    except psutil.Error:
        return None
    return None


def command_of(pid: int, limit: int = 120) -> str:
    """The command line of ``pid``, its program by name (``dsbisect bisect ...``, not the python
    that runs it), secrets masked; "" when it cannot be read."""
    try:
        argv = psutil.Process(pid).cmdline()
    except psutil.Error:
        return ""
    if len(argv) > 1 and Path(argv[0]).name.startswith("python") and not argv[1].startswith("-"):
        argv = argv[1:]  # python .../bin/dsbisect bisect ...: the program is the script
    if argv:
        argv = [Path(argv[0]).name, *argv[1:]]
    text = " ".join(redact(shlex.join(argv)).split())  # one line, whatever the arguments hold
    return text if len(text) <= limit else text[: limit - 1] + "…"


def blocked_on(pid: int) -> list[int]:
    """The pids holding the file lock that ``pid`` waits for ([] when it waits for none)."""
    table = _locks()
    waited = {f[6] for f in table if f[1] == "->" and len(f) > 6 and f[5] == str(pid)}
    return list(dict.fromkeys(int(f[4]) for f in table if f[1] != "->" and len(f) > 5 and f[5] in waited
                              and f[4].isdigit()))


def _locks() -> list[list[str]]:
    try:
        return [line.split() for line in Path("/proc/locks").read_text().splitlines()]
    except OSError:
        return []


def holders(path: Path) -> list[int]:
    """The pids that hold a lock on the file ``path`` now (Linux's /proc/locks; [] elsewhere, or
    when the file is gone)."""
    try:
        st = os.stat(path)
        table = Path("/proc/locks").read_text()
    except OSError:
        return []
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    out = []
    for line in table.splitlines():
        fields = line.split()
        if len(fields) > 5 and "->" not in fields and fields[5] == dev and fields[4].isdigit():
            out.append(int(fields[4]))
    return list(dict.fromkeys(out))
