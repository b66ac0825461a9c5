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
    from dsbisect.run.executor import Slot
    from dsbisect.run.runner import Runner
    from dsbisect.store.store import Store

    case = make_case(tmp_path, nproc=2, accelerator=Accelerator.CUDA)
    store, envs = Store(tmp_path / "st"), EnvManager(tmp_path / "cache")

    def slots(gpus: int, ids: list[int], jobs: int | None = None) -> list[Slot]:
        return Runner(store=store, envs=envs, gpus=["H200"] * gpus, gpu_ids=ids, jobs=jobs).slots(case)

    assert slots(8, list(range(8))) == [Slot((0, 1)), Slot((2, 3)), Slot((4, 5)), Slot((6, 7))]
    assert slots(8, list(range(8)), jobs=3) == [Slot((0, 1)), Slot((2, 3)), Slot((4, 5))]
    assert slots(3, [4, 6, 7]) == [Slot()]  # CUDA_VISIBLE_DEVICES=4,6,7: one slice of two, the launcher's own --num_gpus
    assert slots(4, [4, 5, 6, 7]) == [Slot((4, 5)), Slot((6, 7))]
    argv = list(plan(case, Target(tmp_path / "python", RunDir(tmp_path / "run"), 29500, (6, 7))).argv)
    assert "--include" in argv and argv[argv.index("--include") + 1] == "localhost:6,7"
    assert "--num_gpus" not in argv
