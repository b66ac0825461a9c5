"""A run's launcher, started under a guard that keeps its whole process tree (``_hook/dsbisect_guard.py``).

Why a guard and not a cgroup: a cgroup of its own per run (``cgroup.kill``) needs root or a
delegated subtree (systemd ``Delegate=yes``), which a Slurm job step, a container or an ssh
session on a cluster login node usually does not give a user; ``prctl(PR_SET_CHILD_SUBREAPER)``
needs no privilege on any Linux since 3.4.  The guard is a small stdlib-only process between
dsbisect and the launcher, in a session of its own (a signal to dsbisect's process group
does not reach it).  Every process of the run stays below it, even one whose parent died
(a rank's fork child, a double-forked daemon): orphans are re-parented to the guard.  Its
stdin is a pipe that only dsbisect holds open; when dsbisect closes it (after its own
graceful teardown) or dies — ``kill -9`` included, which no signal handler sees — the guard
kills everything below it and exits.

``Guarded`` looks like the ``subprocess.Popen`` of the launcher to ``launch``: ``pid`` is the
launcher's (the leader of its process group), ``poll()`` its exit code.
"""

from __future__ import annotations

import json
import os
import select
import subprocess  # the guard is started here; launch and proc run nothing else this way
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

SCRIPT = Path(__file__).parents[1] / "_hook" / "dsbisect_guard.py"
START_S = 30.0  # how long the guard may take to start the launcher
# Variables of dsbisect's own environment that would make the guard look like a process of a
# run (the run's tag) or a rank; the launcher gets the run's environment through the pipe.
_NOT_THE_GUARDS = ("DSBISECT_RUN_DIR", "RANK", "LOCAL_RANK", "WORLD_SIZE")


class GuardLost(Exception):
    """dsbisect's guard of a run ended before the launcher it watched (killed, e.g. ``kill -9``):
    the run was not supervised to its end, so it has no outcome (it is interrupted, run again)."""

    def __init__(self, code: int | None):
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit {code}"
        super().__init__(f"dsbisect's guard of the run ended ({how}) before the job did")
        self.code = code


@dataclass(frozen=True)
class Closed:
    stopped: tuple[int, ...]  # what the guard killed at the end (it was still there)
    left: tuple[int, ...]  # what it could not kill


class Guarded:
    """The launcher of one run, below its guard."""

    def __init__(self, guard: subprocess.Popen, report: int) -> None:
        self.guard, self._report, self._buf = guard, report, b""
        self.pid = 0
        self.returncode: int | None = None
        self.lines: list[str] = []
        self.closed: Closed | None = None

    @classmethod
    def start(cls, argv: Sequence[str], env: Mapping[str, str], cwd: Path, log) -> Guarded:
        """Start the guard and, through it, ``argv``; OSError when the launcher cannot start."""
        read, write = os.pipe()
        try:
            guard = subprocess.Popen(
                [sys.executable, "-I", "-S", str(SCRIPT), str(write)], stdin=subprocess.PIPE, stdout=log,
                stderr=subprocess.STDOUT, pass_fds=(write,), start_new_session=True, cwd="/",
                env={k: v for k, v in os.environ.items() if k not in _NOT_THE_GUARDS})
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        self = cls(guard, read)
        request = {"argv": list(argv), "env": dict(env), "cwd": str(cwd)}
        try:
            guard.stdin.write(json.dumps(request).encode() + b"\n")
            guard.stdin.flush()
            self._until_started(str(argv[0]))
        except BaseException:
            self.close()
            raise
        return self

    def _until_started(self, program: str) -> None:
        deadline = time.monotonic() + START_S
        while not self.pid:
            line = self._line(max(0.0, deadline - time.monotonic()))
            if line is None:
                raise OSError(f"dsbisect's guard did not start the launcher (exit {self.guard.poll()})")
            word, _, rest = line.partition(" ")
            if word == "started":
                self.pid = int(rest)
            elif word == "error":
                num, _, text = rest.partition(" ")
                raise OSError(int(num), text, program)  # as Popen would have raised it

    def _line(self, wait: float) -> str | None:
        """The next report line, waiting up to ``wait`` s; None at its end or when none came."""
        end = time.monotonic() + wait
        while b"\n" not in self._buf:
            ready, _, _ = select.select([self._report], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                return None
            data = os.read(self._report, 4096)
            if not data:
                return None
            self._buf += data
        line, _, self._buf = self._buf.partition(b"\n")
        text = line.decode("utf-8", "replace")
        self.lines.append(text)
        if text.startswith("exit "):
            self.returncode = int(text[5:])
        return text

    def poll(self) -> int | None:
        """The launcher's exit code once it ended; ``GuardLost`` when the guard ended without
        reporting one (the launcher's exit is then not known: no exit code is made up)."""
        while self.returncode is None and self._line(0) is not None:
            pass
        if self.returncode is None and self.guard.poll() is not None:
            raise GuardLost(self.guard.returncode)
        return self.returncode

    def orphans(self) -> list[psutil.Process]:
        """The live processes below the guard that are not below the launcher: they lost their
        parent (a daemon that double-forked, a fork child of a rank that ended)."""
        try:
            below = psutil.Process(self.guard.pid).children(recursive=True)
        except psutil.Error:
            return []
        try:
            launched = {self.pid} | {p.pid for p in psutil.Process(self.pid).children(recursive=True)}
        except psutil.Error:
            launched = {self.pid}
        return [p for p in below if p.pid not in launched]

    def kill_tree(self) -> None:
        """Have the guard kill everything below it now (from any thread; ``close`` still reads
        what it did)."""
        try:
            self.guard.stdin.close()
        except (OSError, ValueError):
            pass

    def close(self, timeout: float = 15.0) -> Closed:
        """Tell the guard the run is over: it kills what is left below it and exits."""
        if self.closed is not None:
            return self.closed
        self.kill_tree()
        end = time.monotonic() + timeout
        while self._line(max(0.0, end - time.monotonic())) is not None:
            pass
        try:
            self.guard.wait(max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.guard.kill()
            self.guard.wait()
        os.close(self._report)
        self.closed = Closed(self._pids("stopped"), self._pids("left"))
        return self.closed

    def _pids(self, word: str) -> tuple[int, ...]:
        for line in self.lines:
            if line.startswith(word + " "):
                return tuple(int(p) for p in line.split(" ", 1)[1].split(",") if p.strip().isdigit())
        return ()
