"""The one way dsbisect runs a short command and reads what it printed.

Every outside program that is run to completion (uv, pip, git, py-spy, nvidia-smi, ssh,
sbatch...) goes through ``run``; only ``launch`` starts the long-lived launcher itself.
``run`` never raises for a failing command: the caller reads ``Completed`` and decides.
``is_live`` tells a running process from one that is gone or a zombie.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

# Variables of dsbisect's own environment that must not leak into the venvs it runs.
_NOT_INHERITED = ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "CONDA_PREFIX", "UV_PROJECT_ENVIRONMENT")


@dataclass(frozen=True)
class Keep:
    """How much of one output stream ``run`` keeps: its first ``head`` and last ``tail`` bytes
    (what lies between is dropped as it arrives, so a chatty program costs time, not memory)."""

    head: int
    tail: int


KEEP = Keep(256 << 10, 2 << 20)  # messages and reports: the start and, mostly, the end
DATA = Keep(64 << 20, 0)  # output read as data (git log): whole or, past 64 MB, refused by the caller


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int | None  # None: it ran past its timeout (and was killed) or could not start
    stdout: str
    stderr: str
    error: str = ""  # why it did not run to its end ("not found", "timed out after 20 s")
    cut: int = 0  # bytes dropped from the middle of stdout and stderr (see Keep)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def last_line(self, default: str = "") -> str:
        """The last non-empty line of stderr (else stdout), else the error or ``default``."""
        return last_line(self.stderr or self.stdout) or self.error or default or f"exit {self.returncode}"


class Cancelled(Exception):
    """A ``run`` stopped because its thread's cancel event was set (see ``cancellable``)."""


_local = threading.local()


@contextmanager
def cancellable(stop: threading.Event) -> Iterator[None]:
    """Within it, each ``run`` of this thread runs in its own process group, and once ``stop``
    is set the group is killed (a build's compilers too) and ``run`` raises ``Cancelled``;
    a ``run`` asked after ``stop`` is set starts nothing.  For work that may stop being
    needed, such as a bisection's look-ahead builds."""
    before = getattr(_local, "stop", None)
    _local.stop = stop
    try:
        yield
    finally:
        _local.stop = before


def stop_event() -> threading.Event | None:
    """This thread's cancel event (``cancellable``), None outside one: a wait looks at it too."""
    return getattr(_local, "stop", None)


def run(argv: Sequence[str | Path], *, env: Mapping[str, str] | None = None, cwd: Path | None = None,
        timeout: float | None = None, stdout=None, keep: Keep = KEEP) -> Completed:
    """Run ``argv`` to its end with stdin closed; each output stream read as it comes, at most
    ``keep`` of it kept as text (or stdout written into the file ``stdout``)."""
    args = tuple(str(a) for a in argv)
    stop: threading.Event | None = getattr(_local, "stop", None)
    if stop is not None and stop.is_set():
        raise Cancelled(f"{args[0]}: cancelled before it started")
    try:
        proc = subprocess.Popen(args, env=dict(env) if env is not None else None, cwd=cwd,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE if stdout is None else stdout,
                                stderr=subprocess.PIPE, start_new_session=stop is not None)
    except OSError as e:
        return Completed(args, None, "", "", f"{args[0]}: {e.strerror or e}")
    streams = {proc.stderr: _Kept(keep)} | ({proc.stdout: _Kept(keep)} if stdout is None else {})
    kill = (lambda: _kill_group(proc)) if stop is not None else proc.kill
    try:
        finished = _drain(streams, None if timeout is None else time.monotonic() + timeout, stop)
        if stop is not None and stop.is_set():
            kill()
            raise Cancelled(f"{args[0]}: cancelled")
        if not finished:
            kill()
            _drain(streams, time.monotonic() + 2.0)  # what it printed before; a grandchild may hold the pipe
    except BaseException:  # Ctrl-C, SIGTERM: the command does not outlive the reason it ran
        kill()
        raise
    finally:
        for f in streams:
            f.close()
        code = proc.wait()
    out, err = streams.get(proc.stdout, _Kept(keep)), streams[proc.stderr]
    error = "" if finished else f"no answer within {timeout:g} s"
    return Completed(args, code if finished else None, out.text(), err.text(), error, out.cut + err.cut)


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the process group ``proc`` leads (it was started in a session of its own)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _drain(streams: dict, deadline: float | None, stop: threading.Event | None = None) -> bool:
    """Read every stream to its end (True), or until ``deadline`` or ``stop`` (False)."""
    with selectors.DefaultSelector() as sel:
        for f in streams:
            if not f.closed:
                sel.register(f, selectors.EVENT_READ)
        while sel.get_map():
            if stop is not None and stop.is_set():
                return False
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                return False
            if stop is not None:  # looks at ``stop`` a few times a second
                wait = 0.2 if wait is None else min(wait, 0.2)
            for key, _ in sel.select(wait):
                data = os.read(key.fd, 1 << 16)
                if data:
                    streams[key.fileobj].add(data)
                else:
                    sel.unregister(key.fileobj)
    return True


class _Kept:
    """The head and tail of one stream, within a ``Keep``.  The tail is one buffer cut from its
    front once it holds a megabyte (or its own size) more than it keeps: no small pieces come
    and go, so a chatty program does not fragment the heap (a deque of slices grew to 100 MB)."""

    def __init__(self, keep: Keep) -> None:
        self.keep, self.head, self.tail, self.cut = keep, bytearray(), bytearray(), 0
        self.slack = max(keep.tail, 1 << 20)

    def add(self, data: bytes) -> None:
        room = self.keep.head - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        if len(self.tail) > self.keep.tail + self.slack:
            self._trim()

    def _trim(self) -> None:
        extra = len(self.tail) - self.keep.tail
        if extra > 0:
            del self.tail[:extra]
            self.cut += extra

    def text(self) -> str:
        self._trim()
        head = bytes(self.head).decode("utf-8", "replace")
        tail = bytes(self.tail)
        if not self.cut:
            return head + tail.decode("utf-8", "replace")
        tail = tail.split(b"\n", 1)[-1] if b"\n" in tail else tail  # from the first whole line
        return f"{head}\n[dsbisect: {self.cut} bytes of this output were cut here]\n{tail.decode('utf-8', 'replace')}"


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without what would confuse a venv's python or uv."""
    env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    return env | dict(extra or {})


UNSET = "\0unset"  # a case's env value that removes the variable (a setting absent on one side); never a real value


def without_unset(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` less the variables a case's env removes (their value is ``UNSET``)."""
    return {k: v for k, v in env.items() if v != UNSET}


def writes_bytecode(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for one of dsbisect's own helper processes (a wheel build, the bytecode caching
    of a new venv): Python may cache the bytecode of what it imports, also where the user's
    environment says PYTHONDONTWRITEBYTECODE. A run of the user's job gets their environment."""
    return {k: v for k, v in env.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def is_live(process: psutil.Process) -> bool:
    """Running and not a zombie (False for a process that is gone)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
