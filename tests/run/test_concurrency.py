"""Several points at once: own ports and run folders, own outcomes, a hang kills only itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import toypkg
from conftest import make_case, offline, write_matrix

@pytest.mark.slow
def test_two_points_at_once(tmp_path, tmp_path_factory, cli, cache_dir):
    house = toypkg.build_wheelhouse(tmp_path_factory.mktemp("conc-wheels"), {"1.0.0": "ok", "1.1.0": "skip"},
                                    dist="dsb-conc")
    write_matrix(tmp_path, ["1.0.0", "1.1.0"], package="dsb-conc", collective_timeout=8, launcher="deepspeed")
    res = cli("run", "matrix.yaml", "--jobs", "2", *offline(house, cache_dir), "--format", "json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    runs = {r["point"]: r for r in json.loads(res.stdout)["runs"]}
    ok, hung = runs["dsb-conc 1.0.0"], runs["dsb-conc 1.1.0"]
    assert (ok["outcome"], hung["outcome"]) == ("pass", "hang")
    # They really overlapped in time...
    assert max(ok["started"], hung["started"]) < min(ok["started"] + ok["seconds"], hung["started"] + hung["seconds"])
    # ...in their own folders, with their own master ports.
    assert ok["run_dir"] != hung["run_dir"]
    ports = [re.search(r"--master_port[= ](\d+)", (Path(r["run_dir"]) / "launcher.log").read_text())[1] for r in (ok, hung)]
    assert ports[0] != ports[1]
    assert "2 points at once" in res.stderr


def test_gpu_slices_are_disjoint(tmp_path):
    """The GPU count is an edge we cannot run here: the machine's GPUs are given, the rest is real."""
    from dsbisect.envs.venvs import EnvManager
    from dsbisect.core.model import Accelerator
    from dsbisect.core.rundir import RunDir
    from dsbisect.launch.launchers import Target, plan
    from dsbisect.run.runner import Runner, Slot
    from dsbisect.store.store import Store

    case = make_case(tmp_path, nproc=2, accelerator=Accelerator.CUDA)
    runner = Runner(store=Store(tmp_path / "st"), envs=EnvManager(tmp_path / "cache"), gpus=["H200"] * 8,
                    gpu_ids=list(range(8)))
    assert runner.slots(case) == [Slot((0, 1)), Slot((2, 3)), Slot((4, 5)), Slot((6, 7))]
    runner.jobs = 3
    assert runner.slots(case) == [Slot((0, 1)), Slot((2, 3)), Slot((4, 5))]
    runner.jobs, runner.gpus, runner.gpu_ids = None, ["H200"] * 3, [4, 6, 7]  # CUDA_VISIBLE_DEVICES=4,6,7
    assert runner.slots(case) == [Slot()]  # one slice of two: the launcher's own --num_gpus
    runner.gpus, runner.gpu_ids = ["H200"] * 4, [4, 5, 6, 7]
    assert runner.slots(case) == [Slot((4, 5)), Slot((6, 7))]
    argv = list(plan(case, Target(tmp_path / "python", RunDir(tmp_path / "run"), 29500, (6, 7))).argv)
    assert "--include" in argv and argv[argv.index("--include") + 1] == "localhost:6,7"
    assert "--num_gpus" not in argv
