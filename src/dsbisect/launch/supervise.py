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
  ``rounds.after`` seconds, rounds of two requests ``rounds.gap`` seconds apart ask every rank's
  hook for its flight-recorder state and main-thread stack, beside the watch loop; when
  ``deadlock.prove`` finds that the ranks' pending collectives can never complete, and no log
  grew since the round began, the run is a hang without waiting for the collective timeout
  (the rounds are ``rounds.Rounds``; the proof comes back typed, in ``LaunchResult.proof``).

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
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from dsbisect.forensics import deadlock
from dsbisect.launch.guard import Guarded
from dsbisect.verdict.outcome import HANG_PATTERNS, contradicts_timeout, is_hang_text  # noqa: F401 - HANG_PATTERNS: its old home
from dsbisect.launch.proctree import rank_processes, teardown, track
from dsbisect.launch.rounds import RoundTimes, Rounds
from dsbisect.core.rundir import RunDir


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


class StartError(Exception):
    """The launch line's program could not be started (exec failed: no such file, not executable)."""

    def __init__(self, program: str, why: str):
        super().__init__(f"{program}: {why}")
        self.program, self.why = program, why


def launch(spec: LaunchSpec, on_hang: RankHook | None = None, on_quiet: RankHook | None = None,
           on_idle: IdleCheck | None = None, cancel: threading.Event | None = None) -> LaunchResult:
    """Run ``spec`` to its end; ``cancel`` (set from another thread) stops it like Ctrl-C."""
    spec.run.path.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
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
        result = _watch(_Hooks(on_hang, on_quiet, on_idle, cancel), proc, spec, seen, t0)
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


@dataclass(frozen=True)
class _Loop:
    """One launch under watch: what the watch loop reads and who it tells."""

    proc: Guarded
    spec: LaunchSpec
    seen: dict[int, psutil.Process]  # every process seen below the launcher (grows)
    t0: float  # monotonic time of the start
    hooks: _Hooks
    logs: _Watch
    dumps: _Dumps
    snapshot: _Snapshot
    rounds: Rounds | None  # the early deadlock verdict's, when asked for
    words: _Words
    rss: _Rss
    work: _ChildWork = field(default_factory=lambda: _ChildWork())

    def ended(self, now: float, code: int | None = None, hang_line: str = "", hang_at: float | None = None,
              why: str = "", proof: deadlock.Proof | None = None) -> LaunchResult:
        return LaunchResult(exit_code=code, seconds=now - self.t0, timed_out=code is None, why=why,
                            hang_line=hang_line, hang_after=None if hang_at is None else hang_at - self.t0,
                            peak_rss=self.rss.peak, proof=proof)


def _watch(hooks: _Hooks, proc: Guarded, spec: LaunchSpec, seen: dict[int, psutil.Process],
           t0: float) -> LaunchResult:
    rounds = Rounds(spec.run, spec.rounds, t0) if spec.early_hang else None
    loop = _Loop(proc, spec, seen, t0, hooks, _Watch(spec.run), _Dumps(spec), _Snapshot(hooks.on_quiet), rounds,
                 _Words(), _Rss())
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
        now = time.monotonic()
        if code is not None:  # the snapshot's py-spy and faulthandler end with the ranks
            loop.snapshot.wait(timeout=1.0)
            return loop.ended(now, code, hang_line=loop.words.first, hang_at=loop.words.first_at)
        found = _timeout_line(loop, now) or _deadline(loop, now) or _early(loop, now)
        if found is not None:
            return found
        quiet = now - loop.logs.last_growth
        armed = loop.words.armed_at is not None
        if loop.spec.quiet_after and not quiet_taken and quiet > loop.spec.quiet_after and not armed:
            quiet_taken = loop.snapshot.start(loop.seen)
        if quiet_taken and quiet < 1:
            quiet_taken = False
        if loop.spec.idle_timeout and quiet > loop.spec.idle_timeout and not armed:
            if loop.work.busy(loop.seen) or not _stuck(loop.hooks.on_idle, loop.seen, loop.snapshot):
                loop.logs.last_growth = time.monotonic()  # the ranks are busy, only silent
            else:
                return loop.ended(now, hang_line=loop.words.first, hang_at=now,
                                  why=f"no output and no rank's stack moved for {loop.spec.idle_timeout:g} s")
        time.sleep(POLL_S)


# The share of one core the ranks' children used since the last idle check that makes the run busy,
# not stuck: a compiler gets ~6 % of a core even at a load of 35 on 2 cores; an idle helper
# process that wakes to poll (multiprocessing's, a checkpoint writer's peers) stays well under 1 %.
BUSY_SHARE = 0.02


@dataclass
class _ChildWork:
    """The CPU time the ranks' descendants used (a JIT compile's ninja and c++, dataloader
    workers, a subprocess the script waits on): a rank that waits on a child that works is not
    stuck, however still its own stack.  A rank's own CPU does not count (NCCL's waits spin)."""

    last: float = 0.0
    since: float = field(default_factory=time.monotonic)

    def busy(self, seen: dict[int, psutil.Process]) -> bool:
        used, now = children_cpu(seen), time.monotonic()
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


def _look(loop: _Loop) -> None:
    """Track the tree, sample its memory, read what the logs gained (a timeout line takes stacks)."""
    track(loop.proc.pid, loop.seen)
    loop.rss.sample(loop.seen)
    for line in loop.logs.new_lines():
        if is_hang_text(line) and loop.words.see(line, time.monotonic()):
            loop.snapshot.wait()
            _call(loop.hooks.on_hang, loop.seen, "watchdog")
        elif loop.words.armed_at is not None and contradicts_timeout(line):
            # a rank dies of another error: it is not waiting, whatever it printed before; the run
            # ends as its launcher ends it (the idle limit and the wall timeout still watch)
            loop.words.disarm()


def _timeout_line(loop: _Loop, now: float) -> LaunchResult | None:
    """A hang when the grace after a collective-timeout line is over and nothing moved since;
    else the line stops counting (the ranks went on: it was no verdict)."""
    words = loop.words
    if words.armed_at is None or not (now - words.armed_at > loop.spec.hang_grace
                                      or loop.dumps.ready(words.armed_at, now)):
        return None
    if words.stalled(loop.logs.last_growth) and _stuck(loop.hooks.on_idle, loop.seen, loop.snapshot):
        return loop.ended(now, hang_line=words.first, hang_at=words.first_at,
                          why=f"{words.first[:300]} (then no output and no rank's stack moved "
                              f"for {now - words.last_at:.0f} s)")
    words.disarm()
    return None


def _deadline(loop: _Loop, now: float) -> LaunchResult | None:
    if now - loop.t0 <= loop.spec.wall_timeout:
        return None
    loop.snapshot.wait()
    _call(loop.hooks.on_hang, loop.seen, "deadline")
    return loop.ended(now, hang_line=loop.words.first, hang_at=loop.words.first_at or now,
                      why=f"no exit within the {loop.spec.wall_timeout:g} s wall timeout")


def _early(loop: _Loop, now: float) -> LaunchResult | None:
    """A hang proven by a round of the early deadlock verdict (none while a timeout line is weighed)."""
    if loop.rounds is None or loop.words.armed_at is not None:
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
