"""The local executor: a run of a point made on this machine, from claim to record.

``LocalExecutor.run_once`` claims the run in the store (or, when another dsbisect is running the
point, takes that one's run once it ends), builds or reuses the point's venv, makes the import
check, launches the case under watch (``launch.supervise``), judges the launch (``launched``) and
records it.  Runs at once go to disjoint GPU slices, or share the cores, as far as the memory
here holds them (``memory``); one the out-of-memory killer ended while others ran runs again
alone.  A Slurm job's ``run-one`` makes its run through this executor too.

What a point costs besides its script: the import check is made inside the run by the venv's
start-up hook (``DSBISECT_CHECK_IMPORTS``: the first interpreter, the launcher or the one rank,
imports the point's packages, writes the facts into the run folder, and exits 125 when one
fails), except where the run's first interpreter may not be the venv's (an executable command
line) or the check must come before the launch (multi-node); and a 1-rank case runs its script
with the venv's python as rank 0 of 1, without the launcher's processes (``launchers.direct_run``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shlex
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from dsbisect.core import eta
from dsbisect.core.errors import DiskFull, EnvBuildError, Interrupted, StoreError, signal_of
from dsbisect.core.model import Accelerator, Case, Launcher, Outcome, Point, RunStatus, check_wanted, digest
from dsbisect.core.proc import clean_env, without_unset, writes_bytecode
from dsbisect.core.redact import redact, remember, scrub_folder, secret_values
from dsbisect.core.rundir import RunDir, read_tail
from dsbisect.envs import conditions, facts
from dsbisect.envs.base import has_module
from dsbisect.envs.toolchain import first_on_path, ninja_dir
from dsbisect.envs.venvs import EXTENSIONS, Env, EnvManager, clear_stale_build_locks
from dsbisect.forensics.evidence import Capture
from dsbisect.launch import reaper
from dsbisect.launch.launchers import Target, line_for, plan
from dsbisect.launch.guard import GuardLost
from dsbisect.launch.supervise import LaunchResult, LaunchSpec, StartError, free_port, launch
from dsbisect.records import readings
from dsbisect.records.run import Evidence, ImportCheck, RunFacts, RunRecord, SkipCause
from dsbisect.run import memory, multinode
from dsbisect.run import readings as run_readings
from dsbisect.run.executor import Progress, RunSpec, Site, Slot
from dsbisect.run.launched import Job, Line, Ran, judge, record_inputs
from dsbisect.run.memory import GateToken, PointGate
from dsbisect.run.phases import PhaseWatch
from dsbisect.run.reuse import Reuse, stale
from dsbisect.store.store import Store
from dsbisect.verdict.outcome import Classified, first_error


def accelerator(site: Site, case: Case) -> Accelerator:
    """What a run of ``case`` gets on ``site``'s machine: its accelerator, or for AUTO cuda when
    the machine has nproc GPUs."""
    if case.accelerator is not Accelerator.AUTO:
        return case.accelerator
    return Accelerator.CUDA if len(site.gpus) >= case.nproc else Accelerator.CPU


def enough_gpus(site: Site, case: Case) -> bool:
    return accelerator(site, case) is not Accelerator.CUDA or len(site.gpus) >= case.nproc


@dataclass
class LocalExecutor:
    """Makes runs on this machine (the ``Executor`` of ``run`` and ``bisect`` unless told
    otherwise): ``site``'s GPUs, cores and memory, its store and venvs."""

    site: Site
    _ports: set[int] = field(default_factory=set)  # rendezvous ports held by runs in flight
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _gate: PointGate = field(default_factory=PointGate)

    @property
    def store(self) -> Store:
        return self.site.store

    @property
    def envs(self) -> EnvManager:
        return self.site.envs

    @property
    def progress(self) -> Progress:
        return self.site.progress

    @property
    def gpus(self) -> tuple[str, ...]:
        return self.site.gpus

    @functools.cached_property
    def reuse(self) -> Reuse:
        return Reuse(self.store, self.envs)

    def accelerator(self, case: Case) -> Accelerator:
        return accelerator(self.site, case)

    # ------------------------------------------------------ where runs go

    def case_for(self, case: Case) -> Case:
        return case.for_gpu(self.gpus[0] if self.gpus else None)

    def where(self, case: Case) -> str:
        return self.accelerator(case).value

    def _where(self, case: Case) -> str:
        return self.where(case)

    def unrunnable(self, case: Case) -> str:
        if enough_gpus(self.site, case):
            return ""
        return f"needs {case.nproc} CUDA GPUs; this machine has " + (
            f"{len(self.gpus)} ({self.gpus[0]})" if self.gpus else "0")

    def builds_here(self, case: Case) -> bool:
        return enough_gpus(self.site, case)

    def slots(self, case: Case) -> list[Slot]:
        """Disjoint GPU slices, or CPU process budgets, as far as the memory here holds them."""
        if self._one_at_a_time(case):
            return [Slot()]
        n = self.memory_plan(case)[0]
        if self.accelerator(case) is Accelerator.CUDA:
            ids = self.site.gpu_ids or list(range(len(self.gpus)))
            if n == 1:
                return [Slot()]
            return [Slot(tuple(ids[k * case.nproc:(k + 1) * case.nproc])) for k in range(n)]
        return [Slot()] * n

    def _one_at_a_time(self, case: Case) -> bool:
        """A multi-node run holds the hosts and slots it names; a command line on GPUs picks its
        GPUs itself: one run at a time."""
        return case.nodes.multi or bool(case.command and self.accelerator(case) is Accelerator.CUDA)

    def wanted_slots(self, case: Case) -> int:
        """Points at once that the GPUs (one slice of nproc each), the cores (nproc each) or
        ``--jobs`` allow, before memory is counted."""
        jobs = self.site.jobs
        if self.accelerator(case) is Accelerator.CUDA:
            groups = len(self.site.gpu_ids or self.gpus) // case.nproc
            return max(1, min(groups, jobs or groups))
        return max(1, jobs or max(1, (os.cpu_count() or 1) // case.nproc))

    def memory_plan(self, case: Case) -> tuple[int, str]:
        """How many of the ``wanted_slots`` the memory here holds, and the figures, for the
        progress line ("memory: 1.4 GB free of 1.4 GB limit, ~0.9 GB per point"): a point's
        expected memory is the peak of the case's recorded runs, else a guess per rank."""
        case = self.case_for(case)
        wanted = self.wanted_slots(case)
        if wanted <= 1 or self._one_at_a_time(case):
            return 1, ""
        room = memory.room()
        if room is None:
            return wanted, ""
        peaks = self.store.peak_rss(case.name)
        per_point = memory.expected(case.nproc, peaks)
        return memory.points_at_once(wanted, room, per_point), memory.describe(room, per_point, bool(peaks))

    # ------------------------------------------------------------ one run

    def run_once(self, spec: RunSpec, cancel: threading.Event) -> RunRecord:
        """One run here: claimed in the store first (or, when another dsbisect is running this
        point, that one's run once it ends), then venv, import check, launch."""
        case, point = spec.case, spec.point
        reason = self.unrunnable(case)
        if reason:
            same = self.store.same_skip(case.key, point.key, reason, facts.host().name)
            if same is not None:  # the machine has not changed: no new record every time
                self.progress("reused", f"{case.name} · {point.label}: skip ({reason}; run {same.id}, recorded)")
                return same
        done = self._run_gated(spec, cancel, alone=False)
        if done.evidence.oom_others:  # killed while other points ran: once more, alone
            self.progress("run", f"{case.name} · {point.label}: run {done.id} was killed by the out-of-memory "
                                 "killer while other points ran; waiting for them to run it alone")
            done = self._run_gated(spec, cancel, alone=True)
        return done

    def _run_gated(self, spec: RunSpec, cancel: threading.Event, alone: bool) -> RunRecord:
        """One run, counted as running for the memory gate (``alone``: with no other point)."""
        with self._gate.enter(alone) as token:
            run = self._claim(spec.case, spec.point, spec.attempt, cancel)
            if run.status is RunStatus.DONE:
                return run
            try:
                return self._prepare_and_launch(run, spec, token, cancel)
            except KeyboardInterrupt as e:
                self.store.abandon_run(run.id, "interrupted")
                cancel.set()
                if run.run_dir:  # its logs too are read by the group; known() holds the run's secrets
                    scrub_folder(Path(run.run_dir), skip=(RunDir.RECORD,))
                raise Interrupted("interrupted; the run's processes were stopped", signal_of(e)) from None
            except GuardLost as e:  # its supervision failed: no outcome; its processes were stopped by their tag
                self.store.abandon_run(run.id, f"interrupted: {e}; its processes were stopped")
                cancel.set()
                raise Interrupted(f"run {run.id} was interrupted: {e}; its processes were stopped, and the run "
                                  "is run again next time", int(signal.SIGKILL)) from None
            except DiskFull as e:  # the run is not left running: interrupted, saying why, where that can be written
                with contextlib.suppress(DiskFull, StoreError):
                    self.store.abandon_run(run.id, str(e))
                raise

    def _claim(self, case: Case, point: Point, attempt: int, cancel: threading.Event) -> RunRecord:
        while True:
            claim = self.store.claim(case.name, case.key, point, attempt)
            if claim.run is not None:
                return claim.run
            busy = claim.busy
            self.progress("run", f"{case.name} · {point.label}: another dsbisect (pid {busy.pid}) is running it "
                                 f"as run {busy.id}; waiting for it")
            while (theirs := self.store.run(busy.id)).status is RunStatus.RUNNING:
                if cancel.is_set():
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

    def _prepare_and_launch(self, run: RunRecord, spec: RunSpec, token: GateToken,
                            cancel: threading.Event) -> RunRecord:
        case, point = spec.case, spec.point
        label = f"{case.name} · {point.label}"
        accel = self.accelerator(case)
        if self.unrunnable(case):
            return self._skip(run, self.unrunnable(case), SkipCause.GPUS)
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
        return self._launch(Job(run, case, point, env, accel, spec.slot, token, cancel), check)

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
        variables = without_unset(self._base_env(case, accel) | dict(case.env))
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

    def _launch(self, job: Job, check: ImportCheck | None) -> RunRecord:
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
        c, signature, evidence = judge(job, line, ran)
        untested = no_rank_started(job, line, ran.result) if c.outcome in (Outcome.FAIL, Outcome.HANG) else ""
        if untested:  # the launcher failed, not the job: untestable with this line
            return self._skip(job.record, untested, SkipCause.START, env_key=job.env.key, case=job.case, env=job.env)
        short = line.ranks.shortfall(job.run.ranks_started()) if c.outcome is not Outcome.SKIP else ""
        if short:
            self.progress("note", f"{job.case.name} · {job.point.label}: warning: {short}")
            evidence = evidence.noted(f"warning: {short}")
        return self._record(job, ran, check, c, signature, evidence)

    def _launch_line(self, job: Job, checks: bool) -> Line:
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
        target = Target(env.python, run, port, devices)
        p = plan(case, target, cuda, variables.get("CUDA_VISIBLE_DEVICES"))
        case, chosen = installed_launcher(case, env.path) if not p.line.direct else (case, "")  # no launcher: none to swap
        if chosen:
            with open(run.launcher_log, "a") as note:
                note.write(f"dsbisect: {chosen}\n")
            self.progress("note", f"{case.name} · {job.point.label}: {chosen}")
            p = plan(case, target, cuda, variables.get("CUDA_VISIBLE_DEVICES"))
        variables = without_unset(variables | p.env)  # a setting's trial may remove a variable
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
            early_hang=case.early_hang,
        )
        return Line(spec, port, direct, secrets, ranks)

    def _supervise(self, job: Job, line: Line) -> Ran:
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
        started = conditions.at_start(job.accel.value, line.spec.env, job.slot.devices)
        t0 = time.monotonic()
        ooms = memory.oom_counts()
        ops = Path(line.spec.env.get("TORCH_EXTENSIONS_DIR") or job.env.path / EXTENSIONS)
        say = lambda text: self.progress("run", f"{case.name} · {job.point.label}: {text}")  # noqa: E731
        try:
            claims = run.path if line.spec.env.get("DSBISECT_OPS_DIR") else None  # this run's shared op builds
            with PhaseWatch(ops, say, claims):  # "compiling DeepSpeed's shm_comm op (first run of this venv)"
                result = launch(line.spec, on_hang=hooks, on_quiet=hooks, on_idle=hooks.stuck, cancel=job.cancel,
                                on_parked=hooks.parked)
        finally:
            with self._lock:
                self._ports.discard(line.port)
            if hooks is not capture:
                remote_left = hooks.stop()
            escaped = reaper.stop_tagged(run.path)  # daemons that left the process tree
            shm = reaper.remove_run_shm(line.port) if case.nodes.hostfile is None else []
        return Ran(result, capture, t0, ooms, given, named, tuple(remote_left), escaped, tuple(shm), started)

    def _record(self, job: Job, ran: Ran, check: ImportCheck, c: Classified, signature: str,
                evidence: Evidence) -> RunRecord:
        """Store the finished run, with its numbers and the facts of its venv, inputs, machine and
        conditions."""
        case, point, env, accel = job.case, job.point, job.env, job.accel
        seconds = time.monotonic() - ran.t0
        evidence |= numbers_evidence(job.run, seconds)
        done = self.store.finish_run(
            job.record.id, c.outcome, ran.result.exit_code, seconds, reason=c.reason,
            signature=signature, evidence=evidence,
            facts=check.facts | ran.given | RunFacts.of(
                accelerator=accel.value, shadowed=env.shadowed, host=facts.host(), index=self.envs.index.origin,
                fingerprint=self.reuse.record(case, point, env, job.run, ran.named, accel.value),
                conditions=conditions.at_end(ran.conditions).to_json()),
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


def installed_launcher(case: Case, venv: Path) -> tuple[Case, str]:
    """The case to launch, with a launcher the point venv has, and what was chosen instead ("" when
    nothing was): a script under DeepSpeed's launcher (the default) in a venv without DeepSpeed (a
    Transformers or Accelerate user's) runs under torchrun, which comes with torch; without torch
    either, dsbisect starts the ranks itself.  A command line's own launcher is never changed."""
    if case.command is not None or case.launcher is not Launcher.DEEPSPEED or has_module(venv, "deepspeed"):
        return case, ""
    other = Launcher.TORCHRUN if has_module(venv, "torch") else Launcher.DIRECT
    return (dataclasses.replace(case, launcher=other, launcher_args=()),
            f"the deepspeed launcher is not installed in the point venv (no deepspeed): the script runs under "
            f"{'torchrun' if other is Launcher.TORCHRUN else 'no launcher (dsbisect starts the ranks)'} instead")


def no_rank_started(job: Job, line: Line, result: LaunchResult) -> str:
    """Why a failed run tested nothing ("" when a rank started): a launcher line whose launcher
    ended before any process of the point venv's Python ran as a rank (the start-up hook leaves
    a file for each), e.g. a launcher the venv lacks (``No module named 'deepspeed'``)."""
    if line.direct or not line.ranks.count or job.run.ranks_started():
        return ""
    text = read_tail(job.run.launcher_log, 1 << 16)
    own = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("dsbisect:")]
    said = redact((first_error(text) or (own[-1] if own else ""))[:300]) or f"exit {result.exit_code}"
    kind = job.case.command.kind.value if job.case.command is not None else job.case.launcher.value
    return (f"no rank of the job started: the {kind} launcher ended before starting any ({said}); "
            "use a launcher installed in the point venv (torchrun comes with torch; or `launcher: direct`), "
            "or install it in the base")


def numbers_evidence(run: RunDir, seconds: float) -> Evidence:
    """The run's numbers (``run.readings``) as its evidence keeps them."""
    found = run_readings.collect(run, seconds)
    return Evidence.of(readings=readings.to_json(found.readings) or None, readings_dropped=found.dropped or None)


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
