"""Real GPUs: the toy hang under NCCL, with the watchdog, flight recorder and stacks.

Marked ``gpu``: skipped unless CUDA and at least 2 GPUs are present (runs on the device
machine, never in CI).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import toypkg
from conftest import live_pids, offline, write_matrix

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _gpu_pids() -> set[int]:
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                         capture_output=True, text=True)
    return {int(x) for x in out.stdout.split() if x.strip().isdigit()}


def test_nccl_hang_is_caught_with_evidence_and_gpus_are_released(tmp_path, tmp_path_factory, cli, cache_dir):
    house = toypkg.build_wheelhouse(tmp_path_factory.mktemp("gpu-wheels"), {"5.0.0": "ok", "5.1.0": "skip"},
                                    dist="dsb-gpu-toy")
    write_matrix(tmp_path, ["5.0.0", "5.1.0"], package="dsb-gpu-toy", collective_timeout=20, timeout=300,
                 launcher="deepspeed")
    matrix = tmp_path / "matrix.yaml"
    text = matrix.read_text().replace("accelerator: cpu", "accelerator: cuda")
    # The launcher comes from the base, or from a wheelhouse where the base has no deepspeed
    # (the device machine): DSBISECT_TEST_DEEPSPEED=0.12.4 DSBISECT_TEST_FIND_LINKS=DIR.
    links = [x for x in os.environ.get("DSBISECT_TEST_FIND_LINKS", "").split(":") if x]
    if os.environ.get("DSBISECT_TEST_DEEPSPEED"):
        pins = f'pins: ["deepspeed=={os.environ["DSBISECT_TEST_DEEPSPEED"]}", "pydantic<2"]\n  compat: [torch-elastic-socket, numpy-bufsize]\n  '
        text = text.replace("accelerator: cuda", pins + "accelerator: cuda")
    elif importlib.util.find_spec("deepspeed") is None:
        pytest.skip("no deepspeed in the base and no DSBISECT_TEST_DEEPSPEED wheelhouse given")
    matrix.write_text(text)
    extra = [a for d in links for a in ("--find-links", d)]
    res = cli("run", "matrix.yaml", *offline(house), *extra, "--cache-dir", str(cache_dir),
              "-q", "--format", "json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    runs = {r["point"]: r for r in report["runs"]}
    assert runs["dsb-gpu-toy 5.0.0"]["outcome"] == "pass"
    hang = runs["dsb-gpu-toy 5.1.0"]
    keep = os.environ.get("DSBISECT_KEEP_RUNS")  # the device proof collects the evidence, pass or fail
    if keep:
        shutil.copytree(hang["run_dir"], Path(keep) / "gpu-toy-hang", dirs_exist_ok=True)
    assert hang["outcome"] == "hang"
    assert hang["environment"]["gpus"] and hang["environment"].get("nccl")
    # From the moment rank 0 entered the collective rank 1 skips to the stored verdict, stacks
    # taken and the group stopped (printed for the device proof's log; not asserted).
    latency = hang["started"] + hang["seconds"] - toypkg.deadlock_time(Path(hang["run_dir"]))
    print(f"deadlock -> stored verdict: {latency:.1f} s")
    assert latency > 0, latency
    assert "ALLREDUCE" in hang["signature"].upper() or "all_reduce" in hang["signature"]
    dumps = [f for f in hang["evidence"]["files"] if "nccl_trace_rank_" in f]
    assert dumps, hang["evidence"]
    pids = set(hang["evidence"]["pids"])
    assert not live_pids(pids)
    assert not (pids & _gpu_pids())  # no GPU is held by a process of the run
