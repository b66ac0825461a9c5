"""Issue 36: an out-of-memory kill of a rank's child (a DataLoader worker) is an OOM, not a FAIL.

How dsbisect tells an OOM kill: an ``oom_kill`` counter that rose during the run (the run's
cgroup's ``memory.events``/``memory.oom_control`` where readable, else ``/proc/vmstat``; the
kernel log is not readable unprivileged), beside the run's own failure: a rank killed by SIGKILL,
a peer's reaction to it, or now a rank that died of its child killed by SIGKILL.  A real OOM kill
cannot be made here without privileges (a cgroup of one's own) or harming the shared machine, so
the run below is real (a real DataLoader worker killed by SIGKILL, the rank dies of it) and the
counter's rise is given to the rule as the one thing this machine cannot produce.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import toypkg
from conftest import offline, write_matrix
from dsbisect.core.model import Outcome
from dsbisect.run import memory
from dsbisect.run.memory import OomKill
from dsbisect.verdict.outcome import Classified

pytestmark = pytest.mark.slow

WORKER_KILLED = '''
def step(dist):
    import os, signal, torch
    from torch.utils.data import DataLoader, Dataset

    class Data(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer ends a worker

    for _ in DataLoader(Data(), num_workers=1):
        pass
'''


@pytest.fixture(scope="module")
def house(tmp_path_factory):
    toypkg.STEP["workerkilled"] = WORKER_KILLED
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("oom-wheels"), {"1.0.0": "workerkilled"}, dist="dsb-oomc")


def test_a_rank_that_died_of_its_killed_worker_is_an_oom_when_a_counter_rose(tmp_path, house, cache_dir):
    write_matrix(tmp_path, ["1.0.0"], package="dsb-oomc", nproc=1, timeout=300)
    before = memory.oom_counts()
    out = subprocess.run([sys.executable, "-m", "dsbisect", "run", "matrix.yaml", *offline(house, cache_dir),
                          "--format", "json"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    if memory.rise(before, memory.oom_counts()) is not None:
        pytest.skip("the machine's OOM killer ended something during the run: the control is void")
    assert out.returncode == 0, out.stderr[-2000:]
    (run,) = json.loads(out.stdout)["runs"]
    # no counter rose: a worker killed by SIGKILL by anything else is the job's failure, as before
    assert run["outcome"] == "fail" and "killed by signal: Killed" in run["reason"], run
    failed = Classified(Outcome.FAIL, run["reason"])
    # the same death while the run's cgroup counted an OOM kill: untestable (the machine), not FAIL
    got, evidence = memory.oom_verdict(failed, run["exit_code"], False, "", OomKill("cgroup memory.events", 0, 1),
                                       0, False, None)
    assert got.outcome is Outcome.SKIP and "out-of-memory killer" in got.reason, got
    assert evidence["failed_as"] == run["reason"]
