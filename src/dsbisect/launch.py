"""Run a repro under a distributed launcher, watch it, and stop its whole process tree.

The launcher runs in a new session (so in a process group of its own) with its output
in ``<run dir>/launcher.log`` and each rank's in ``<run dir>/ranks/``.  The watch loop
reads every log as it grows and ends the run when:

- the launcher exits;
- a collective-timeout line appears (NCCL's watchdog, gloo's recv/send timeout) and the run
  then makes no progress: the line is evidence, not a verdict (the words also turn up in config
  dumps, warnings, and timeouts a script caught and retried).  A real timeout ends the job by
  itself (gloo's raises and the rank exits, NCCL's watchdog aborts the process; the launcher
  then stops the rest): the loop gives the ranks ``hang_grace`` seconds for that (and for the
  flight-recorder dumps), or until every expected dump is written.  A run still going then is
  ended as a hang only if no log grew for ``REPORT_S`` seconds after the last timeout line (the
  report that comes with it, a traceback, does not count) and no rank's stack moved
  (``on_idle``); else the line stops counting and the run is watched on as before (a later
  line arms the check again).  ``outcome.classify`` then weighs the line: a run that exited
  0 passed, and a failed one is a hang only when a rank died of the timeout;
- no log grows for ``idle_timeout`` seconds and ``on_idle`` finds that no rank's stack
  moved since the last look (a silent but busy rank resets the clock): a hang;
- the wall deadline passes: a hang;
- the early deadlock verdict (``early_hang``): once the output has been quiet for
  ``early_after`` seconds, rounds of two requests ``early_gap`` seconds apart ask every rank's
  hook for its flight-recorder state and main-thread stack, beside the watch loop; when
  ``deadlock.prove`` finds that the ranks' pending collectives can never complete, and no log
  grew since the round began, the run is a hang without waiting for the collective timeout.

Before a hang is torn down, ``on_hang`` gets the live rank processes (for stacks), and
when the output first goes quiet ``on_quiet`` does too (a snapshot taken while the ranks
are still stuck, before a gloo timeout turns them into tracebacks).

The launcher is started below a guard (``guard``: a child subreaper that kills everything
below it when dsbisect closes its pipe or dies, even of SIGKILL).  Teardown sends SIGINT,
SIGTERM then SIGKILL (``GRACE``: 1 s, 1 s) to the group, to every descendant ever seen and to
every process that lost its parent (re-parented to the guard), then the guard kills what is
left, and the pids still alive are returned.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from . import deadlock
from .files import DATA_LIMIT, read_small
from .guard import Guarded
from .outcome import HANG_PATTERNS, is_hang_text  # noqa: F401 - HANG_PATTERNS: its old home
from .rundir import RunDir


POLL_S = 0.25
REPORT_S = 1.0  # output within this long of a timeout line is its report, not progress
RSS_EVERY_S = 1.0  # how often the run's memory (the RSS of its processes, summed) is sampled
CHUNK = 1 << 20  # bytes of a log read at once
LINE_LIMIT = 64 << 10  # the most of one unfinished line kept between reads


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
    early_hang: bool = True  # prove a deadlock from the ranks' flight recorders before the timeout
    early_after: float = 4.0  # seconds of quiet output before the first request
    early_gap: float = 3.0  # seconds between the two snapshots of one round
    early_answer: float = 5.0  # how long one request waits for every rank's answer
    early_every: float = 4.0  # seconds between rounds while the output stays quiet
    early_min_gone: float = 5.0  # a rank's process gone this long counts as exited, not crashing


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
    escaped: tuple[int, ...] = ()  # processes that had left the launcher's tree (stopped below the guard)
    peak_rss: int = 0  # the most memory the run's processes held at once (sum of RSS, sampled), bytes


RankHook = Callable[[list[psutil.Process], str], None]


@dataclass
class _Watch:
    """Incremental reader of every log of the run."""

    run: RunDir
    offsets: dict[Path, int] = field(default_factory=dict)
    last_growth: float = field(default_factory=time.monotonic)
    partial: dict[Path, str] = field(default_factory=dict)

    def new_lines(self) -> Iterator[str]:
        """The lines written since the last call, read a bounded chunk at a time: a rank that
        prints hundreds of MB costs time, never memory."""
        for path in self._logs():
            try:
                size = path.stat().st_size
            except OSError:
                continue
            start = self.offsets.get(path, 0)
            if size <= start:
                continue
            self.last_growth = time.monotonic()
            with open(path, "rb") as f:
                f.seek(start)
                while start < size:
                    chunk = f.read(min(CHUNK, size - start))
                    if not chunk:
                        break
                    start += len(chunk)
                    self.offsets[path] = start
                    text = self.partial.pop(path, "") + chunk.decode("utf-8", "replace")
                    parts = text.split("\n")
                    if not text.endswith("\n"):
                        self.partial[path] = parts.pop()[-LINE_LIMIT:]  # a line without end, kept short
                    yield from parts

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
        proc = Guarded.start(spec.argv, spec.env, spec.cwd, log)
    seen: dict[int, psutil.Process] = {}
    done = threading.Event()
    if cancel is not None:
        threading.Thread(target=_backstop, args=(proc, cancel, done), name="dsbisect-backstop", daemon=True).start()
    try:
        result = _watch(proc, spec, seen, t0, on_hang, on_quiet, on_idle, cancel)
    except BaseException:
        teardown(proc, seen)
        raise
    finally:
        done.set()
    survivors, escaped = teardown(proc, seen)
    return LaunchResult(**(result | {"survivors": survivors, "pids": tuple(sorted(seen)), "log": log_path,
                                     "escaped": escaped}))


BACKSTOP_S = 3.0  # after a cancel, the longest the watch loop's own teardown may take to begin and end


def _backstop(proc: Guarded, cancel: threading.Event, done: threading.Event) -> None:
    """Once ``cancel`` is set (a signal stopped dsbisect), the launch's thread tears down as soon
    as it looks; if it is held up (a stack snapshot of a stuck rank takes up to 20 s), the guard
    kills the whole tree after BACKSTOP_S, so that the 5 s promise holds whatever the thread does."""
    while not done.is_set():
        if cancel.wait(0.25):
            if not done.wait(BACKSTOP_S):
                proc.kill_tree()
            return


def teardown(proc: Guarded, seen: dict[int, psutil.Process]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Stop the run's whole tree: the launcher's group, every descendant ever seen and every
    process that lost its parent (below the guard), INT then TERM then KILL; then the guard
    kills whatever is left.  (survivors, the pids that had left the launcher's tree)"""
    orphans = proc.orphans()
    for p in orphans:
        seen.setdefault(p.pid, p)
    survivors = stop_tree(proc.pid, seen)
    closed = proc.close()
    left = sorted(set(closed.left) | {pid for pid in survivors if pid not in closed.stopped})
    return tuple(left), tuple(sorted({p.pid for p in orphans} | (set(closed.stopped) - set(seen))))


def _watch(proc, spec: LaunchSpec, seen, t0, on_hang, on_quiet, on_idle, cancel) -> dict:
    watch = _Watch(spec.run)
    dumps = _Dumps(spec)
    snapshot = _Snapshot(on_quiet)
    early = _Early(spec, t0) if spec.early_hang else None
    try:
        return _watch_loop(proc, spec, seen, t0, on_hang, on_idle, cancel, watch, dumps, snapshot, early)
    finally:
        if early is not None:
            early.stop()


def _watch_loop(proc, spec: LaunchSpec, seen, t0, on_hang, on_idle, cancel, watch, dumps, snapshot,
                early) -> dict:
    words, quiet_taken, rss = _Words(), False, _Rss()
    while True:
        if cancel is not None and cancel.is_set():
            raise KeyboardInterrupt
        code = proc.poll()
        _track(proc.pid, seen)
        rss.sample(seen)
        for line in watch.new_lines():
            if is_hang_text(line) and words.see(line, time.monotonic()):
                snapshot.wait()
                _call(on_hang, seen, "watchdog")
        now = time.monotonic()
        if code is not None:  # the snapshot's py-spy and faulthandler end with the ranks
            snapshot.wait(timeout=1.0)
            return _ended(code, now - t0, words.first, words.first_at, t0, rss=rss.peak)
        if words.armed_at is not None and (now - words.armed_at > spec.hang_grace
                                           or dumps.ready(words.armed_at, now)):
            if words.stalled(watch.last_growth) and _stuck(on_idle, seen, snapshot):
                return _ended(None, now - t0, words.first, words.first_at, t0, timed_out=True, rss=rss.peak,
                              why=f"{words.first[:300]} (then no output and no rank's stack moved "
                                  f"for {now - words.last_at:.0f} s)")
            words.disarm()  # the ranks went on: the line was no verdict; watch on
        if now - t0 > spec.wall_timeout:
            snapshot.wait()
            _call(on_hang, seen, "deadline")
            return _ended(None, now - t0, words.first, words.first_at or now, t0, timed_out=True, rss=rss.peak,
                          why=f"no exit within the {spec.wall_timeout:g} s wall timeout")
        quiet = now - watch.last_growth
        armed = words.armed_at is not None
        if early is not None and not armed:
            found = early.proven(watch.last_growth, seen, now)
            if found is not None:
                snapshot.wait()
                _call(on_hang, seen, "deadlock")
                early.keep(found)
                return _ended(None, now - t0, "", t0 + found.proof.at, t0, timed_out=True, why=found.proof.text,
                              rss=rss.peak)
            early.poll(quiet, now)
        if spec.quiet_after and not quiet_taken and quiet > spec.quiet_after and not armed:
            quiet_taken = snapshot.start(seen)
        if quiet_taken and quiet < 1:
            quiet_taken = False
        if spec.idle_timeout and quiet > spec.idle_timeout and not armed:
            if not _stuck(on_idle, seen, snapshot):
                watch.last_growth = time.monotonic()  # the ranks are busy, only silent
            else:
                return _ended(None, now - t0, words.first, now, t0, timed_out=True, rss=rss.peak,
                              why=f"no output and no rank's stack moved for {spec.idle_timeout:g} s")
        time.sleep(POLL_S)


def _stuck(on_idle: IdleCheck | None, seen: dict[int, psutil.Process], snapshot: _Snapshot) -> bool:
    """Whether no rank's stack moved since the last look (True where stacks cannot be compared)."""
    snapshot.wait()
    return on_idle is None or on_idle(rank_processes(seen))


@dataclass
class _Words:
    """The collective-timeout lines of a run: the first (evidence for the record) and, while the
    check it arms is pending, when the first and the last of them came."""

    first: str = ""
    first_at: float | None = None
    armed_at: float | None = None
    last_at: float = 0.0

    def see(self, line: str, now: float) -> bool:
        """Note a timeout line; True when it arms the check (the stacks are then worth taking)."""
        if not self.first:
            self.first, self.first_at = line.strip()[:500], now
        self.last_at = now
        if self.armed_at is None:
            self.armed_at = now
            return True
        return False

    def stalled(self, last_growth: float) -> bool:
        """No log grew after the last timeout line's report."""
        return last_growth <= self.last_at + REPORT_S

    def disarm(self) -> None:
        self.armed_at = None


@dataclass
class _Rss:
    """The peak of the run's memory: the RSS of its live processes, summed (shared pages count
    once per process, so this errs high: what a slot count wants)."""

    peak: int = 0
    at: float = 0.0

    def sample(self, seen: dict[int, psutil.Process]) -> None:
        now = time.monotonic()
        if now - self.at < RSS_EVERY_S:
            return
        self.at = now
        total = 0
        for p in list(seen.values()):
            try:
                total += p.memory_info().rss
            except psutil.Error:
                continue
        self.peak = max(self.peak, total)


@dataclass(frozen=True)
class _Found:
    proof: deadlock.Proof
    started: float  # monotonic time the round's first snapshot was complete
    requests: tuple[int, int]
    snapshots: tuple[deadlock.Snapshot, deadlock.Snapshot]


class _Early:
    """The early deadlock verdict's rounds, on a thread beside the watch loop.

    A round writes ``fr/request.<n>``, waits for every rank's answer (or for its process to be
    gone), sleeps ``early_gap`` seconds, asks again, and hands both snapshots to
    ``deadlock.prove``.  The watch loop takes a proof only when no log grew after the first
    snapshot was complete (what a rank did before it answered is in its answer; what it did
    after shows in the second snapshot, or in its output).  A request that no rank answered
    (no process group yet) is followed by the next round within a second; a round that proved
    nothing, after ``early_every`` seconds.  The answers of a round that proved nothing stay
    until the next round begins."""

    def __init__(self, spec: LaunchSpec, t0: float) -> None:
        self.spec, self.t0 = spec, t0
        self.ranks = _RankTable()
        self.thread: threading.Thread | None = None
        self.stopped = threading.Event()
        self.n = 0
        self.next_at = 0.0
        self.found: _Found | None = None
        self.error = ""  # why the last round failed, for a debugger

    def proven(self, last_growth: float, seen: dict[int, psutil.Process], now: float) -> _Found | None:
        """A proof from a round during which no log grew (else it is dropped); tracks the ranks."""
        self.ranks.update(seen, now)
        found = self.found
        if found is not None and last_growth > found.started:
            self._log(f"the proof of requests {found.requests[0]}+{found.requests[1]} is dropped: the output "
                      f"grew at {last_growth - self.t0:.1f} s, after the first snapshot at "
                      f"{found.started - self.t0:.1f} s")
            self.found = found = None  # a rank printed something: it moved
        return found

    def poll(self, quiet: float, now: float) -> None:
        """Start a round when the output has been quiet long enough and none is under way."""
        if quiet < self.spec.early_after or now < self.next_at or self.found is not None:
            return
        if self.thread is not None and self.thread.is_alive():
            return
        self.thread = threading.Thread(target=self._round, name="dsbisect-early-hang", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()

    def keep(self, found: _Found) -> None:
        """Write the proof beside the answers it stands on, for ``dsbisect show``."""
        proof = found.proof
        data = {
            "text": proof.text, "rule": proof.rule, "at": round(proof.at, 2), "requests": list(found.requests),
            "wall_time": time.time(), "gone": list(proof.gone),
            "waits": {str(r): [c.label for c in heads] for r, heads in proof.waits},
            "snapshots": [{"request": n, "at": round(snap.at, 2),
                           "ranks": {str(s.rank): s.describe() for s in snap.ranks}}
                          for n, snap in zip(found.requests, found.snapshots)],
        }
        try:
            _write_json(self.spec.run.deadlock_proof, data)
        except OSError:
            pass

    def _round(self) -> None:
        pause = self.spec.early_every
        try:
            self._forget()
            first = self._snapshot()
            if first is None:
                pause = 1.0
                return
            if self.stopped.wait(self.spec.early_gap):
                return
            second = self._snapshot()
            if second is None:
                return
            proof = deadlock.prove(first[1], second[1], min_gone=self.spec.early_min_gone)
            head = f"at {second[1].at:.1f} s, requests {first[0]}+{second[0]}: "
            if proof is not None:
                self._log(head + "proof: " + proof.text)
                self.found = _Found(proof, first[2], (first[0], second[0]), (first[1], second[1]))
            else:
                self._log(head + "no proof; " + " | ".join(f"rank {s.rank}: {s.describe()}"
                                                           for s in second[1].ranks))
        except Exception as e:  # noqa: BLE001 - the early verdict is optional; the timeout still stands
            self.error = f"{type(e).__name__}: {e}"
            self._log(f"at {time.monotonic() - self.t0:.1f} s: round failed: {self.error}")
        finally:
            self.next_at = time.monotonic() + pause

    def _snapshot(self) -> tuple[int, deadlock.Snapshot, float] | None:
        """Ask every rank once: (request, snapshot, monotonic time it was complete); None when no
        rank answered (or the run is over)."""
        if self.stopped.is_set():
            return None
        run = self.spec.run
        self.n += 1
        n = self.n
        run.fr_dir.mkdir(parents=True, exist_ok=True)
        _write_json(run.fr_request(n), {"n": n, "time": time.time()})
        deadline = time.monotonic() + self.spec.early_answer
        while True:
            look = time.monotonic()
            answers = _read_answers(run, n)
            world = max((s.world_size or 0 for s in answers.values()), default=0)
            now = time.monotonic()
            gone = {r: self.ranks.gone_for(r, now) for r in range(world)}
            if world and all(r in answers or gone[r] is not None for r in range(world)):
                break
            if now > deadline or self.stopped.wait(0.1):
                break
        if not answers:
            self._log(f"at {time.monotonic() - self.t0:.1f} s, request {n}: no rank answered")
            return None
        ranks = tuple(answers[r] if r in answers else
                      deadlock.gone_snapshot(r, gone[r]) if gone.get(r) is not None else
                      deadlock.missing_snapshot(r) for r in range(world))
        return n, deadlock.Snapshot(at=time.monotonic() - self.t0, ranks=ranks), look

    def _log(self, line: str) -> None:
        try:
            with open(self.spec.run.fr_rounds, "a") as f:
                f.write(line + "\n")
        except OSError:
            pass

    def _forget(self) -> None:
        """Drop the answers of rounds that proved nothing (requests stay: the hook counts them)."""
        for path in self.spec.run.fr_dir.glob("rank*.json"):
            try:
                path.unlink()
            except OSError:
                pass


def _read_answers(run: RunDir, n: int) -> dict[int, deadlock.RankSnapshot]:
    import json

    out = {}
    for rank, path in run.fr_answers(n).items():
        try:
            out[rank] = deadlock.rank_snapshot(json.loads(read_small(path, DATA_LIMIT)), rank)
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    return out


def _write_json(path: Path, data: dict) -> None:
    import json

    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


class _RankTable:
    """Which global rank each process is (RANK in its environment, read while it lives), and
    since when a rank has no live process: what tells an exited rank from one that is slow."""

    NEW_S = 5.0  # a process without RANK is looked at again for this long (fork before exec)

    def __init__(self) -> None:
        self.procs: dict[int, tuple[int, psutil.Process]] = {}  # pid -> (rank, process)
        self.first_look: dict[int, float] = {}  # pids that had no RANK (yet)
        self.gone_since: dict[int, float] = {}
        self.lock = threading.Lock()

    def update(self, seen: dict[int, psutil.Process], now: float) -> None:
        found: dict[int, tuple[int, psutil.Process]] = {}
        for pid, p in list(seen.items()):
            if pid in self.procs or now - self.first_look.setdefault(pid, now) > self.NEW_S:
                continue
            rank = _safe_env(p, "RANK")
            if rank is not None and rank.strip().isdigit():
                found[pid] = (int(rank), p)
        for pid, (rank, p) in found.items():
            if _safe_ppid(p) not in found and _safe_ppid(p) not in self.procs:  # not a rank's child
                self.procs[pid] = (rank, p)
            self.first_look[pid] = float("-inf")
        live = {rank for rank, p in self.procs.values() if is_live(p)}
        with self.lock:
            for rank in {rank for rank, _ in self.procs.values()}:
                if rank in live:
                    self.gone_since.pop(rank, None)
                else:
                    self.gone_since.setdefault(rank, now)

    def gone_for(self, rank: int, now: float) -> float | None:
        """Seconds since the rank was last seen with a live process (None: alive, or never seen)."""
        with self.lock:
            since = self.gone_since.get(rank)
        return None if since is None else now - since


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


def _ended(code, seconds, hang_line, hang_at, t0, timed_out=False, why="", rss=0) -> dict:
    return {
        "peak_rss": rss,
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


GRACE = (1.0, 1.0)  # seconds after SIGINT, then after SIGTERM, before SIGKILL: all gone well within 5 s


def stop_tree(pid: int, seen: dict[int, psutil.Process], grace: tuple[float, float] = GRACE) -> tuple[int, ...]:
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
