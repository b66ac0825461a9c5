"""Run a repro under a distributed launcher, watch it, and stop its whole process tree.

The launcher runs in a new session (so in a process group of its own) with its output
in ``<run dir>/launcher.log`` and each rank's in ``<run dir>/ranks/``.  The watch loop
reads every log as it grows and ends the run when:

- the launcher exits;
- a collective-timeout line appears (NCCL's watchdog, gloo's recv/send timeout): a
  *hang*, ended after ``hang_grace`` seconds so that flight-recorder dumps get written;
- no log grows for ``idle_timeout`` seconds and ``on_idle`` finds that no rank's stack
  moved since the last look (a silent but busy rank resets the clock): a hang;
- the wall deadline passes: a hang.

Before a hang is torn down, ``on_hang`` gets the live rank processes (for stacks), and
when the output first goes quiet ``on_quiet`` does too (a snapshot taken while the ranks
are still stuck, before a gloo timeout turns them into tracebacks).  Teardown sends
SIGINT, SIGTERM then SIGKILL to the group and to every descendant ever seen, and checks
that none survives.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess  # the launcher is the one long-lived child; proc.run runs the rest
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .rundir import RunDir

HANG_PATTERNS = (
    re.compile(r"Watchdog caught collective operation timeout"),
    re.compile(r"collective operation timeout", re.I),
    re.compile(r"Timed out waiting \d+ms for (recv|send) operation"),
    re.compile(r"NCCL watchdog thread terminated"),
    re.compile(r"ProcessGroupGloo.*[Tt]imed out"),
)

POLL_S = 0.25


@dataclass(frozen=True)
class LaunchSpec:
    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: Path
    run: RunDir
    wall_timeout: float
    idle_timeout: float | None = None
    quiet_after: float | None = None
    hang_grace: float = 15.0
    expected_ranks: int = 0  # when this many flight-recorder dumps exist, the grace ends early
    dump_settle: float = 5.0  # or when some exist and no other came for this long


@dataclass(frozen=True)
class LaunchResult:
    exit_code: int | None
    seconds: float
    timed_out: bool = False
    why: str = ""
    hang_line: str = ""
    hang_after: float | None = None
    survivors: tuple[int, ...] = ()
    pids: tuple[int, ...] = ()
    log: Path | None = None


RankHook = Callable[[list[psutil.Process], str], None]


@dataclass
class _Watch:
    """Incremental reader of every log of the run."""

    run: RunDir
    offsets: dict[Path, int] = field(default_factory=dict)
    last_growth: float = field(default_factory=time.monotonic)
    partial: dict[Path, str] = field(default_factory=dict)

    def new_lines(self) -> list[str]:
        lines: list[str] = []
        for path in self._logs():
            try:
                size = path.stat().st_size
            except OSError:
                continue
            start = self.offsets.get(path, 0)
            if size <= start:
                continue
            with open(path, "rb") as f:
                f.seek(start)
                chunk = f.read(size - start).decode("utf-8", "replace")
            self.offsets[path] = size
            self.last_growth = time.monotonic()
            text = self.partial.pop(path, "") + chunk
            parts = text.split("\n")
            if not text.endswith("\n"):
                self.partial[path] = parts.pop()
            lines += parts
        return lines

    def _logs(self) -> list[Path]:
        return [p for p in self.run.logs() if p.is_file()]


def free_port(avoid: set[int] = frozenset()) -> int:
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port
    raise RuntimeError("no free port")


IdleCheck = Callable[[list[psutil.Process]], bool]


def launch(spec: LaunchSpec, on_hang: RankHook | None = None, on_quiet: RankHook | None = None,
           on_idle: IdleCheck | None = None, cancel: threading.Event | None = None) -> LaunchResult:
    """Run ``spec`` to its end; ``cancel`` (set from another thread) stops it like Ctrl-C."""
    spec.run.path.mkdir(parents=True, exist_ok=True)
    log_path = spec.run.launcher_log
    t0 = time.monotonic()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(spec.argv), env=spec.env, cwd=spec.cwd, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
    seen: dict[int, psutil.Process] = {}
    try:
        result = _watch(proc, spec, seen, t0, on_hang, on_quiet, on_idle, cancel)
    except BaseException:
        stop_tree(proc.pid, seen)
        raise
    survivors = stop_tree(proc.pid, seen)
    return LaunchResult(**(result | {"survivors": survivors, "pids": tuple(sorted(seen)), "log": log_path}))


def _watch(proc, spec: LaunchSpec, seen, t0, on_hang, on_quiet, on_idle, cancel) -> dict:
    watch = _Watch(spec.run)
    dumps = _Dumps(spec)
    snapshot = _Snapshot(on_quiet)
    hang_line, hang_at, quiet_taken = "", None, False
    while True:
        if cancel is not None and cancel.is_set():
            raise KeyboardInterrupt
        code = proc.poll()
        _track(proc.pid, seen)
        for line in watch.new_lines():
            if not hang_line and any(p.search(line) for p in HANG_PATTERNS):
                hang_line, hang_at = line.strip()[:500], time.monotonic()
                snapshot.wait()
                _call(on_hang, seen, "watchdog")
        now = time.monotonic()
        if code is not None:  # the snapshot's py-spy and faulthandler end with the ranks
            snapshot.wait(timeout=1.0)
            return _ended(code, now - t0, hang_line, hang_at, t0)
        if hang_at is not None and (now - hang_at > spec.hang_grace or dumps.ready(hang_at, now)):
            return _ended(None, now - t0, hang_line, hang_at, t0, why="collective timeout")
        if now - t0 > spec.wall_timeout:
            snapshot.wait()
            _call(on_hang, seen, "deadline")
            return _ended(None, now - t0, hang_line, hang_at or now, t0, timed_out=True,
                          why=f"no exit within the {spec.wall_timeout:g} s wall timeout")
        quiet = now - watch.last_growth
        if spec.quiet_after and not quiet_taken and quiet > spec.quiet_after and not hang_line:
            quiet_taken = snapshot.start(seen)
        if quiet_taken and quiet < 1:
            quiet_taken = False
        if spec.idle_timeout and quiet > spec.idle_timeout and not hang_line:
            snapshot.wait()
            if on_idle is not None and not on_idle(rank_processes(seen)):
                watch.last_growth = time.monotonic()  # the ranks are busy, only silent
            else:
                return _ended(None, now - t0, hang_line, now, t0, timed_out=True,
                              why=f"no output and no rank's stack moved for {spec.idle_timeout:g} s")
        time.sleep(POLL_S)


class _Dumps:
    """The flight-recorder dumps of a hung run.  The grace after the watchdog line ends when every
    rank wrote one (and a second passed for the last write), or when some did and no other came
    for ``dump_settle`` seconds: a rank that got past the collective (a barrier that matched the
    other rank's all-reduce) has nothing timing out, so it never dumps."""

    def __init__(self, spec: LaunchSpec) -> None:
        self.spec, self.count, self.changed = spec, 0, 0.0

    def ready(self, hang_at: float, now: float) -> bool:
        if not self.spec.expected_ranks or now - hang_at < 1.0:
            return False
        n = len(self.spec.run.fr_dumps())
        if n != self.count:
            self.count, self.changed = n, now
        if n >= self.spec.expected_ranks:
            return now - self.changed >= 1.0
        return n > 0 and now - self.changed >= self.spec.dump_settle


def _ended(code, seconds, hang_line, hang_at, t0, timed_out=False, why="") -> dict:
    return {
        "exit_code": code,
        "seconds": seconds,
        "timed_out": timed_out,
        "why": why,
        "hang_line": hang_line,
        "hang_after": (hang_at - t0) if hang_at is not None else None,
    }


class _Snapshot:
    """The stacks taken when the output first goes quiet, on a thread of their own: the loop
    keeps watching, so a job that ends meanwhile is seen at once (a py-spy dump of a CUDA rank
    can take seconds).  Any other look at the ranks waits for it first."""

    def __init__(self, hook: RankHook | None) -> None:
        self.hook, self.thread = hook, None

    def start(self, seen: dict[int, psutil.Process]) -> bool:
        """Take the snapshot unless one is under way; True when one is (or was just) taken."""
        if self.hook is None:
            return False
        if self.thread is None or not self.thread.is_alive():
            procs = rank_processes(seen)
            self.thread = threading.Thread(target=self.hook, args=(procs, "quiet"), name="dsbisect-quiet",
                                           daemon=True)
            self.thread.start()
        return True

    def wait(self, timeout: float = 60.0) -> None:
        if self.thread is not None:
            self.thread.join(timeout)


def _call(hook: RankHook | None, seen: dict[int, psutil.Process], reason: str) -> None:
    if hook is None:
        return
    hook(rank_processes(seen), reason)


def _track(pid: int, seen: dict[int, psutil.Process]) -> None:
    try:
        root = psutil.Process(pid)
        for p in [root, *root.children(recursive=True)]:
            seen.setdefault(p.pid, p)
    except psutil.NoSuchProcess:
        pass


def rank_processes(seen: dict[int, psutil.Process]) -> list[psutil.Process]:
    """The live processes among ``seen`` that are ranks (they carry RANK in their environment)."""
    ranks = []
    for p in seen.values():
        try:
            if is_live(p) and "RANK" in p.environ():
                ranks.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    # Only the top-most process of each rank (not its dataloader workers).
    pids = {p.pid for p in ranks}
    top = [p for p in ranks if _safe_ppid(p) not in pids]
    return sorted(top, key=lambda p: int(_safe_env(p, "RANK") or 0))


def _safe_ppid(p: psutil.Process) -> int | None:
    try:
        return p.ppid()
    except psutil.Error:
        return None


def _safe_env(p: psutil.Process, key: str) -> str | None:
    try:
        return p.environ().get(key)
    except psutil.Error:
        return None


def stop_tree(pid: int, seen: dict[int, psutil.Process], grace: tuple[float, float] = (2.0, 3.0)) -> tuple[int, ...]:
    """Stop the group led by ``pid`` and every descendant ever seen: INT, TERM, KILL.

    Returns the pids still alive afterwards (empty unless something is unkillable).
    """
    _track(pid, seen)
    for sig, wait in ((signal.SIGINT, grace[0]), (signal.SIGTERM, grace[1]), (signal.SIGKILL, 5.0)):
        alive = _still_running(pid, seen)
        if not alive:
            break
        _signal_group(pid, sig)
        for p in alive:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=wait)
    _reap(pid)
    return tuple(sorted(p.pid for p in _still_running(pid, seen)))


def is_live(proc: psutil.Process) -> bool:
    """Running and not a zombie (False for a process that is gone)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _still_running(pid: int, seen: dict[int, psutil.Process]) -> list[psutil.Process]:
    alive = [p for p in seen.values() if is_live(p)]
    try:
        group = {q.pid for q in psutil.process_iter() if _pgid(q.pid) == pid}
    except psutil.Error:
        group = set()
    for gpid in group - {p.pid for p in alive}:
        try:
            q = psutil.Process(gpid)
            if q.status() != psutil.STATUS_ZOMBIE:
                alive.append(q)
        except psutil.Error:
            continue
    return alive


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
