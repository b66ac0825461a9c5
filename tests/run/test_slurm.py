"""`--executor slurm` on a real one-node Slurm (started by .ci/slurm-up.sh), skipped without one.

The same toy matrix runs here and as Slurm jobs and must give the same grid, HANG included;
Slurm's own failures (a cancelled job, a job that cannot start, a time limit) are SKIPs that
name the job and its state.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import psutil
import pytest

import toypkg
from conftest import cli_json, make_case, offline, slurm_job_under, wait_until, write_matrix
from dsbisect.run import matrix as matrix_mod
from dsbisect.envs.venvs import EnvManager
from dsbisect.core.model import Accelerator, Case, SlurmSettings
from dsbisect.run.executor import Site, Slot
from dsbisect.run.runner import Runner
from dsbisect.run.slurm import JobState, SlurmExecutor, SlurmOptions, _lost_reason
from dsbisect.store.store import Store


def _slurm_down() -> str:
    """Why the tests cannot use Slurm here ("" when a node answers)."""
    if not (shutil.which("sinfo") and shutil.which("sbatch")):
        return "no Slurm commands (start one with .ci/slurm-up.sh)"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        return "sinfo does not answer"
    states = out.stdout.split()
    if out.returncode != 0 or not {"idle", "mixed", "allocated"} & set(states):
        return f"no Slurm node up ({(out.stderr or out.stdout).strip()[:100] or 'none'})"
    return ""


DOWN = _slurm_down()
real_slurm = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.skipif(bool(DOWN), reason=DOWN)]


def _real(test):
    for mark in real_slurm:
        test = mark(test)
    return test

GRID = {"7.0.0": "ok", "7.1.0": "skip", "7.2.0": "raise", "7.3.0": "import", "7.4.0": "broken"}


@pytest.fixture(scope="module")
def house(tmp_path_factory):
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("slurm-wheels"), GRID, dist="dsb-slurm")


SLEEPER = """\
import os, time
open(os.path.join(os.environ["DSBISECT_RUN_DIR"], "sleeping"), "w").write(str(os.getpid()))
time.sleep(600)
"""


@pytest.fixture(scope="module")
def time_limited(tmp_path_factory, house, cache_dir):
    """A run of a sleeping script with a one-minute Slurm time limit, started before the other tests.

    Slurm kills it 60-90 s after it starts (the smallest limit is a minute, and slurmctld looks
    every 30 s); the grid test's one-CPU jobs run meanwhile on the node's other CPU.
    """
    folder = tmp_path_factory.mktemp("time-limited")
    (folder / "sleeper.py").write_text(SLEEPER)
    _one_point(folder, "limit", script="sleeper.py", timeout=600)
    cmd = [sys.executable, "-m", "dsbisect", "run", "matrix.yaml", *offline(house, cache_dir),
           "--format", "json", "-q", "--executor", "slurm", "--slurm-time", "1"]
    proc = subprocess.Popen(cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600  # a guard: the loop ends at the event
    while not list((folder / ".dsbisect" / "slurm").glob("*/store/runs/*/sleeping")):
        assert proc.poll() is None and time.monotonic() < deadline, "the time-limited job did not start"
        time.sleep(0.5)
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _run(cli, folder: Path, house: Path, cache_dir: Path, store: str, *extra: str) -> dict:
    return cli_json(cli, "run", "matrix.yaml", *offline(house, cache_dir), "--store", store, *extra, cwd=folder)[0]


def _cells(report: dict) -> dict[str, str]:
    return {row["point"]: row["cells"]["toy"]["outcome"] for row in report["grid"]}


@_real
def test_slurm_grid_is_the_local_grid(tmp_path, cli, house, cache_dir, time_limited):
    # the cells the local executor gives for such toy releases (tests/cli/test_run_cli.py): the same here
    write_matrix(tmp_path, list(GRID), package="dsb-slurm", collective_timeout=5)
    # One CPU per job (--slurm-arg comes after dsbisect's own --cpus-per-task=2, and the last
    # one wins): the node declares this machine's 2 cores and the time-limited sleeper holds
    # one of them for 60-90 s; with 2 per job the grid waited for it (136 s, was ~40 s).
    # --no-early-hang: the collective timeout, not the early proof that races it, ends the hang
    slurm = _run(cli, tmp_path, house, cache_dir, "slurm", "--executor", "slurm", "--slurm-time", "5",
                 "--slurm-arg=--cpus-per-task=1", "--no-early-hang")
    assert _cells(slurm) == {
        "dsb-slurm 7.0.0": "pass", "dsb-slurm 7.1.0": "hang", "dsb-slurm 7.2.0": "fail",
        "dsb-slurm 7.3.0": "skip", "dsb-slurm 7.4.0": "skip"}

    there = {r["point"]: r for r in slurm["runs"]}
    for run in there.values():
        job = run["environment"]["slurm"]
        assert job["job"].isdigit() and job["state"] in ("RUNNING", "COMPLETING", "COMPLETED"), job
        shown = subprocess.run(["scontrol", "show", "job", job["job"]], capture_output=True, text=True).stdout
        assert not shown or "NumCPUs=1 " in shown, shown  # --slurm-arg reached sbatch (gone after MinJobAge)
        assert (Path(job["folder"]) / f"slurm-{job['job']}.out").is_file()
        assert Path(run["run_dir"]).is_relative_to(tmp_path / "slurm" / "slurm")
    assert "ValueError: dsb_toy: the loss went NaN" in there["dsb-slurm 7.2.0"]["reason"]
    assert there["dsb-slurm 7.3.0"]["reason"].startswith("import check: import dsb_toy (dsb-slurm) failed"), \
        there["dsb-slurm 7.3.0"]["reason"]
    assert "dsb-nonexistent-dependency" in there["dsb-slurm 7.4.0"]["reason"]
    hang = there["dsb-slurm 7.1.0"]
    assert "all_reduce" in hang["signature"] and "rank 0" in hang["signature"]
    assert "Timed out waiting 5000ms" in hang["reason"] and hang["evidence"]["survivors"] == []
    # (no assertion on the stacks: gloo's timeout races the dump, see tests/cli/test_run_cli.py)

    # Recorded in the main store: a second run submits nothing for PASS/FAIL/HANG.
    again = _run(cli, tmp_path, house, cache_dir, "slurm", "--executor", "slurm", "--case", "toy",
                 "--slurm-arg=--cpus-per-task=1")  # the SKIPs are tried again
    ids = {r["point"]: r["id"] for r in again["runs"]}
    for point in ("dsb-slurm 7.0.0", "dsb-slurm 7.1.0", "dsb-slurm 7.2.0"):
        assert ids[point] == there[point]["id"]
    report = cli("report", "--store", "slurm", cwd=tmp_path)
    assert "HANG" in report.stdout and "PASS" in report.stdout
    # bisect takes the same executor (here both ends are recorded: no job is needed).
    found = cli("bisect", "dsb-slurm", "7.0.0", "7.1.0", "--case", "toy", "--executor", "slurm", "--store", "slurm",
                *offline(house, cache_dir), cwd=tmp_path)
    assert found.exit_code == 0, found.output
    assert "first bad release: dsb-slurm 7.1.0" in found.stdout, found.stdout


def _one_point(folder: Path, name: str, script: str = "toy_repro.py", versions: str = '"7.0.0"',
               timeout: float = 90) -> None:
    (folder / "matrix.yaml").write_text(f"""\
defaults: {{accelerator: cpu, nproc: 1, timeout: {timeout}, collective_timeout: 5}}
cases:
  {name}:
    script: {script}
    axes: {{dsb-slurm: [{versions}]}}
""")


@_real
def test_a_job_that_cannot_start_is_a_skip_naming_it(tmp_path, cli, house, cache_dir):
    toypkg.write_repro(tmp_path)
    _one_point(tmp_path, "nostart")
    report = _run(cli, tmp_path, house, cache_dir, "st", "--executor", "slurm",
                  "--slurm-arg=--output=/nonexistent/dsbisect-%j.out")
    (run,) = report["runs"]
    assert run["outcome"] == "skip"
    assert run["reason"].startswith(f"slurm job {run['environment']['slurm']['job']} FAILED"), run["reason"]
    assert "JobLaunchFailure" in run["reason"]


@_real
def test_a_cancelled_job_is_a_skip_and_sbatch_errors_are_one_line(tmp_path, house, cache_dir):
    toypkg.write_repro(tmp_path)
    _one_point(tmp_path, "held")
    cmd = [sys.executable, "-m", "dsbisect", "run", "matrix.yaml", *offline(house, cache_dir),
           "--format", "json", "-q", "--executor", "slurm", "--slurm-arg=--hold"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        job = wait_until(lambda: slurm_job_under(tmp_path), 120, "the held job in squeue")
    except AssertionError:
        proc.kill()
        raise
    subprocess.run(["scancel", job], check=True)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    (run,) = json.loads(stdout)["runs"]
    assert (run["outcome"], run["reason"]) == ("skip", f"slurm job {job} CANCELLED: it was cancelled (JobHeldUser)")

    bad = subprocess.run(cmd[:-3] + ["--executor", "slurm", "--partition", "nosuchpartition"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1  # the cluster's answer, not bad input
    assert bad.stderr.strip().startswith("error: sbatch refused the job:") and "partition" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


@_real
def test_slurm_time_limit_is_a_skip_and_the_run_is_stopped(time_limited):
    stdout, stderr = time_limited.communicate(timeout=150)
    assert time_limited.returncode == 0, stderr
    (run,) = json.loads(stdout)["runs"]
    assert run["outcome"] == "skip"
    assert run["reason"].startswith(f"slurm job {run['environment']['slurm']['job']} TIMEOUT: it reached its time limit")
    # The partial run's folder is kept, and nothing of it survived on the node.
    rank_pid = int((Path(run["run_dir"]) / "sleeping").read_text())
    assert not psutil.pid_exists(rank_pid) or psutil.Process(rank_pid).status() == psutil.STATUS_ZOMBIE
    marker = f"DSBISECT_RUN_DIR={run['run_dir']}"
    left = []
    for p in psutil.process_iter():
        try:
            if marker in [f"{k}={v}" for k, v in p.environ().items()]:
                left.append(p.pid)
        except psutil.Error:
            continue
    assert left == []


# ------------------------------------------------------------- what is asked of Slurm


def _case(tmp_path: Path, hostfile: Path | None = None, num_nodes: int | None = None, **kw) -> Case:
    return matrix_mod.with_nodes(make_case(tmp_path, **kw), "test", hostfile=hostfile, num_nodes=num_nodes)


def test_sbatch_asks_for_what_the_case_needs(tmp_path):
    gpu = _case(tmp_path, nproc=4, accelerator=Accelerator.CUDA, timeout=1800,
                slurm=SlurmSettings(partition="a100", args=("--account=x",)))
    site = Site(Store(tmp_path / "st"), EnvManager(tmp_path / "cache"))
    ex = SlurmExecutor(site)
    argv = ex.sbatch_argv(tmp_path, gpu, ex.gpus(gpu))
    assert argv[:2] == ["sbatch", "--parsable"] and argv[-1] == str(tmp_path / "job.sh")
    for want in ("--time=60", "--gres=gpu:4", "--partition=a100", "--cpus-per-task=4", "--nodes=1"):
        assert want in argv
    assert argv[-2] == "--account=x"
    # The command line wins over the matrix, and its own sbatch arguments come last.
    ex = SlurmExecutor(site, SlurmOptions(partition="debug", time=5, gpus=0, args=("--qos=low",)))
    argv = ex.sbatch_argv(tmp_path, gpu, ex.gpus(gpu))
    assert "--partition=debug" in argv and "--time=5" in argv and not [a for a in argv if a.startswith("--gres")]
    assert argv[-3:-1] == ["--account=x", "--qos=low"]
    for accel in (Accelerator.CPU, Accelerator.AUTO):
        assert SlurmExecutor(site).gpus(_case(tmp_path, accelerator=accel)) == 0
    hosts = tmp_path / "hosts"
    hosts.write_text("a slots=1\n")
    assert "--nodes=2" in ex.sbatch_argv(tmp_path, _case(tmp_path, hostfile=hosts, num_nodes=2), 0)


def test_slurm_jobs_at_once_come_from_jobs_not_from_this_machine(tmp_path):
    runner = Runner(store=Store(tmp_path / "st"), envs=EnvManager(tmp_path / "cache"), gpus=[],
                    place=partial(SlurmExecutor, options=SlurmOptions(jobs=3)))
    assert runner.slots(_case(tmp_path, nproc=8, accelerator=Accelerator.CUDA)) == [Slot()] * 3
    hosts = tmp_path / "hosts"
    hosts.write_text("a slots=1\nb slots=1\n")
    assert runner.slots(_case(tmp_path, hostfile=hosts)) == [Slot()]  # a multi-node run holds its hosts


@pytest.mark.parametrize("state, reason", [
    (JobState("NODE_FAIL", "NodeDown", "0:0"), "slurm job 12 NODE_FAIL: its node failed (NodeDown)"),
    (JobState("OUT_OF_MEMORY", "OutOfMemory", "0:125"),
     "slurm job 12 OUT_OF_MEMORY: it ran out of memory (OutOfMemory, exit code 0:125)"),
    (JobState("COMPLETED", "None", "0:0"), "slurm job 12 COMPLETED: it ended without recording a run"),
    (JobState("UNKNOWN", "slurmctld forgot the job and sacct has no record of it"),
     "slurm job 12 UNKNOWN (slurmctld forgot the job and sacct has no record of it)"),
])
def test_slurm_failures_name_the_job_and_its_state(tmp_path, state, reason):
    assert _lost_reason(tmp_path, "12", state) == reason


# ----------------------------------------------------------- the srun launch line, for real

SRUN_TRAIN = """\
import datetime, json, os
import torch.distributed as dist
import dsb_toy

keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID",
        "SLURM_NTASKS", "DSBISECT_RUN_DIR")
print("env " + json.dumps({k: os.environ.get(k) for k in keys}), flush=True)
# env://: what the srun line mapped from SLURM_*; the ranks meet within a limit that only bounds
# a failure (a task late on a loaded machine), the collectives keep the case's timeout
meet = datetime.timedelta(seconds=600)  # gloo's full mesh connects within the group's timeout
store, rank, world = next(dist.rendezvous("env://", timeout=meet))
dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=meet)
dist.distributed_c10d._set_pg_timeout(datetime.timedelta(seconds=float(os.environ["DSBISECT_COLLECTIVE_TIMEOUT"])))
dsb_toy.step(dist)
dist.barrier()
dist.destroy_process_group()
"""


@_real
def test_an_srun_line_runs_each_task_as_a_rank(tmp_path, house, cache_dir):
    """``dsbisect run -- srun --ntasks 2 python train.py`` inside an allocation (salloc): each
    task is a rank with torch's variables from Slurm's, its output in ranks/rank<R>.log, and a
    rank's failure is the run's FAIL (the other task stopped by srun)."""
    (tmp_path / "train.py").write_text(SRUN_TRAIN)
    cmd = ["salloc", "--ntasks=2", "--cpus-per-task=1", "--time=5", sys.executable, "-m", "dsbisect", "run",
           "--versions", "dsb-slurm=7.0.0,7.2.0", "--accelerator", "cpu", "--collective-timeout", "10",
           "--offline", "--find-links", str(house), "--cache-dir", str(cache_dir), "--format", "json", "-q",
           "--", "srun", "--ntasks", "2", "python", "train.py"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    runs = {r["versions"]["dsb-slurm"]: r for r in json.loads(out.stdout)["runs"]}
    ok, bad = runs["7.0.0"], runs["7.2.0"]
    assert ok["outcome"] == "pass", ok["reason"]
    assert ok["environment"]["command"] == ["srun", "--ntasks", "2", "python", "train.py"]
    logs = sorted(p.name for p in (Path(ok["run_dir"]) / "ranks").iterdir())
    assert logs == ["rank0.log", "rank1.log"]
    for rank in (0, 1):
        text = (Path(ok["run_dir"]) / "ranks" / f"rank{rank}.log").read_text()
        env = json.loads(next(ln for ln in text.splitlines() if ln.startswith("env "))[4:])
        assert env["RANK"] == env["SLURM_PROCID"] == env["LOCAL_RANK"] == str(rank), env
        assert env["WORLD_SIZE"] == env["SLURM_NTASKS"] == env["LOCAL_WORLD_SIZE"] == "2", env
        assert env["MASTER_ADDR"] == "localhost" and env["MASTER_PORT"].isdigit(), env
        assert env["DSBISECT_RUN_DIR"] == ok["run_dir"]
    assert bad["outcome"] == "fail" and "ValueError: dsb_toy: the loss went NaN" in bad["reason"], bad["reason"]
    # srun names the failed tasks together when both exit before it stops the other ("tasks 0-1").
    assert re.search(r"tasks? 0(-1)?: Exited with exit code 1", (Path(bad["run_dir"]) / "launcher.log").read_text())

    # The same line from matrix.yaml: a script case with launcher: srun (its nproc are the tasks).
    write_matrix(tmp_path / "m", ["7.0.0"], package="dsb-slurm", extra="    launcher: srun\n")
    alloc, options = cmd[:cmd.index(sys.executable) + 1], cmd[cmd.index("--accelerator"):cmd.index("--")]
    out = subprocess.run([*alloc, "-m", "dsbisect", "run", "matrix.yaml", *options], cwd=tmp_path / "m",
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    (run,) = json.loads(out.stdout)["runs"]
    assert run["outcome"] == "pass", run["reason"]
    logs = {p.name: p.read_text() for p in (Path(run["run_dir"]) / "ranks").iterdir()}
    assert set(logs) == {"rank0.log", "rank1.log"} and "rank 1 of 2: dsb_toy 7.0.0" in logs["rank1.log"], logs
