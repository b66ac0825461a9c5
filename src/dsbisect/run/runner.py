"""Test one point of one case: venv, import check, launch, classify, store.

``Runner.runs`` is what ``run`` and ``bisect`` both stand on: it returns the recorded runs
of a (case, point) and makes the missing ones.  PASS, FAIL and HANG are reused from the
store; SKIPs are tried again, since their causes (no GPU here, a build that failed, an
index that was down) belong to the machine and the moment rather than to the point.

Where a run happens is the ``Executor``'s business: here (``Runner.run_here``) unless one
is given (``slurm.SlurmExecutor``: one Slurm job per run).

What a point costs besides its script: the import check is made inside the run by the venv's
start-up hook (``DSBISECT_CHECK_IMPORTS``: the first interpreter, the launcher or the one rank,
imports the point's packages, writes the facts into the run folder, and exits 125 when one
fails), except where the run's first interpreter may not be the venv's (an executable command
line) or the check must come before the launch (multi-node); and a 1-rank case runs its script
with the venv's python as rank 0 of 1, without the launcher's processes (``launchers.direct_run``).
Measured on 2 cores: a point of a 1-rank accelerate import case went from ~11-17 s (check
subprocess, deepspeed runner, launch.py, rank: torch imported four times) to ~3-4 s.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import shlex
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from packaging.utils import canonicalize_name

from dsbisect.core import eta
from dsbisect.envs import facts
from dsbisect.run import memory
from dsbisect.run import multinode
from dsbisect.core import proc
from dsbisect.launch import reaper
from dsbisect.envs.venvs import EXTENSIONS, Env, EnvManager, clear_stale_build_locks
from dsbisect.core.errors import DiskFull, EnvBuildError, Interrupted, StoreError, signal_of
from dsbisect.forensics.evidence import Capture
from dsbisect.forensics.stuck import analyze, hang_record
from dsbisect.launch.supervise import LaunchResult, LaunchSpec, StartError, free_port, launch
from dsbisect.launch.launchers import Ranks, Target, line_for, plan
from dsbisect.core.model import Accelerator, Case, Outcome, Point, RunStatus, check_wanted, digest
from dsbisect.verdict.identity import package_frames
from dsbisect.verdict.outcome import Classified, classify
from dsbisect.run.phases import PhaseWatch
from dsbisect.core.proc import clean_env, writes_bytecode
from dsbisect.core.redact import redact, remember, scrub_folder, secret_values
from dsbisect.run.reuse import Reuse, Start, stale
from dsbisect.core.rundir import RunDir
from dsbisect.records.run import Evidence, ImportCheck, RunFacts, RunRecord, SkipCause
from dsbisect.store.store import Store
from dsbisect.envs.toolchain import first_on_path, ninja_dir

Progress = Callable[[str, str], None]

_AHEAD = threading.local()  # .label, .why: the point whose venv this thread builds ahead of its run


def env_line(text: str) -> tuple[str, str]:
    """A line of the venvs' (``EnvManager.log``) as progress shows it: on a look-ahead thread,
    the "ahead" kind, worded as a look-ahead build; else an "env" line as it is."""
    label = getattr(_AHEAD, "label", "")
    if not label:
        return "env", text
    return "ahead", f"look-ahead for {label} ({_AHEAD.why}): {text}"


@dataclass(frozen=True)
class Slot:
    """Where a run executes: the GPU indices it may use (None: CPU or all)."""

    devices: tuple[int, ...] | None = None


class Executor(Protocol):
    """Somewhere else to run a point (``--executor``); the local one is ``Runner.run_here``."""

    def slots(self, case: Case) -> list[Slot]:
        """How many runs of ``case`` may be in flight at once."""

    def run_once(self, runner: Runner, case: Case, point: Point, attempt: int,
                 cancel: threading.Event) -> RunRecord:
        """One run of ``point``, recorded in ``runner.store``; stop early when ``cancel`` is set."""


@dataclass
class Runner:
    store: Store
    envs: EnvManager
    gpus: list[str] = field(default_factory=list)
    progress: Progress = lambda kind, text: None
    rerun: bool = False
    gpu_ids: list[int] = field(default_factory=list)
    jobs: int | None = None  # None: as many as the machine's GPUs (or cores) allow
    executor: Executor | None = None  # None: run here
    cancel: threading.Event = field(default_factory=threading.Event)  # set: every running launch stops
    _ports: set[int] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ahead: ThreadPoolExecutor | None = None  # builds the venvs a bisection may need next
    _ahead_jobs: list = field(default_factory=list)
    _ahead_stop: threading.Event = field(default_factory=threading.Event)  # set: the one under way is killed
    _gate: PointGate = field(default_factory=lambda: PointGate())

    # ---------------------------------------------------------- concurrency

    def slots(self, case: Case) -> list[Slot]:
        """Where runs of ``case`` can go at once: disjoint GPU slices, or CPU process budgets."""
        case = self.effective(case)
        if self._one_at_a_time(case):
            return [Slot()]
        if self.executor is not None:
            return self.executor.slots(case)
        n = self.memory_plan(case)[0]
        if self.accelerator(case) is Accelerator.CUDA:
            ids = self.gpu_ids or list(range(len(self.gpus)))
            if n == 1:
                return [Slot()]
            return [Slot(tuple(ids[k * case.nproc:(k + 1) * case.nproc])) for k in range(n)]
        return [Slot()] * n

    def _one_at_a_time(self, case: Case) -> bool:
        """A multi-node run holds the hosts and slots it names; a command line on GPUs picks its
        GPUs itself: one run at a time."""
        return case.nodes.multi or bool(case.command and self.accelerator(case) is Accelerator.CUDA
                                        and self.executor is None)

    def wanted_slots(self, case: Case) -> int:
        """Points at once that the GPUs (one slice of nproc each), the cores (nproc each) or
        ``--jobs`` allow, before memory is counted."""
        if self.accelerator(case) is Accelerator.CUDA:
            groups = len(self.gpu_ids or self.gpus) // case.nproc
            return max(1, min(groups, self.jobs or groups))
        return max(1, self.jobs or max(1, (os.cpu_count() or 1) // case.nproc))

    def memory_plan(self, case: Case) -> tuple[int, str]:
        """How many of the ``wanted_slots`` the memory here holds, and the figures, for the
        progress line ("memory: 1.4 GB free of 1.4 GB limit, ~0.9 GB per point"): a point's
        expected memory is the peak of the case's recorded runs, else a guess per rank."""
        case = self.effective(case)
        wanted = self.wanted_slots(case)
        if wanted <= 1 or self._one_at_a_time(case) or self.executor is not None:
            return 1, ""
        room = memory.room()
        if room is None:
            return wanted, ""
        peaks = self.store.peak_rss(case.name)
        per_point = memory.expected(case.nproc, peaks)
        return memory.points_at_once(wanted, room, per_point), memory.describe(room, per_point, bool(peaks))

    def run_many(self, case: Case, points: list[Point], want: int = 1,
                 enough: Callable[[list[RunRecord]], bool] | None = None) -> list[list[RunRecord]]:
        """``runs`` of several points, at once when the machine has room for more than one."""
        slots = self.slots(case)
        if len(slots) == 1 or len(points) == 1:
            return self._sequential(case, points, want, enough)
        free: queue.Queue[Slot] = queue.Queue()
        for slot in slots:
            free.put(slot)

        def one(point: Point) -> list[RunRecord]:
            slot = free.get()
            try:
                return self.runs(case, point, want, enough, slot)
            finally:
                free.put(slot)

        with ThreadPoolExecutor(max_workers=len(slots), thread_name_prefix="dsbisect-run") as pool:
            futures = [pool.submit(one, p) for p in points]
            try:
                return [f.result() for f in futures]
            except BaseException:
                self.cancel.set()  # every running launch stops its process group
                raise

    def _sequential(self, case: Case, points: list[Point], want: int, enough) -> list[list[RunRecord]]:
        """One point after another, the next point's venv built while the current one runs."""
        out = []
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dsbisect-env") as bg:
            for i, point in enumerate(points):
                if i + 1 < len(points):
                    bg.submit(self._prepare, case, points[i + 1], "the next point")
                out.append(self.runs(case, point, want, enough))
        return out

    def prepare_ahead(self, case: Case, points: list[Point]) -> None:
        """Build these points' venvs in the background while others run (what was asked ahead
        before and has not started is dropped: only the latest look-ahead matters)."""
        if os.environ.get("DSBISECT_LOOKAHEAD") == "0":  # for measuring what it saves
            return
        if self._ahead is None:
            self._ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dsbisect-ahead")
            self._ahead_stop = threading.Event()
        for job in self._ahead_jobs:
            job.cancel()
        self._ahead_jobs = [self._ahead.submit(self._prepare_ahead, case, p) for p in points]

    def stop_ahead(self) -> None:
        """The answer is known: drop the look-ahead builds not started and kill the one under way
        (its uv, pip and compilers; the half-built venv is removed as after any failed build),
        rather than wait for a venv no one will run (a DeepSpeed sdist build takes a minute)."""
        if self._ahead is not None:
            self._ahead_stop.set()
            self._ahead.shutdown(wait=True, cancel_futures=True)
            self._ahead, self._ahead_jobs = None, []

    def _prepare_ahead(self, case: Case, point: Point) -> None:
        try:
            with proc.cancellable(self._ahead_stop):
                self._prepare(case, point)
        except proc.Cancelled:
            return  # not needed any more; a later run of this point builds it again

    def _prepare(self, case: Case, point: Point, why: str = "the search may test it next") -> None:
        if self.executor is not None or not self.enough_gpus(case):
            return  # the run is not here, or cannot run here
        # Recorded: most likely reused. Whether it is, is decided once, when the point's turn
        # comes (a run set aside then builds its venv itself).
        if not self.rerun and any(r.outcome is not Outcome.SKIP or r.manual is not None
                                  for r in self.store.done_runs(self.effective(case).key, point.key)):
            return
        _AHEAD.label, _AHEAD.why = f"{case.name} · {point.label}", f"{why}; built while another point runs"
        try:
            env = self.envs.ensure(point)
            precompile(env, check_wanted(point)[:-1])
        except EnvBuildError:
            return  # the run itself records the skip, with the reason
        finally:
            _AHEAD.label = ""
            self.progress("ahead", "")  # over: no look-ahead line any more

    # ----------------------------------------------------------------- public

    def runs(self, case: Case, point: Point, want: int = 1,
             enough: Callable[[list[RunRecord]], bool] | None = None, slot: Slot = Slot()) -> list[RunRecord]:
        """Up to ``want`` runs of ``point``: recorded ones first, then new ones until ``enough``."""
        case = self.effective(case) if self.executor is None else case  # a remote node applies its own GPU's
        self.store.name_case(case.name, case.key)  # its runs may be recorded under another name of this key
        recorded, why = self.reusable(case, point)
        runs = recorded[:want]
        for r in runs:
            self.progress("reused", f"{case.name} · {point.label}: {r.outcome.value} (run {r.id}, recorded)")
        if why and len(runs) < want:
            self.progress("note", f"{case.name} · {point.label}: {why}; running it again")
        while len(runs) < want and not (enough and enough(runs)) and Outcome.SKIP not in {r.outcome for r in runs}:
            run = self.run_once(case, point, attempt=len(runs) + 1, slot=slot)
            runs.append(run)
            if run.outcome is Outcome.SKIP:
                break
        return runs

    # ------------------------------------------------------------------ reuse

    def reusable(self, case: Case, point: Point) -> tuple[list[RunRecord], str]:
        """The recorded runs that may stand for runs of ``point`` now (``inputs`` has the rule):
        PASS, FAIL and HANG whose inputs are what would run now, and every run marked by hand
        (a skip included: the user said so); with why the latest one set aside was ("" if none).
        What would run now is made once (``Reuse.present``) and each record compared with it."""
        if self.rerun:
            return [], ""
        done = self.store.done_runs(case.key, point.key)
        judged = [r for r in done if r.manual is None and r.outcome is not Outcome.SKIP]
        other = None if done else self.store.latest_of_other_case(case.name, case.key, point.key)
        if not judged and other is None:
            return [r for r in done if r.manual is not None], ""  # nothing to compare
        now = self.reuse.present(case, point, [*judged, *([other] if other else [])], self._where(case))  # once
        fresh, why = [], ""
        for r in done:
            if r.manual is not None:
                fresh.append(r)
            elif r.outcome is not Outcome.SKIP:
                why_not = stale(r, now)
                if why_not:
                    why = why_not
                else:
                    fresh.append(r)
        if other is not None:  # the case's script, args or settings changed since
            why = stale(other, now) or f"recorded run {other.id} is for other case settings"
        return fresh, why

    @functools.cached_property
    def reuse(self) -> Reuse:
        return Reuse(self.store, self.envs)

    def _where(self, case: Case) -> str:
        """The accelerator a run of ``case`` gets here ("" when an executor's node decides)."""
        return self.accelerator(case).value if self.executor is None else ""

    def effective(self, case: Case) -> Case:
        return case.for_gpu(self.gpus[0] if self.gpus else None)

    def accelerator(self, case: Case) -> Accelerator:
        if case.accelerator is not Accelerator.AUTO:
            return case.accelerator
        return Accelerator.CUDA if len(self.gpus) >= case.nproc else Accelerator.CPU

    def enough_gpus(self, case: Case) -> bool:
        return self.accelerator(case) is not Accelerator.CUDA or len(self.gpus) >= case.nproc

    # ---------------------------------------------------------------- one run

    def run_once(self, case: Case, point: Point, attempt: int = 1, slot: Slot = Slot()) -> RunRecord:
        """One run of ``point``, here or through the executor."""
        if self.executor is not None:
            return self.executor.run_once(self, case, point, attempt, self.cancel)
        return self.run_here(case, point, attempt, slot)

    def run_here(self, case: Case, point: Point, attempt: int = 1, slot: Slot = Slot()) -> RunRecord:
        """One run here: claimed in the store first (or, when another dsbisect is running this
        point, that one's run once it ends), then venv, import check, launch."""
        if not self.enough_gpus(case):
            reason = f"needs {case.nproc} CUDA GPUs; this machine has " + (
                f"{len(self.gpus)} ({self.gpus[0]})" if self.gpus else "0")
            same = self.store.same_skip(case.key, point.key, reason, facts.host()["name"])
            if same is not None:  # the machine has not changed: no new record every time
                self.progress("reused", f"{case.name} · {point.label}: skip ({reason}; run {same.id}, recorded)")
                return same
        done = self._run_gated(case, point, attempt, slot, alone=False)
        if done.evidence.oom_others:  # killed while other points ran: once more, alone
            self.progress("run", f"{case.name} · {point.label}: run {done.id} was killed by the out-of-memory "
                                 "killer while other points ran; waiting for them to run it alone")
            done = self._run_gated(case, point, attempt, slot, alone=True)
        return done

    def _run_gated(self, case: Case, point: Point, attempt: int, slot: Slot, alone: bool) -> RunRecord:
        """One run, counted as running for the memory gate (``alone``: with no other point)."""
        with self._gate.enter(alone) as token:
            run = self._claim(case, point, attempt)
            if run.status is RunStatus.DONE:
                return run
            try:
                return self._prepare_and_launch(run, case, point, slot, token)
            except KeyboardInterrupt as e:
                self.store.abandon_run(run.id, "interrupted")
                self.cancel.set()
                if run.run_dir:  # its logs too are read by the group; known() holds the run's secrets
                    scrub_folder(Path(run.run_dir), skip=(RunDir.RECORD,))
                raise Interrupted("interrupted; the run's processes were stopped", signal_of(e)) from None
            except DiskFull as e:  # the run is not left running: interrupted, saying why, where that can be written
                with contextlib.suppress(DiskFull, StoreError):
                    self.store.abandon_run(run.id, str(e))
                raise

    def _claim(self, case: Case, point: Point, attempt: int) -> RunRecord:
        while True:
            claim = self.store.claim(case.name, case.key, point, attempt)
            if claim.run is not None:
                return claim.run
            busy = claim.busy
            self.progress("run", f"{case.name} · {point.label}: another dsbisect (pid {busy.pid}) is running it "
                                 f"as run {busy.id}; waiting for it")
            while (theirs := self.store.run(busy.id)).status is RunStatus.RUNNING:
                if self.cancel.is_set():
                    raise KeyboardInterrupt
                time.sleep(1.0)
            if theirs.status is not RunStatus.DONE or theirs.outcome is Outcome.SKIP:
                continue
            why_not = stale(theirs, self.reuse.present(case, point, [theirs], self._where(case)))  # other inputs?
            if why_not:
                self.progress("note", f"{case.name} · {point.label}: {why_not}; running it again")
            else:
                self.progress("reused", f"{case.name} · {point.label}: {theirs.outcome.value} "
                                        f"(run {theirs.id}, by another dsbisect)")
                return theirs

    def _prepare_and_launch(self, run: RunRecord, case: Case, point: Point, slot: Slot,
                            token: GateToken | None = None) -> RunRecord:
        label = f"{case.name} · {point.label}"
        accel = self.accelerator(case)
        if not self.enough_gpus(case):
            have = f"{len(self.gpus)} ({self.gpus[0]})" if self.gpus else "0"
            return self._skip(run, f"needs {case.nproc} CUDA GPUs; this machine has {have}", SkipCause.GPUS)
        self.progress("env", f"{label}: preparing venv")
        try:
            env = self.envs.ensure(point)
        except EnvBuildError as e:
            return self._skip(run, f"venv could not be built: {e}", SkipCause.VENV, case=case)
        if folds_check(case):  # made in the run, unless this venv's is recorded
            check = self.store.import_check(env.key, import_check_key(case, accel, check_wanted(point)))
        else:
            check = self._import_check(env, case, point, accel)
        if check is not None and not check.ok:
            return self._skip(run, check.reason, SkipCause.IMPORT, env_key=env.key, found=check.facts, case=case,
                              env=env)
        if case.nodes.hostfile is not None:
            self.progress("env", f"{label}: checking the venv on every node of {case.nodes.hostfile.name}")
            problem = multinode.check_nodes(case, env.key, env.python, check.facts)
            if problem:
                return self._skip(run, problem, SkipCause.NODES, env_key=env.key, found=check.facts)
        return self._launch(_Job(run, case, point, env, accel, slot, token or GateToken()), check)

    def _skip(self, run: RunRecord, reason: str, cause: SkipCause, env_key: str | None = None,
              found: RunFacts | None = None, case: Case | None = None, env: Env | None = None) -> RunRecord:
        given = None if case is None else self.reuse.record(case, run.point, env, accelerator=self._where(case))
        done = self.store.finish_run(run.id, Outcome.SKIP, None, 0.0, reason=reason, env_key=env_key,
                                     evidence=Evidence(skip_cause=cause),
                                     facts=(found or RunFacts()) | RunFacts.of(fingerprint=given, host=facts.host()))
        # A point this machine cannot run at all (too few GPUs) takes no time: the progress's
        # estimate of the time left does not count it as a round.
        self.progress("unrunnable" if cause.machine else "done", f"{run.case_name} · {run.point.label}: skip ({reason})")
        return done

    def _import_check(self, env: Env, case: Case, point: Point, accel: Accelerator) -> ImportCheck:
        """Import the point's packages in its venv, once per venv and import environment."""
        wanted = check_wanted(point)
        key = import_check_key(case, accel, wanted)
        cached = self.store.import_check(env.key, key)
        if cached:
            return cached
        self.progress("env", f"{case.name} · {point.label}: importing {', '.join(wanted)}")
        variables = self._base_env(case, accel) | dict(case.env)
        if self.envs.caches_bytecode(env):  # what it imports is cached (EnvManager.caches_bytecode)
            variables = writes_bytecode(variables)
        check = facts.import_check(env.python, wanted, variables)
        if not check.ok:
            check = ImportCheck(False, f"import check: {check.reason}", check.facts)
        self.store.put_import_check(env.key, key, check)
        return check

    def _check_of_run(self, run: RunDir, env: Env, case: Case, point: Point, accel: Accelerator) -> ImportCheck:
        """The import check the run made (recorded for the venv like a separate one), or, when the
        run left none, a separate one."""
        found = facts.hook_check(run.import_facts)
        if found is None:
            return self._import_check(env, case, point, accel)
        if accel is Accelerator.CUDA and found.facts.gpus is None:  # the hook leaves CUDA uninitialized
            found = ImportCheck(found.ok, found.reason, found.facts | RunFacts.of(gpus=self.gpus))
        if not found.ok:
            found = ImportCheck(False, f"import check: {found.reason}", found.facts)
        self.store.put_import_check(env.key, import_check_key(case, accel, check_wanted(point)), found)
        return found

    def _launch(self, job: _Job, check: ImportCheck | None) -> RunRecord:
        """The run pipeline past the venv: the launch line, the launch under watch, the import
        check the run made, the verdict and its evidence, the record."""
        line = self._launch_line(job, check is None)
        try:
            ran = self._supervise(job, line)
        except StartError as e:  # nothing ran: the point is untestable with this line, not bad
            with open(job.run.launcher_log, "a") as note:
                note.write(f"dsbisect: could not start {e.program}: {e.why}\n")
            where = "on the point venv's PATH" if "/" not in e.program else "there"
            return self._skip(job.record, f"could not start {e.program}: {e.why} ({where})", SkipCause.START,
                              env_key=job.env.key, case=job.case, env=job.env)
        if check is None:
            check = self._check_of_run(job.run, job.env, job.case, job.point, job.accel)
            if not check.ok:
                return self._skip(job.record, check.reason, SkipCause.IMPORT, env_key=job.env.key,
                                  found=check.facts, case=job.case, env=job.env)
        c, signature, evidence = _judge(job, line, ran)
        short = line.ranks.shortfall(job.run.ranks_started()) if c.outcome is not Outcome.SKIP else ""
        if short:
            self.progress("note", f"{job.case.name} · {job.point.label}: warning: {short}")
            evidence = evidence.noted(f"warning: {short}")
        return self._record(job, ran, check, c, signature, evidence)

    def _launch_line(self, job: _Job, checks: bool) -> _Line:
        """The run's argv, environment and port (taken here, given back by ``_supervise``)."""
        case, run, env = job.case, job.run, job.env
        with self._lock:
            port = free_port(self._ports)
            self._ports.add(port)
        cuda = job.accel is Accelerator.CUDA
        devices = job.slot.devices if cuda else None
        variables = self._base_env(case, job.accel, env)
        for lock in clear_stale_build_locks(env.path):  # a killed build's; it would read as a hang
            with open(run.launcher_log, "a") as note:
                note.write(f"dsbisect: removed {lock}, left by a just-in-time build that was stopped\n")
        if checks:  # the run's first interpreter makes the import check
            variables["DSBISECT_CHECK_IMPORTS"] = ",".join(check_wanted(job.point))
            if self.envs.caches_bytecode(env):  # and caches what it imports (EnvManager.caches_bytecode)
                variables["DSBISECT_CHECK_BYTECODE"] = "1"
        p = plan(case, Target(env.python, run, port, devices), cuda, variables.get("CUDA_VISIBLE_DEVICES"))
        variables |= p.env
        run.ranks.mkdir(parents=True, exist_ok=True)
        direct, ranks = p.line.direct, p.line.ranks(case, cuda)
        if direct:
            with open(run.launcher_log, "a") as note:  # launch appends; show and forensics read both logs
                program = redact(" ".join(p.line.program(p.argv)))
                if case.nproc == 1:
                    note.write(f"dsbisect: 1 rank, run without a launcher (rank 0 of 1, output in "
                               f"{run.rank_log(0).relative_to(run.path)}): {program}\n")
                else:
                    note.write(f"dsbisect: {case.nproc} ranks, started by dsbisect without a launcher (output "
                               f"in {run.ranks.relative_to(run.path)}/rank<R>.log): {program}\n")
        elif ranks.said():
            with open(run.launcher_log, "a") as note:
                note.write(f"dsbisect: {ranks.describe()}, {ranks.said()}: {redact(shlex.join(p.argv))}\n")
        secrets = secret_values(variables, [*p.argv, *(case.command.argv if case.command else ())])
        remember(secrets)  # the ranks' and the command line's: whatever this process shows from now on masks them
        spec = LaunchSpec(
            argv=p.argv,
            env=variables,
            cwd=p.cwd,
            run=run,
            wall_timeout=case.timeout,
            idle_timeout=case.idle_timeout,
            quiet_after=max(1.0, case.collective_timeout * 0.4),
            hang_grace=20.0 if cuda else 5.0,
            expected_ranks=case.nproc if cuda else 0,
            early_hang=case.early_hang,
        )
        return _Line(spec, port, direct, secrets, ranks)

    def _supervise(self, job: _Job, line: _Line) -> _Ran:
        """Launch and watch the run, then give its port back and stop what escaped its tree."""
        case, run = job.case, job.run
        capture = Capture(run)
        hooks = capture
        if case.nodes.hostfile is not None:  # ranks on other nodes: reach them through the back end
            multinode.write_env_file(case, run, line.spec.env)
            hooks = multinode.RemoteRanks.of(case, job.env.python, run, capture)
        remote_left: list[str] = []
        given = record_inputs(case, run)
        named = self.reuse.started(case)  # as the run starts: what changes under it is its output
        how = f"{line.ranks.describe()}, no launcher" if line.direct else line.ranks.describe()
        added = f"; {line.ranks.said()}" if line.ranks.said() else ""
        self.progress("run", f"{case.name} · {job.point.label}: running (run {job.record.id}, {how}, "
                             f"{job.accel.value}{added})")
        t0 = time.monotonic()
        ooms = memory.oom_counts()
        ops = Path(line.spec.env.get("TORCH_EXTENSIONS_DIR") or job.env.path / EXTENSIONS)
        say = lambda text: self.progress("run", f"{case.name} · {job.point.label}: {text}")  # noqa: E731
        try:
            claims = run.path if line.spec.env.get("DSBISECT_OPS_DIR") else None  # this run's shared op builds
            with PhaseWatch(ops, say, claims):  # "compiling DeepSpeed's shm_comm op (first run of this venv)"
                result = launch(line.spec, on_hang=hooks, on_quiet=hooks, on_idle=hooks.stuck, cancel=self.cancel)
        finally:
            with self._lock:
                self._ports.discard(line.port)
            if hooks is not capture:
                remote_left = hooks.stop()
            escaped = reaper.stop_tagged(run.path)  # daemons that left the process tree
            shm = reaper.remove_run_shm(line.port) if case.nodes.hostfile is None else []
        return _Ran(result, capture, t0, ooms, given, named, tuple(remote_left), escaped, tuple(shm))

    def _record(self, job: _Job, ran: _Ran, check: ImportCheck, c: Classified, signature: str,
                evidence: Evidence) -> RunRecord:
        """Store the finished run, with the facts of its venv, inputs and machine."""
        case, point, env, accel = job.case, job.point, job.env, job.accel
        done = self.store.finish_run(
            job.record.id, c.outcome, ran.result.exit_code, time.monotonic() - ran.t0, reason=c.reason,
            signature=signature, evidence=evidence,
            facts=check.facts | ran.given | RunFacts.of(
                accelerator=accel.value, shadowed=env.shadowed, host=facts.host(), index=self.envs.index.origin,
                fingerprint=self.reuse.record(case, point, env, job.run, ran.named, accel.value)),
            env_key=env.key,
        )
        said = f" ({c.reason})" if c.outcome is Outcome.SKIP else ""
        self.progress("done", f"{case.name} · {point.label}: {c.outcome.value} in {eta.seconds_text(done.seconds or 0.0)}"
                              f"{said}")  # the record's time, as the grid shows it
        return done

    def _base_env(self, case: Case, accel: Accelerator, venv: Env | None = None) -> dict[str, str]:
        env = clean_env({"PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"})
        if venv is not None and case.command:  # python, deepspeed, torchrun, accelerate: the point's
            env["PATH"] = f"{venv.path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        if venv is not None:  # ops compiled just in time (DeepSpeed's) are built once per venv, then loaded
            env.setdefault("TORCH_EXTENSIONS_DIR", str(venv.path / EXTENSIONS))
            env.setdefault("DSBISECT_OPS_DIR", str(self.envs.paths.ops))  # shared by digest of sources+toolchain
            env = first_on_path(env, ninja_dir(self.envs.paths.root))  # one ninja, whatever the caller's PATH
        if case.compat:
            env["DSBISECT_COMPAT"] = ",".join(case.compat)
        if accel is Accelerator.CPU:
            env |= {"DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": ""}
        # On GPUs DeepSpeed detects the accelerator itself, as in the user's job: setting
        # DS_ACCELERATOR=cuda sends 0.12.4's get_accelerator() into endless recursion.
        return env


# ------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class _Job:
    """One run on its way through the pipeline: its record, what it tests, and where."""

    record: RunRecord
    case: Case
    point: Point
    env: Env
    accel: Accelerator
    slot: Slot
    token: GateToken

    @property
    def run(self) -> RunDir:
        return RunDir(Path(self.record.run_dir))


@dataclass(frozen=True)
class _Line:
    """What the run is launched with."""

    spec: LaunchSpec
    port: int  # the rendezvous port, held for the run
    direct: bool  # the ranks started by dsbisect, without a launcher
    secrets: frozenset[str]  # values masked in the run folder afterwards
    ranks: Ranks  # the ranks the line starts, and what dsbisect added so that it does


@dataclass(frozen=True)
class _Ran:
    """A launch that ended, with what was read around it."""

    result: LaunchResult
    capture: Capture  # the stacks and notes taken while it ran
    t0: float  # monotonic time of the launch
    ooms: tuple[memory.OomCount, ...]  # the OOM-kill counters before it
    given: dict  # the inputs it was given (record_inputs)
    named: Start  # digests of the paths the case names as it started, and when it started
    remote_left: tuple[str, ...]  # processes on other nodes that could not be stopped
    escaped: reaper.Reaped  # processes that had left the tree, found by their tag
    shm: tuple[str, ...]  # shared-memory files of the run removed


def _judge(job: _Job, line: _Line, ran: _Ran) -> tuple[Classified, str, Evidence]:
    """The run's outcome, signature and evidence, from its logs and what the launch saw; then
    the run folder is capped and scrubbed of the run's secrets."""
    run, result = job.run, ran.result
    tail, rank_tails = run.tails()
    c = classify(result.exit_code, result.timed_out, result.hang_line, result.why, tail, rank_tails)
    c, oom = _oom_verdict(c, result, run, ran.ooms, job.token)
    signature, evidence = _evidence(c.outcome, run, ran.capture, result)
    frames = tuple(package_frames(tail, c.reason, _import_names(job.env, job.point))) if c.outcome is Outcome.FAIL \
        else None  # where it failed in the packages under test: the failure's identity
    notes = [*run.cap_logs()]  # after the evidence was read from them
    if line.ranks.said():
        notes.append(f"{line.ranks.describe()}: {line.ranks.said()}")
    notes += scrub_folder(run.path, line.secrets, skip=(RunDir.RECORD,))  # the group may read it
    left_tree = sorted(set(result.escaped) | set(ran.escaped.stopped))
    if left_tree:
        notes.append(f"process(es) {', '.join(map(str, left_tree))} left the run's process tree (their parent "
                     "ended: a daemon, a fork child) and were stopped all the same (by the run's guard, or by "
                     "their DSBISECT_RUN_DIR tag)")
    evidence = evidence.noted(*notes) | Evidence.of(
        survivors=(*evidence.listed("survivors"), *ran.remote_left, *ran.escaped.survivors), oom=oom or None,
        error_frames=frames, escaped=left_tree or None,
        shm_removed=list(ran.shm) or None,  # DeepSpeed's CPU op never unlinks its workspace: RAM a run must not keep
        skip_cause=(SkipCause.OOM if oom else SkipCause.EXIT_125) if c.outcome is Outcome.SKIP else None)
    return c, signature, evidence


def _oom_verdict(c: Classified, result: LaunchResult, run: RunDir, before: tuple[memory.OomCount, ...],
                 token: GateToken) -> tuple[Classified, dict]:
    """``memory.oom_verdict`` with what this run's counters, logs and gate token say."""
    kill = memory.rise(before, memory.oom_counts()) if c.outcome is Outcome.FAIL else None
    if kill is None:
        return c, {}
    others = 0 if token.alone else token.others
    return memory.oom_verdict(c, result.exit_code, result.timed_out, run.tails()[0], kill, others, token.alone,
                              None if others else memory.room())


@dataclass
class GateToken:
    """One run in the memory gate: whether it runs alone, and the most other points that ran
    beside it at any moment."""

    alone: bool = False
    others: int = 0


class PointGate:
    """Counts the points running here, so that a run the out-of-memory killer ended while others
    ran can run again with no other point: an ``alone`` entry waits until none runs, and no
    other starts until it ends."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.active: list[GateToken] = []
        self.exclusive = False
        self.waiting = 0  # alone entries waiting: no other starts meanwhile

    @contextlib.contextmanager
    def enter(self, alone: bool) -> Iterator[GateToken]:
        token = GateToken(alone=alone)
        with self.cond:
            self.waiting += alone
            while self.exclusive or (alone and self.active) or (not alone and self.waiting):
                self.cond.wait(0.5)
            self.waiting -= alone
            self.exclusive = alone
            for t in self.active:
                t.others = max(t.others, len(self.active))
            token.others = len(self.active)
            self.active.append(token)
        try:
            yield token
        finally:
            with self.cond:
                self.active.remove(token)
                if alone:
                    self.exclusive = False
                self.cond.notify_all()


def _evidence(outcome: Outcome, run: RunDir, capture: Capture, result: LaunchResult) -> tuple[str, Evidence]:
    evidence = capture.evidence() | Evidence.of(survivors=result.survivors, pids=result.pids,
                                                peak_rss=result.peak_rss or None)
    if outcome is not Outcome.HANG:
        if result.hang_line:  # the words were printed, and the run says otherwise
            evidence = evidence.noted(f"a collective-timeout line at {result.hang_after or 0:.1f} s did not decide: "
                                      f"the run {_how_it_ended(outcome, result)} ({result.hang_line[:200]})")
        return "", evidence
    if result.hang_after is not None:
        evidence |= Evidence.of(hang_detected_after_s=round(result.hang_after, 2))
    sig = analyze(run.path)
    if sig is not None:
        evidence = evidence.noted(*sig.notes)
    hang = hang_record(sig, result.proof)
    return hang.text, evidence | Evidence.of(hang=hang.to_json())


def _how_it_ended(outcome: Outcome, result: LaunchResult) -> str:
    if outcome is Outcome.PASS:
        return "exited 0"
    return f"exited {result.exit_code} and no rank died of a timeout" if result.exit_code is not None else "ended"


def _import_names(env: Env, point: Point) -> tuple[str, ...]:
    """The moving packages' top-level folders in the point's venv (from each one's RECORD:
    'dsb-toy' -> 'dsb_toy', 'scikit-learn' -> 'sklearn'); the name with underscores where the
    venv does not say."""
    wanted = {canonicalize_name(n) for n, _ in point.versions} | ({canonicalize_name(point.source.package)}
                                                                 if point.source else set())
    found: list[str] = []
    for info in Path(env.path).glob("lib/python*/site-packages/*.dist-info"):
        if canonicalize_name(info.name.split("-", 1)[0]) not in wanted:  # name-version.dist-info
            continue
        try:
            lines = (info / "RECORD").read_text().splitlines()
        except OSError:
            continue
        for ln in lines:
            top = ln.split(",", 1)[0].split("/", 1)
            if len(top) == 2 and not top[0].endswith((".dist-info", ".data")) and top[0] != "..":
                found.append(top[0])
    found += [n.replace("-", "_") for n in sorted(wanted)]
    return tuple(dict.fromkeys(found))


PRECOMPILE = r"""
import compileall, importlib.metadata as md, importlib.util, json, os, sys
root = os.path.realpath(sys.prefix)
for name in json.loads(sys.argv[1]):
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        continue
    for mod in (dist.read_text("top_level.txt") or "").split():
        spec = importlib.util.find_spec(mod) if mod.isidentifier() else None
        for loc in (spec.submodule_search_locations or []) if spec else []:
            if os.path.realpath(loc).startswith(root + os.sep):  # the venv's own copy, not the base's
                compileall.compile_dir(loc, quiet=2, workers=1)
"""


def precompile(env: Env, dists: list[str]) -> None:
    """Write the bytecode of the point's own packages (uv installs sources only) while another point
    runs, so that the run does not compile them on its way (or on every import, where
    PYTHONDONTWRITEBYTECODE is set).  Measured on 2 cores: accelerate's import went from ~3.7 to
    ~3.0 s of CPU; compiling it took 0.2 s.  Best effort: a failure leaves the run to compile."""
    if not dists:
        return
    import json

    proc.run([env.python, "-c", PRECOMPILE, json.dumps(dists)], env=clean_env(facts.MORTAL), timeout=300)


def folds_check(case: Case) -> bool:
    """Whether the import check is made inside the run by the start-up hook: where the case's
    launch line says its first interpreter is the point venv's (not an executable or srun's
    tasks), not for a multi-node case (every node's venv is checked before the launch), not
    with ``DSBISECT_CHECK_IMPORTS=0`` in the case's env."""
    if case.nodes.multi or dict(case.env).get("DSBISECT_CHECK_IMPORTS") == "0":
        return False
    return line_for(case).folds_check


def import_check_key(case: Case, accel: Accelerator, wanted: list[str]) -> tuple[str, ...]:
    """What an import check depends on besides the venv: shims, case env, accelerator, dsbisect."""
    from dsbisect import __version__
    from dsbisect.envs.base import hook_source

    return (*case.compat, digest({"env": [list(e) for e in case.env], "accel": accel.value, "wanted": wanted,
                                  "dsbisect": __version__, "hook": hook_source()}))


INPUT_COPY_LIMIT = 1 << 20  # a file the command names is copied into the run folder up to this size


def record_inputs(case: Case, run: RunDir) -> RunFacts:
    """The command and the files it names, for the run's record: each file's digest, and a copy
    of it in the run folder (``inputs/``) when it is small, so the report shows what ran."""
    items = []
    for path, digest_ in case.inputs:
        src = Path(path)
        item = {"path": path, "sha256": digest_, "bytes": src.stat().st_size if src.is_file() else None,
                "copy": None}
        if item["bytes"] is not None and item["bytes"] <= INPUT_COPY_LIMIT:
            dest = run.inputs / f"{len(items):02d}-{src.name}"
            dest.parent.mkdir(exist_ok=True)
            shutil.copyfile(src, dest)
            item["copy"] = str(dest.relative_to(run.path))
        items.append(item)
    line = case.command.argv if case.command else case.line  # a `-- python x.py` case: the line as given
    return RunFacts.of(command=list(line) or None, inputs=items or None)
