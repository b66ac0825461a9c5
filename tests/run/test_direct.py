"""A 1-rank case runs without a launcher, and the import check is made inside the run.

Real venvs, real processes: the rank is the point venv's python itself (no deepspeed runner,
no launch.py), with RANK/WORLD_SIZE/MASTER_* for ``init_process_group``, its output in
``ranks/rank0.log``; pass, fail and hang are told apart as under the launcher, a hang with the
rank's stack.  The start-up hook's import check (``DSBISECT_CHECK_IMPORTS``) gives the same
skip as the separate check did, and its facts are recorded with the run and for the venv.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import toypkg
from conftest import cli_json, live_pids, offline, write_matrix

pytestmark = pytest.mark.slow

RELEASES = {"1.0.0": "ok", "1.1.0": "raise", "1.2.0": "import"}

SCRIPT = """\
import datetime, os, sys, time
import torch.distributed as dist
import dsb_toy

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: dsb_toy {dsb_toy.__version__} "
      f"RANK={os.environ['RANK']} LOCAL_RANK={os.environ['LOCAL_RANK']} argv={sys.argv[1:]}", flush=True)


def stuck_here():
    while True:
        time.sleep(0.5)


if os.environ.get("DIRECT_TEST_HANG"):
    stuck_here()
dsb_toy.step(dist)
dist.destroy_process_group()
print("done", flush=True)
"""


@pytest.fixture(scope="module")
def house(tmp_path_factory):
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("direct-wheels"), RELEASES, dist="dsb-direct")


def _matrix(folder: Path, versions: list[str], extra: str = "") -> None:
    (folder / "one.py").write_text(SCRIPT)
    listed = ", ".join(f'"{v}"' for v in versions)
    (folder / "matrix.yaml").write_text(f"""\
defaults: {{accelerator: cpu, nproc: 1, timeout: 600, collective_timeout: 30, env: {{OMP_NUM_THREADS: "1"}}}}
cases:
  one:
    script: one.py
    axes: {{dsb-direct: [{listed}]}}
{extra}""")


def _run(cli, folder: Path, house: Path, cache_dir: Path, *extra: str) -> dict:
    report, _ = cli_json(cli, "run", "matrix.yaml", *offline(house, cache_dir), *extra, cwd=folder)
    return {r["point"]: r for r in report["runs"]}


def test_one_rank_runs_without_launcher_pass_fail_and_skip(tmp_path, cli, house, cache_dir):
    _matrix(tmp_path, list(RELEASES))
    runs = _run(cli, tmp_path, house, cache_dir)
    ok, bad, skip = (runs[f"dsb-direct {v}"] for v in RELEASES)

    assert ok["outcome"] == "pass", ok
    folder = Path(ok["run_dir"])
    log = (folder / "ranks" / "rank0.log").read_text()
    # init_process_group (env://) found what a launcher gives its rank; the argv is deepspeed's.
    assert "rank 0 of 1: dsb_toy 1.0.0 RANK=0 LOCAL_RANK=0 argv=['--local_rank=0']" in log, log
    assert "without a launcher" in (folder / "launcher.log").read_text()
    assert len(ok["evidence"]["pids"]) == 1  # the rank alone: no deepspeed runner, no launch.py
    # The import check was made in the run, and its facts are the run's.
    made = json.loads((folder / "import_check.json").read_text())
    assert made["versions"]["dsb-direct"] == "1.0.0" and made["error"] == "" and made["where"] == "run"
    assert ok["environment"]["versions"]["dsb-direct"] == "1.0.0"
    assert ok["environment"]["versions"]["torch"] == made["versions"]["torch"]

    assert bad["outcome"] == "fail"
    assert "ValueError: dsb_toy: the loss went NaN" in bad["reason"], bad["reason"]

    # An import that fails in the run is the same skip the separate check gave.
    assert skip["outcome"] == "skip"
    assert skip["reason"] == ("import check: import dsb_toy (dsb-direct) failed: "
                              "ImportError: dsb_toy needs a newer torch than this one"), skip["reason"]
    skipped = Path(skip["run_dir"])
    assert "dsbisect: import check: import dsb_toy" in (skipped / "ranks" / "rank0.log").read_text()
    assert json.loads((skipped / "import_check.json").read_text())["error"].startswith("import dsb_toy")
    assert skip["environment"]["versions"]["dsb-direct"] == "1.2.0"

    # The check is recorded for the venv: a second run of it checks nothing, and has the same facts.
    again = _run(cli, tmp_path, house, cache_dir, "--rerun")
    for v in RELEASES:
        assert not (Path(again[f"dsb-direct {v}"]["run_dir"]) / "import_check.json").exists()
    assert again["dsb-direct 1.0.0"]["outcome"] == "pass"
    assert again["dsb-direct 1.0.0"]["environment"]["versions"] == ok["environment"]["versions"]
    assert again["dsb-direct 1.2.0"]["reason"] == skip["reason"]


def test_one_rank_hang_has_the_ranks_stack(tmp_path, cli, house, cache_dir):
    _matrix(tmp_path, ["1.0.0"], extra="    idle_timeout: 6\n    env: {DIRECT_TEST_HANG: \"1\", OMP_NUM_THREADS: \"1\"}\n")
    run = _run(cli, tmp_path, house, cache_dir)["dsb-direct 1.0.0"]
    assert run["outcome"] == "hang", run
    assert "no rank's stack moved for 6 s" in run["reason"], run["reason"]
    stacks = Path(run["run_dir"]) / "stacks"
    assert any("stuck_here" in p.read_text() for p in stacks.glob("*.txt")), list(stacks.iterdir())
    assert run["evidence"]["pids"] and not live_pids(run["evidence"]["pids"])
    assert run["evidence"]["survivors"] == []


def test_launcher_makes_the_check_for_its_ranks(tmp_path, cli, house, cache_dir):
    """2 ranks: the deepspeed launcher's own interpreter checks, and exits before any rank starts."""
    write_matrix(tmp_path, ["1.2.0", "1.0.0"], package="dsb-direct", collective_timeout=10, launcher="deepspeed")
    res = cli("run", "matrix.yaml", *offline(house, cache_dir),
              "-q", "--format", "json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    runs = {r["point"]: r for r in json.loads(res.stdout)["runs"]}
    skip, ok = runs["dsb-direct 1.2.0"], runs["dsb-direct 1.0.0"]
    assert skip["outcome"] == "skip"
    assert skip["reason"].startswith("import check: import dsb_toy (dsb-direct) failed: ImportError"), skip["reason"]
    assert not list((Path(skip["run_dir"]) / "ranks").rglob("*.log"))  # no rank was started
    assert ok["outcome"] == "pass"
    assert json.loads((Path(ok["run_dir"]) / "import_check.json").read_text())["versions"]["dsb-direct"] == "1.0.0"
    assert ok["environment"]["versions"]["dsb-direct"] == "1.0.0"


def test_a_one_rank_case_can_keep_the_launcher_and_the_separate_check(tmp_path, cli, house, cache_dir):
    """DSBISECT_DIRECT=0 and DSBISECT_CHECK_IMPORTS=0 in the case's env: the launcher chain and an
    import check in an interpreter of its own, as before (what benchmarks/ compares against)."""
    _matrix(tmp_path, ["1.0.0", "1.2.0"],
            extra='    env: {DSBISECT_DIRECT: "0", DSBISECT_CHECK_IMPORTS: "0", OMP_NUM_THREADS: "1"}\n')
    runs = _run(cli, tmp_path, house, cache_dir)
    ok, skip = runs["dsb-direct 1.0.0"], runs["dsb-direct 1.2.0"]
    assert ok["outcome"] == "pass", ok
    folder = Path(ok["run_dir"])
    assert "deepspeed.launcher.launch" in (folder / "launcher.log").read_text()
    assert len(ok["evidence"]["pids"]) >= 3  # runner, launch.py, the rank
    assert not (folder / "import_check.json").exists()
    assert ok["environment"]["versions"]["dsb-direct"] == "1.0.0"
    assert skip["outcome"] == "skip"
    assert skip["reason"].startswith("import check: import dsb_toy (dsb-direct) failed: ImportError"), skip["reason"]
    assert not Path(skip["run_dir"], "launcher.log").exists()  # skipped before any launch


BATON = """\
import os, sys
from torch.utils.file_baton import FileBaton
import dsb_toy

# what torch.utils.cpp_extension does around a just-in-time build (DeepSpeed's CPU shm op)
folder = os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], "dsb_op")
os.makedirs(folder, exist_ok=True)
baton = FileBaton(os.path.join(folder, "lock"))
if baton.try_acquire():
    print("built", flush=True)
    baton.release()
else:
    baton.wait()  # another process builds it: wait for its lock to go
    print("waited", flush=True)
"""


def test_a_build_lock_left_by_a_killed_run_is_no_hang(tmp_path, cli, house, cache_dir):
    """A run stopped while torch compiled an op leaves ``lock`` in the venv's extensions folder;
    torch's next build there waits for it forever.  dsbisect removes it before the next run
    (nobody runs from the venv), so that run passes instead of timing out as a HANG."""
    (tmp_path / "one.py").write_text(BATON)
    (tmp_path / "matrix.yaml").write_text("""\
defaults: {accelerator: cpu, nproc: 1, timeout: 600, idle_timeout: 20, env: {OMP_NUM_THREADS: "1"}}
cases:
  baton: {script: one.py, axes: {dsb-direct: ["1.0.0"]}}
""")
    first = _run(cli, tmp_path, house, cache_dir)["dsb-direct 1.0.0"]
    assert first["outcome"] == "pass", first
    op = next(cache_dir.rglob("torch_extensions/dsb_op"), None)
    assert op is not None, "the run's TORCH_EXTENSIONS_DIR is not the venv's"
    (op / "lock").write_text("")  # as a killed build leaves it
    again = _run(cli, tmp_path, house, cache_dir, "--rerun")["dsb-direct 1.0.0"]
    assert again["outcome"] == "pass", again
    assert "built" in (Path(again["run_dir"]) / "ranks" / "rank0.log").read_text()
    assert "left by a just-in-time build that was stopped" in (Path(again["run_dir"]) / "launcher.log").read_text()
    assert not (op / "lock").exists()

    # while a process runs from the venv (its build may be under way), its lock is left alone
    import subprocess

    from dsbisect.envs.venvs import clear_stale_build_locks

    venv = op.parent.parent
    (op / "lock").write_text("")
    busy = subprocess.Popen([str(venv / "bin" / "python"), "-c", "import time; time.sleep(30)"])
    try:
        assert clear_stale_build_locks(venv) == []
        assert (op / "lock").exists()
    finally:
        busy.kill()
        busy.wait()
    assert clear_stale_build_locks(venv) == [op / "lock"]


SHM_SCRIPT = """\
import os
import dsb_toy

# what DeepSpeed's CPU communication op leaves (csrc/cpu/comm/shm.cpp: shm_open, never shm_unlink)
name = "deepspeed_allreduce_buffer_{}_{}_{}".format(os.getuid(), os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"])
with open(f"/dev/shm/{name}_{os.environ['RANK']}", "wb") as f:
    f.write(b"x" * 4096)
with open(f"/dev/shm/{name}9_0", "wb") as f:  # another run's (port with one more digit): kept
    f.write(b"y")
print("left", name, flush=True)
"""


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")
def test_the_shared_memory_deepspeeds_cpu_op_leaves_is_removed(tmp_path, cli, house, cache_dir):
    (tmp_path / "one.py").write_text(SHM_SCRIPT)
    (tmp_path / "matrix.yaml").write_text("""\
defaults: {accelerator: cpu, nproc: 1, timeout: 60, env: {OMP_NUM_THREADS: "1"}}
cases:
  shm: {script: one.py, axes: {dsb-direct: ["1.0.0"]}}
""")
    run = _run(cli, tmp_path, house, cache_dir)["dsb-direct 1.0.0"]
    assert run["outcome"] == "pass", run
    name = (Path(run["run_dir"]) / "ranks" / "rank0.log").read_text().split("left ", 1)[1].split()[0]
    other = Path(f"/dev/shm/{name}9_0")
    try:
        assert not Path(f"/dev/shm/{name}_0").exists()
        assert run["evidence"]["shm_removed"] == [f"{name}_0"]
        assert other.exists()
    finally:
        other.unlink(missing_ok=True)
