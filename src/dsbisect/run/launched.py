"""A run launched here, on its way through ``local.LocalExecutor``'s pipeline, and judged.

A ``Job`` is what the run tests and where (its record, case, point, venv, accelerator, slot);
a ``Line`` what it is launched with; a ``Ran`` the launch that ended, with what was read around
it.  ``judge`` gives the run's outcome, signature and evidence from its logs and what the launch
saw, then caps the run folder and scrubs it of the run's secrets; ``record_inputs`` keeps the
command and the files it names with the run.
"""

from __future__ import annotations

import json
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from dsbisect.core.model import Accelerator, Case, Outcome, Point
from dsbisect.core.redact import redact, scrub_folder
from dsbisect.core.rundir import RunDir, read_tail
from dsbisect.envs.venvs import Env
from dsbisect.forensics.evidence import Capture
from dsbisect.forensics.stuck import analyze, hang_record
from dsbisect.launch import reaper
from dsbisect.launch.launchers import Ranks
from dsbisect.launch.supervise import LaunchResult, LaunchSpec
from dsbisect.records import readings
from dsbisect.records.conditions import Conditions
from dsbisect.records.run import Evidence, RunFacts, RunRecord, SkipCause
from dsbisect.run import memory
from dsbisect.run import readings as run_readings
from dsbisect.run.executor import Slot
from dsbisect.run.memory import GateToken
from dsbisect.run.reuse import Start
from dsbisect.verdict.identity import package_frames
from dsbisect.verdict.machine import CudaFailure, machine_verdict
from dsbisect.verdict.outcome import Classified, classify, first_error


@dataclass(frozen=True)
class Job:
    """One run on its way through the pipeline: its record, what it tests, and where."""

    record: RunRecord
    case: Case
    point: Point
    env: Env
    accel: Accelerator
    slot: Slot
    token: GateToken
    cancel: threading.Event = field(default_factory=threading.Event)  # set: the launch stops

    @property
    def run(self) -> RunDir:
        return RunDir(Path(self.record.run_dir))


@dataclass(frozen=True)
class Line:
    """What the run is launched with."""

    spec: LaunchSpec
    port: int  # the rendezvous port, held for the run
    direct: bool  # the ranks started by dsbisect, without a launcher
    secrets: frozenset[str]  # values masked in the run folder afterwards
    ranks: Ranks  # the ranks the line starts, and what dsbisect added so that it does


@dataclass(frozen=True)
class Ran:
    """A launch that ended, with what was read around it."""

    result: LaunchResult
    capture: Capture  # the stacks and notes taken while it ran
    t0: float  # monotonic time of the launch
    ooms: tuple[memory.OomCount, ...]  # the OOM-kill counters before it
    given: RunFacts  # the inputs it was given (local.record_inputs)
    named: Start  # digests of the paths the case names as it started, and when it started
    remote_left: tuple[str, ...]  # processes on other nodes that could not be stopped
    escaped: reaper.Reaped  # processes that had left the tree, found by their tag
    shm: tuple[str, ...]  # shared-memory files of the run removed
    conditions: Conditions = Conditions()  # what moves numbers, as the run started (envs.conditions)


def judge(job: Job, line: Line, ran: Ran) -> tuple[Classified, str, Evidence]:
    """The run's outcome, signature and evidence, from its logs and what the launch saw; then
    the run folder is capped and scrubbed of the run's secrets."""
    run, result = job.run, ran.result
    tail, rank_tails = run.tails()
    c = classify(result.exit_code, result.timed_out, result.hang_line, result.why, tail, rank_tails)
    c, oom = _oom_verdict(c, result, run, ran.ooms, job.token)
    c, cuda = machine_verdict(c, job.accel is Accelerator.CUDA, cuda_failures(run))
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
        skip_cause=(SkipCause.OOM if oom else SkipCause.CUDA if cuda else SkipCause.EXIT_125)
        if c.outcome is Outcome.SKIP else None)
    return c, signature, evidence


def cuda_failures(run: RunDir) -> tuple[CudaFailure, ...]:
    """The failed CUDA initialisations the start-up hook noted in the run (``RunDir.machine``),
    by rank; a note that cannot be read is passed over (the run's FAIL then stands)."""
    found = []
    for path in sorted(run.machine.glob("cuda.pid*.json")) if run.machine.is_dir() else ():
        try:
            d = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(d, dict) and isinstance(d.get("error"), str):
            rank, devices = d.get("rank"), d.get("devices")
            found.append(CudaFailure(rank if isinstance(rank, str) else None, d["error"][:400],
                                     devices if isinstance(devices, str) else None))
    return tuple(sorted(found, key=lambda f: (f.rank is None, f.rank or "")))


def _oom_verdict(c: Classified, result: LaunchResult, run: RunDir, before: tuple[memory.OomCount, ...],
                 token: GateToken) -> tuple[Classified, dict]:
    """``memory.oom_verdict`` with what this run's counters, logs and gate token say."""
    kill = memory.rise(before, memory.oom_counts()) if c.outcome is Outcome.FAIL else None
    if kill is None:
        return c, {}
    others = 0 if token.alone else token.others
    return memory.oom_verdict(c, result.exit_code, result.timed_out, run.tails()[0], kill, others, token.alone,
                              None if others else memory.room())


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
