"""Issue 36: the death of dsbisect's own guard is not the job's failure.

A real 2-rank toy run whose guard (the subreaper between dsbisect and the launcher) is killed
with SIGKILL while the ranks wait for a file: before, the run was stored as ``FAIL exit -9``
(then reused) and rank processes lived on under init; now it is ``interrupted`` (run again next
time), dsbisect says why, and no process of the run is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

import toypkg
from conftest import offline, wait_until, write_matrix

pytestmark = pytest.mark.slow

WAITGO = '''
def step(dist):
    import os, time, torch
    print("rank waiting for go", flush=True)
    while not os.path.exists(os.environ["DSB_GO"]): time.sleep(0.1)
    t = torch.ones(4)
    dist.all_reduce(t)
'''


@pytest.fixture(scope="module")
def house(tmp_path_factory):
    toypkg.STEP["waitgo"] = WAITGO
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("guard-wheels"), {"1.0.0": "waitgo"}, dist="dsb-guard")


def _tagged(run_dir: Path) -> list[int]:
    out = []
    for p in psutil.process_iter():
        try:
            tag = p.environ().get("DSBISECT_RUN_DIR")
            if tag and Path(tag).resolve() == run_dir.resolve() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def _waiting(folder: Path) -> bool:
    logs = [p.read_text(errors="replace") for p in folder.rglob("rank*.log")]
    return sum("rank waiting for go" in t for t in logs) >= 2


def test_a_killed_guard_leaves_an_interrupted_run_and_no_process(tmp_path, cache_dir, house):
    go = tmp_path / "go"
    matrix = write_matrix(tmp_path, ["1.0.0"], package="dsb-guard", collective_timeout=120, timeout=400)
    matrix.write_text(matrix.read_text().replace('env: {OMP_NUM_THREADS: "1"}',
                                                 f'env: {{OMP_NUM_THREADS: "1", DSB_GO: "{go}"}}'))
    cmd = [sys.executable, "-m", "dsbisect", "run", "matrix.yaml", *offline(house, cache_dir), "--format", "json"]
    dsb = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _waiting(tmp_path), 300, "both ranks waiting")
        guards = [p for p in psutil.Process(dsb.pid).children() if "dsbisect_guard.py" in " ".join(p.cmdline())]
        assert len(guards) == 1, guards
        guards[0].kill()
        out, err = dsb.communicate(timeout=120)
    finally:
        if dsb.poll() is None:
            dsb.kill()
            dsb.wait()
    assert dsb.returncode == 137 and "guard" in err and "interrupted" in err, (dsb.returncode, err[-2000:])
    (path,) = tmp_path.rglob("run.json")
    record = json.loads(path.read_text())
    assert record["status"] == "interrupted" and record["outcome"] is None, record
    assert _tagged(path.parent) == [], "a process of the run outlived dsbisect"

    go.write_text("")  # the next run goes through: run again, not the interrupted one reused
    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    (run,) = json.loads(again.stdout)["runs"]
    assert run["outcome"] == "pass" and run["id"] != record["id"], run
