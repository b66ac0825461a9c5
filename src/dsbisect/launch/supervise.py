"""Run a repro under a distributed launcher, watch it, and stop its whole process tree.

The launcher runs in a new session (so in a process group of its own) with its output
in ``<run dir>/launcher.log`` and each rank's in ``<run dir>/ranks/``.  The watch loop
reads every log as it grows and ends the run when:

- the launcher exits;
- no log grows for ``idle_timeout`` seconds and the ranks are idle by their process state: no
  rank's stack moved since the last look (``on_idle``), their children used no CPU, and no rank
  used CPU itself unless its stack is parked in a torch.distributed wait (``on_parked``: NCCL's
  waits spin).  Silence alone is no idleness: a silent rank busy in one line is watched on;
- the wall deadline passes: a hang;
- the early deadlock verdict (``early_hang``): once the output has been quiet for
  ``rounds.after`` seconds, rounds of two requests ``rounds.gap`` seconds apart ask every rank's
  hook for its flight-recorder state and main-thread stack, beside the watch loop; when
  ``deadlock.prove`` finds that the ranks' pending collectives can never complete, and no log
  grew since the round began, the run is a hang without waiting for the collective timeout
  (the rounds are ``rounds.Rounds``; the proof comes back typed, in ``LaunchResult.proof``).

A collective-timeout line (NCCL's watchdog, gloo's recv/send timeout) never ends a run: the words
also turn up in retries a script caught, config dumps and warnings.  It takes the stacks
(``on_hang``, evidence) and starts the early verdict's rounds at once, without waiting for quiet;
``outcome.classify`` then weighs it: a run that exited 0 passed, a failed one is a hang only when
a rank died of the timeout (its own exception or abort).

Before a hang is torn down, ``on_hang`` gets the live rank processes (for stacks), and
when the output first goes quiet ``on_quiet`` does too (a snapshot taken while the ranks
are still stuck, before a gloo timeout turns them into tracebacks).

The launcher is started below a guard (``guard``: a child subreaper that kills everything
below it when dsbisect closes its pipe or dies, even of SIGKILL).  The teardown
(``proctree.teardown``) sends SIGINT, SIGTERM then SIGKILL to the group, to every descendant
ever seen and to every process that lost its parent, then the guard kills what is left, and
the pids still alive are returned.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from dsbisect.core.clock import REAL, Clock
from dsbisect.forensics import deadlock
from dsbisect.launch.guard import Guarded
from dsbisect.verdict.outcome import HANG_PATTERNS, is_hang_text  # noqa: F401 - HANG_PATTERNS: its old home
from dsbisect.launch.proctree import rank_processes, teardown, track
from dsbisect.launch.rounds import RoundTimes, Rounds
from dsbisect.core.rundir import RunDir


POLL_S = 0.25
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
    early_hang: bool = True  # prove a deadlock from the ranks' flight recorders before the timeout
    rounds: RoundTimes = RoundTimes()  # when the early verdict's rounds start, and how long they take


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
    escaped: tuple[int, ...] = ()  # processes that had left the launcher's tree (stopped below the guard)
    peak_rss: int = 0  # the most memory the run's processes held at once (sum of RSS, sampled), bytes
    proof: deadlock.Proof | None = None  # the early deadlock verdict's, when it ended the run


RankHook = Callable[[list[psutil.Process], str], None]


@dataclass
class _Watch:
    """Incremental reader of every log of the run."""

    run: RunDir
    clock: Clock = REAL
    offsets: dict[Path, int] = field(default_factory=dict)
    last_growth: float = 0.0
    partial: dict[Path, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.last_growth = self.clock.monotonic()

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
            self.last_growth = self.clock.monotonic()
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


class StartError(Exception):
    """The launch line's program could not be started (exec failed: no such file, not executable)."""

    def __init__(self, program: str, why: str):
        super().__init__(f"{program}: {why}")
        self.program, self.why = program, why


def launch(spec: LaunchSpec, on_hang: RankHook | None = None, on_quiet: RankHook | None = None,
           on_idle: IdleCheck | None = None, cancel: threading.Event | None = None,
           on_parked: IdleCheck | None = None, clock: Clock = REAL) -> LaunchResult:
    """Run ``spec`` to its end; ``cancel`` (set from another thread) stops it like Ctrl-C.
    ``on_parked``: whether every rank's stack, as ``on_idle`` last took it, waits inside
    torch.distributed (without it, a rank that uses CPU is never idle). ``clock``: what the
    deadlines, the idle limit and the early verdict's rounds are timed by (a test drives one)."""
    spec.run.path.mkdir(parents=True, exist_ok=True)
    t0 = clock.monotonic()
    with open(spec.run.launcher_log, "ab") as log:
        try:
            proc = Guarded.start(spec.argv, spec.env, spec.cwd, log)
        except OSError as e:
            raise StartError(str(spec.argv[0]), e.strerror or str(e)) from e
    seen: dict[int, psutil.Process] = {}
    done = threading.Event()
    if cancel is not None:
        threading.Thread(target=_backstop, args=(proc, cancel, done), name="dsbisect-backstop", daemon=True).start()
    try:
        result = _watch(_Hooks(on_hang, on_quiet, on_idle, cancel, on_parked, clock), proc, spec, seen, t0)
    except BaseException:
        teardown(proc, seen)
        raise
    finally:
        done.set()
    survivors, escaped = teardown(proc, seen)
    return replace(result, survivors=survivors, pids=tuple(sorted(seen)), escaped=escaped)


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


@dataclass(frozen=True)
class _Hooks:
    """What the caller of ``launch`` gave to look at the ranks and to stop the run."""

    on_hang: RankHook | None
    on_quiet: RankHook | None
    on_idle: IdleCheck | None
    cancel: threading.Event | None
    on_parked: IdleCheck | None = None
    clock: Clock = REAL


@dataclass(frozen=True)
class _Loop:
    """One launch under watch: what the watch loop reads and who it tells."""

    proc: Guarded
    spec: LaunchSpec
    seen: dict[int, psutil.Process]  # every process seen below the launcher (grows)
    t0: float  # monotonic time of the start
    hooks: _Hooks
    logs: _Watch
    snapshot: _Snapshot
    rounds: Rounds | None  # the early deadlock verdict's, when asked for
    words: _Words
    rss: _Rss
    work: _ChildWork
    cpu: _RankCpu

    @property
    def clock(self) -> Clock:
        return self.hooks.clock

    def ended(self, now: float, code: int | None = None, hang_line: str = "", hang_at: float | None = None,
              why: str = "", proof: deadlock.Proof | None = None) -> LaunchResult:
        return LaunchResult(exit_code=code, seconds=now - self.t0, timed_out=code is None, why=why,
                            hang_line=hang_line, hang_after=None if hang_at is None else hang_at - self.t0,
                            peak_rss=self.rss.peak, proof=proof)


def _watch(hooks: _Hooks, proc: Guarded, spec: LaunchSpec, seen: dict[int, psutil.Process],
           t0: float) -> LaunchResult:
    clock = hooks.clock
    rounds = Rounds(spec.run, spec.rounds, t0, clock) if spec.early_hang else None
    loop = _Loop(proc, spec, seen, t0, hooks, _Watch(spec.run, clock), _Snapshot(hooks.on_quiet), rounds, _Words(),
                 _Rss(clock), _ChildWork(clock), _RankCpu(clock))
    try:
        return _watch_loop(loop)
    finally:
        if rounds is not None:
            rounds.stop()


def _watch_loop(loop: _Loop) -> LaunchResult:
    """Look every POLL_S seconds until one of the ends in the module's docstring comes."""
    quiet_taken = False
    while True:
        if loop.hooks.cancel is not None and loop.hooks.cancel.is_set():
            raise KeyboardInterrupt
        code = loop.proc.poll()
        _look(loop)
        now = loop.clock.monotonic()
        if code is not None:  # the snapshot's py-spy and faulthandler end with the ranks
            loop.snapshot.wait(timeout=1.0)
            return loop.ended(now, code, hang_line=loop.words.first, hang_at=loop.words.first_at)
        found = _deadline(loop, now) or _early(loop, now) or _idle(loop, now)
        if found is not None:
            return found
        quiet = now - loop.logs.last_growth
        if loop.spec.quiet_after and not quiet_taken and quiet > loop.spec.quiet_after:
            quiet_taken = loop.snapshot.start(loop.seen)
        if quiet_taken and quiet < 1:
            quiet_taken = False
        loop.clock.sleep(POLL_S)


def _idle(loop: _Loop, now: float) -> LaunchResult | None:
    """A hang when no log grew for the idle limit and the ranks are idle by their state: no
    child worked, no stack moved, and no rank used CPU outside a torch.distributed wait."""
    if not loop.spec.idle_timeout or now - loop.logs.last_growth <= loop.spec.idle_timeout:
        return None
    if (loop.work.busy(loop.seen) or not _stuck(loop.hooks.on_idle, loop.seen, loop.snapshot)
            or loop.cpu.busy(loop.seen) and not _parked(loop.hooks.on_parked, loop.seen)):
        loop.logs.last_growth = loop.clock.monotonic()  # the ranks are busy, only silent
        loop.cpu.mark(loop.seen)
        return None
    return loop.ended(now, hang_line=loop.words.first, hang_at=now,
                      why=f"no output and no rank's stack moved for {loop.spec.idle_timeout:g} s")


def _parked(on_parked: IdleCheck | None, seen: dict[int, psutil.Process]) -> bool:
    return on_parked is not None and on_parked(rank_processes(seen))


# The share of one core the ranks' children used since the last idle check that makes the run busy,
# not stuck: a compiler gets ~6 % of a core even at a load of 35 on 2 cores; an idle helper
# process that wakes to poll (multiprocessing's, a checkpoint writer's peers) stays well under 1 %.
BUSY_SHARE = 0.02


@dataclass
class _ChildWork:
    """The CPU time the ranks' descendants used (a JIT compile's ninja and c++, dataloader
    workers, a subprocess the script waits on): a rank that waits on a child that works is not
    stuck, however still its own stack.  A rank's own CPU does not count (NCCL's waits spin)."""

    clock: Clock = REAL
    last: float = 0.0
    since: float = 0.0

    def __post_init__(self) -> None:
        self.since = self.clock.monotonic()

    def busy(self, seen: dict[int, psutil.Process]) -> bool:
        used, now = children_cpu(seen), self.clock.monotonic()
        share = (used - self.last) / max(now - self.since, 1e-3)
        self.last, self.since = used, now
        return share >= BUSY_SHARE


def children_cpu(seen: dict[int, psutil.Process]) -> float:
    """CPU seconds of every rank's descendants: live ones (with what they reaped) and the ones a
    rank already reaped (its children_user/system)."""
    total = 0.0
    for rank in rank_processes(seen):
        try:
            t = rank.cpu_times()
            total += t.children_user + t.children_system
            for d in rank.children(recursive=True):
                c = d.cpu_times()
                total += c.user + c.system + c.children_user + c.children_system
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return total


@dataclass
class _RankCpu:
    """The CPU time the ranks themselves used since the output last grew (``mark``): a silent
    rank that computes in one line (its stack still) is busy, not idle."""

    clock: Clock = REAL
    base: dict[int, float] = field(default_factory=dict)
    at: float = 0.0

    def __post_init__(self) -> None:
        self.at = self.clock.monotonic()

    def mark(self, seen: dict[int, psutil.Process]) -> None:
        self.base = {p.pid: t for p in rank_processes(seen) if (t := _cpu(p)) is not None}
        self.at = self.clock.monotonic()

    def busy(self, seen: dict[int, psutil.Process]) -> bool:
        """Whether some rank used BUSY_SHARE of a core or more since the mark (a rank not seen
        at the mark: since the mark, with all it used)."""
        span = max(self.clock.monotonic() - self.at, 1e-3)
        return any((t := _cpu(p)) is not None and t - self.base.get(p.pid, 0.0) >= BUSY_SHARE * span
                   for p in rank_processes(seen))


def _cpu(p: psutil.Process) -> float | None:
    try:
        t = p.cpu_times()
        return t.user + t.system
    except psutil.Error:
        return None


def _look(loop: _Loop) -> None:
    """Track the tree, sample its memory, read what the logs gained: a timeout line takes the
    stacks and starts the early verdict's rounds now; it decides nothing."""
    track(loop.proc.pid, loop.seen)
    loop.rss.sample(loop.seen)
    grew = loop.logs.last_growth
    for line in loop.logs.new_lines():
        if is_hang_text(line) and loop.words.see(line, loop.clock.monotonic()):
            loop.snapshot.wait()
            _call(loop.hooks.on_hang, loop.seen, "watchdog")
            if loop.rounds is not None:
                loop.rounds.hurry()
    if loop.logs.last_growth != grew and loop.spec.idle_timeout and loop.clock.monotonic() - loop.cpu.at > 1.0:
        loop.cpu.mark(loop.seen)


def _deadline(loop: _Loop, now: float) -> LaunchResult | None:
    if now - loop.t0 <= loop.spec.wall_timeout:
        return None
    loop.snapshot.wait()
    _call(loop.hooks.on_hang, loop.seen, "deadline")
    return loop.ended(now, hang_line=loop.words.first, hang_at=loop.words.first_at or now,
                      why=f"no exit within the {loop.spec.wall_timeout:g} s wall timeout")


def _early(loop: _Loop, now: float) -> LaunchResult | None:
    """A hang proven by a round of the early deadlock verdict."""
    if loop.rounds is None:
        return None
    found = loop.rounds.proven(loop.logs.last_growth, loop.seen, now)
    if found is None:
        loop.rounds.poll(now - loop.logs.last_growth, now)
        return None
    loop.snapshot.wait()
    _call(loop.hooks.on_hang, loop.seen, "deadlock")
    loop.rounds.keep(found)
    return loop.ended(now, hang_at=loop.t0 + found.proof.at, why=found.proof.text, proof=found.proof)


def _stuck(on_idle: IdleCheck | None, seen: dict[int, psutil.Process], snapshot: _Snapshot) -> bool:
    """Whether no rank's stack moved since the last look (True where stacks cannot be compared)."""
    snapshot.wait()
    return on_idle is None or on_idle(rank_processes(seen))


@dataclass
class _Words:
    """The first collective-timeout line of a run and when it came: evidence for the record."""

    first: str = ""
    first_at: float | None = None

    def see(self, line: str, now: float) -> bool:
        """Note a timeout line; True for the first (the stacks are then worth taking)."""
        if self.first:
            return False
        self.first, self.first_at = line.strip()[:500], now
        return True


@dataclass
class _Rss:
    """The peak of the run's memory: the RSS of its live processes, summed (shared pages count
    once per process, so this errs high: what a slot count wants)."""

    clock: Clock = REAL
    peak: int = 0
    at: float = float("-inf")

    def sample(self, seen: dict[int, psutil.Process]) -> None:
        now = self.clock.monotonic()
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
