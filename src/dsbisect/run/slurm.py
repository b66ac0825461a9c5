"""The Slurm executor: each run of a point is one Slurm job, submitted with plain ``sbatch``.

For every run the submitting dsbisect writes a job folder on shared storage,
``<store>/slurm/<case>-<point>-XXXX/``, holding ``job.json`` (the case, the point, the venv
and index options) and ``job.sh``, which runs ``python -m dsbisect run-one job.json`` with
the interpreter dsbisect itself runs on (so it, the store and ``--cache-dir`` must be at the
same paths on the compute nodes).  On the node, ``run-one`` makes the run through the local
executor (``local.LocalExecutor``: venv, import check, launch, classify) into a store of
its own in the job folder, since SQLite's WAL cannot be shared between hosts, and writes
``result.json`` last.  The submitting side follows the job with ``scontrol show job``
(``sacct`` once slurmctld has forgotten it), copies the finished run into the main store,
and records Slurm's own failures (CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED,
BOOT_FAIL, DEADLINE, or a job that ended without a result) as SKIP runs whose reason names
the job and its state.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from dsbisect.core import proc
from dsbisect.core.errors import ExternalFailure, Interrupted, Stopped, signal_of
from dsbisect.core.model import Accelerator, Case, EnvOptions, IndexOptions, Outcome, Point, RunStatus
from dsbisect.core.redact import scrub_folder
from dsbisect.core.rundir import RunDir
from dsbisect.run.executor import Delegated, Progress, RunSpec, Site, Slot
from dsbisect.records.run import Evidence, RunFacts, RunRecord, SkipCause
from dsbisect.run.reuse import Reuse
from dsbisect.store.store import Store

ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
          "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "POWER_UP_NODE"}
SPEC = "job.json"
RESULT = "result.json"
RUN_IDS = "run-ids"


@dataclass(frozen=True)
class SlurmOptions:
    """What every job asks Slurm for; unset fields fall back to the case's ``slurm:`` settings."""

    partition: str | None = None
    time: int | None = None  # minutes; default: the case's timeout + 30
    gpus: int | None = None  # per node; default: nproc for accelerator: cuda, else 0
    args: tuple[str, ...] = ()  # more sbatch arguments, after ours (the last one wins)
    jobs: int = 8  # jobs in flight at once
    poll_s: float = 5.0  # how often to ask Slurm about a job (the result file is watched more often)


@dataclass(frozen=True)
class JobState:
    state: str  # COMPLETED, TIMEOUT, ... or UNKNOWN
    reason: str = ""
    exit_code: str = ""
    node: str = ""

    @property
    def ended(self) -> bool:
        return self.state not in ACTIVE and self.state != "UNREACHABLE"


@dataclass
class SlurmExecutor(Delegated):
    """One Slurm job per run (``--executor slurm``), its record copied into ``site``'s store."""

    site: Site
    options: SlurmOptions = field(default_factory=SlurmOptions)

    def slots(self, case: Case) -> list[Slot]:
        return [Slot()] * max(1, self.options.jobs)

    def run_once(self, spec: RunSpec, cancel: threading.Event) -> RunRecord:
        """Submit one run of ``point`` as a Slurm job, wait for it, and return its record."""
        site, case, point, attempt = self.site, spec.case, spec.point, spec.attempt
        label = f"{case.name} · {point.label}"
        folder = _job_folder(site.store.dir / "slurm", case, point)
        gpus = self.gpus(case)
        _write_spec(folder, site, case, point, attempt, gpus)
        job_id = self._submit(folder, case, gpus)
        site.progress("run", f"{label}: slurm job {job_id} submitted ({folder.name})")
        try:
            state = self._wait(folder, job_id, label, cancel)
        except KeyboardInterrupt as e:  # Ctrl-C (130), SIGTERM (143) or SIGHUP (129), as on every path
            _scancel(job_id)
            raise Interrupted(f"interrupted; slurm job {job_id} was cancelled", signal_of(e)) from None
        record = _import(site, case, point, attempt, folder, job_id, state)
        scrub_folder(folder, skip=(RunDir.RECORD,))  # job.json carried the index's credentials and the command's tokens
        site.progress("done", f"{label}: {record.outcome.value} (slurm job {job_id}"
                                f"{' on ' + state.node if state.node else ''}){_why(record)}")
        return record

    # -- submission

    def gpus(self, case: Case) -> int:
        if self.options.gpus is not None:
            return self.options.gpus
        if case.slurm.gpus is not None:
            return case.slurm.gpus
        return case.nproc if case.accelerator is Accelerator.CUDA else 0

    def sbatch_argv(self, folder: Path, case: Case, gpus: int) -> list[str]:
        minutes = self.options.time or case.slurm.time or math.ceil(case.timeout / 60) + 30
        partition = self.options.partition or case.slurm.partition
        argv = ["sbatch", "--parsable", f"--job-name=dsbisect-{case.name}", f"--chdir={folder}",
                f"--output={folder}/slurm-%j.out", f"--time={minutes}", f"--nodes={case.nodes.num_nodes or 1}",
                "--ntasks-per-node=1", f"--cpus-per-task={case.nproc}"]
        if partition:
            argv.append(f"--partition={partition}")
        if gpus:
            argv.append(f"--gres=gpu:{gpus}")
        return argv + list(case.slurm.args) + list(self.options.args) + [str(folder / "job.sh")]

    def _submit(self, folder: Path, case: Case, gpus: int) -> str:
        argv = self.sbatch_argv(folder, case, gpus)
        done = proc.run(argv, timeout=120)
        if done.returncode is None and done.error.startswith("no answer"):
            raise ExternalFailure("--executor slurm: sbatch did not answer within 120 s")
        if done.returncode is None:
            raise ExternalFailure("--executor slurm: sbatch is not on PATH (run dsbisect on a Slurm login node)")
        if not done.ok:
            raise ExternalFailure(f"sbatch refused the job: {done.last_line()} "
                                  "(check --partition, --slurm-time, --gpus-per-job, --slurm-arg and the matrix's slurm:)")
        return done.stdout.strip().split(";")[0]

    # -- waiting

    def _wait(self, folder: Path, job_id: str, label: str, cancel: threading.Event) -> JobState:
        """Until the result file appears or Slurm says the job ended; the last state seen."""
        state, next_ask, interval = JobState("PENDING"), 0.0, 0.5
        while not (folder / RESULT).exists():
            if cancel.is_set():
                _scancel(job_id)
                raise Interrupted(f"cancelled; slurm job {job_id} was cancelled")
            if time.monotonic() >= next_ask:
                seen = job_state(job_id)
                if seen.state != "UNREACHABLE" and (seen.state, seen.reason) != (state.state, state.reason):
                    why = f" ({seen.reason})" if seen.reason not in ("", "None") else ""
                    self.site.progress("run", f"{label}: slurm job {job_id} {seen.state.lower()}{why}")
                    state = seen
                if seen.ended:
                    _await_file(folder / RESULT, 10.0 if seen.state == "COMPLETED" else 2.0)  # shared-FS lag
                    return seen
                interval = min(self.options.poll_s, interval * 1.5)  # quick failures are seen quickly
                next_ask = time.monotonic() + interval
            time.sleep(0.25)
        last = job_state(job_id)  # for the record: the node, and where the job got to
        return last if last.state != "UNREACHABLE" else state


def _await_file(path: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.25)


def job_state(job_id: str) -> JobState:
    """What Slurm says about ``job_id``: scontrol while slurmctld remembers it, then sacct."""
    done = proc.run(["scontrol", "show", "job", "-o", job_id], timeout=60)
    if done.returncode is None:
        return JobState("UNREACHABLE")
    if done.ok:
        fields = dict(re.findall(r"(\w+)=(\S*)", done.stdout))
        node = next((v for v in (fields.get("BatchHost"), fields.get("NodeList")) if v and v != "(null)"), "")
        return JobState(fields.get("JobState", "UNKNOWN"), fields.get("Reason", ""), fields.get("ExitCode", ""), node)
    if "Invalid job id" not in done.stderr:
        return JobState("UNREACHABLE")  # slurmctld restarting, say: ask again later
    return _sacct(job_id)


def _sacct(job_id: str) -> JobState:
    done = proc.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State,ExitCode,NodeList"], timeout=60)
    if done.returncode is None:
        return JobState("UNKNOWN", "no sacct")
    line = done.stdout.strip().splitlines()[:1]
    if not done.ok or not line:
        return JobState("UNKNOWN", "slurmctld forgot the job and sacct has no record of it")
    state, code, node = (line[0].split("|") + ["", "", ""])[:3]
    return JobState(state.split()[0] if state else "UNKNOWN", state, code, node)


def _scancel(job_id: str) -> None:
    proc.run(["scancel", job_id], timeout=60)


# ------------------------------------------------------------------ job folder and spec


def _job_folder(root: Path, case: Case, point: Point) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^\w.-]+", "_", case.name)[:40]
    return Path(tempfile.mkdtemp(prefix=f"{safe}-{point.key[:8]}-", dir=root))


def _write_spec(folder: Path, site: Site, case: Case, point: Point, attempt: int, gpus: int) -> None:
    envs = site.envs
    spec = {
        "case": case.to_json(),
        "point": point.to_json(with_repo=True),  # the node builds a commit from the clone
        "attempt": attempt,
        "gpus": gpus,
        "cache_dir": str(envs.root),
        "env_options": envs.options.to_json(),
        "index": envs.index.to_json(),
        "submitted_from": socket.gethostname(),
    }
    (folder / SPEC).write_text(json.dumps(spec, indent=1))
    script = folder / "job.sh"
    script.write_text(f"#!/bin/bash\nexec {shlex.quote(sys.executable)} -m dsbisect run-one "
                      f"{shlex.quote(str(folder / SPEC))}\n")
    script.chmod(0o755)


# --------------------------------------------------------------------- on the compute node


class _JobStore(Store):
    """The job's own store, which also notes the id of every run it starts (read by the submitter)."""

    def claim(self, *args, **kwargs):
        claim = super().claim(*args, **kwargs)
        if claim.run is not None:
            with open(self.dir.parent / RUN_IDS, "a") as f:
                f.write(f"{claim.run.id}\n")
        return claim


def run_job(spec_path: Path, progress: Progress) -> RunRecord:
    """``dsbisect run-one``: the job's one run, made here by the local executor."""
    spec_path = Path(spec_path).resolve()
    spec = json.loads(spec_path.read_text())
    folder = spec_path.parent
    signal.signal(signal.SIGTERM, _interrupt)  # Slurm's scancel / time limit: stop the run's processes
    if spec["gpus"] == 0:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # no GPUs asked for: none used, even if the node shows some
    from dsbisect.run.session import make_runner

    runner = make_runner(_JobStore(folder / "store"), Path(spec["cache_dir"]),
                         EnvOptions.from_json(spec["env_options"]), IndexOptions.from_json(spec["index"]),
                         progress, rerun=True)
    case = runner.executor.case_for(Case.from_json(spec["case"]))
    record = runner.run_once(case, Point.from_json(spec["point"]), spec["attempt"])
    tmp = folder / f"{RESULT}.tmp"
    tmp.write_text(json.dumps({"run_id": record.id, "host": socket.gethostname()}))
    tmp.rename(folder / RESULT)
    return record


def _interrupt(signum, frame) -> None:
    raise Stopped(signum)  # the job exits 143, as a SIGTERM'd dsbisect does anywhere


# ---------------------------------------------------------------- back on the submitter


def _import(site: Site, case: Case, point: Point, attempt: int, folder: Path, job_id: str,
            state: JobState) -> RunRecord:
    """The job's run copied into the main store, or a SKIP saying what Slurm did to the job."""
    job_runs = _job_runs(folder)
    done = job_runs[-1] if job_runs and job_runs[-1].status is RunStatus.DONE and (folder / RESULT).exists() else None
    slurm = {"job": job_id, "state": state.state, "node": state.node, "folder": str(folder)}
    store = site.store
    if done is not None:
        slurm["started"] = round(done.started, 3)  # on the node (the main store's row starts now)
        run_id = store.start_run(case.name, case.key, point, done.env_key, attempt)
        store.finish_run(run_id, done.outcome, done.exit_code, done.seconds or 0.0, reason=done.reason,
                         signature=done.signature, evidence=done.evidence,
                         facts=replace(Reuse(store, site.envs).adopt(case, done.facts), slurm=slurm),
                         env_key=done.env_key, run_dir=Path(done.run_dir) if done.run_dir else folder)
        return store.run(run_id)
    started = job_runs[-1] if job_runs else None
    run_dir = folder
    if started is not None:  # a run the job began: keep its folder (the runner names it by its id)
        began = Path(started.run_dir) if started.run_dir else folder / "store" / "runs" / f"{started.id:06d}"
        run_dir = began if began.is_dir() else folder
    run_id = store.start_run(case.name, case.key, point, started.env_key if started else None, attempt)
    store.finish_run(run_id, Outcome.SKIP, None, 0.0, reason=_lost_reason(folder, job_id, state),
                     facts=replace(started.facts if started else RunFacts(), slurm=slurm),
                     evidence=Evidence(skip_cause=SkipCause.SLURM),
                     env_key=started.env_key if started else None, run_dir=run_dir)
    return store.run(run_id)


def _job_runs(folder: Path) -> list[RunRecord]:
    ids_file = folder / RUN_IDS
    if not ids_file.exists() or not (folder / "store" / "dsbisect.sqlite3").exists():
        return []
    job_store = Store(folder / "store", readonly=True)
    try:
        return [r for r in (job_store.run(int(i)) for i in ids_file.read_text().split()) if r is not None]
    finally:
        job_store.close()


WHY = {"TIMEOUT": "it reached its time limit (--slurm-time)", "NODE_FAIL": "its node failed",
       "OUT_OF_MEMORY": "it ran out of memory", "CANCELLED": "it was cancelled", "PREEMPTED": "it was preempted",
       "BOOT_FAIL": "its node did not boot", "DEADLINE": "its deadline passed",
       "COMPLETED": "it ended without recording a run"}


def _lost_reason(folder: Path, job_id: str, state: JobState) -> str:
    """E.g. "slurm job 12 TIMEOUT: it reached its time limit (--slurm-time) (TimeLimit); see .../slurm-12.out"."""
    extra = [state.reason] if state.reason not in ("", "None") else []
    if state.exit_code not in ("", "0:0"):
        extra.append(f"exit code {state.exit_code}")
    out = folder / f"slurm-{job_id}.out"
    return (f"slurm job {job_id} {state.state}" + (f": {WHY[state.state]}" if state.state in WHY else "")
            + (f" ({', '.join(extra)})" if extra else "") + (f"; see {out}" if out.exists() else ""))


def _why(record: RunRecord) -> str:
    return f": {record.reason[:160]}" if record.outcome is Outcome.SKIP and record.reason else ""
