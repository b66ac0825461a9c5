"""A run the machine broke: a failed CUDA initialisation, noted by the start-up hook inside the
process (a real interpreter with the hook and this machine's torch), read from the run folder,
and the rule that makes such a run meant for GPUs a skip of the machine's (pure)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from dsbisect.core.model import Outcome
from dsbisect.core.rundir import RunDir
from dsbisect.run.launched import cuda_failures
from dsbisect.verdict.machine import CudaFailure, machine_verdict
from dsbisect.verdict.outcome import Classified

HOOK = Path(str(resources.files("dsbisect").joinpath("_hook")))


def _with_hook(code: str, run_dir: Path, **env: str) -> subprocess.CompletedProcess:
    """``code`` in an interpreter that loads the hook first, as a point venv's .pth does."""
    variables = {k: v for k, v in os.environ.items() if not k.startswith("DSBISECT_")} | {
        "PYTHONPATH": str(HOOK), "DSBISECT_RUN_DIR": str(run_dir), "DSBISECT_TRACK_IMPORTS": "0",
        "DSBISECT_FR_PROBE": "0"} | env
    return subprocess.run([sys.executable, "-c", "import dsbisect_hook\n" + code], env=variables,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(__import__("shutil").which("nvidia-smi") is not None, reason="a torch that cannot init CUDA")
@pytest.mark.parametrize("code", ["torch.cuda.init()", "torch.zeros(1, device='cuda')", "torch.cuda.current_device()"])
def test_the_hook_notes_a_failed_cuda_init_and_lets_it_raise(tmp_path, code):
    done = _with_hook(f"import torch\ntry:\n    {code}\nexcept Exception as e:\n    print('raised', type(e).__name__)\n"
                      "    raise SystemExit(3)\n", tmp_path, RANK="1", CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 3 and "raised" in done.stdout, done.stderr  # the error travels on, unchanged
    (note,) = RunDir(tmp_path).machine.glob("cuda.pid*.json")
    d = json.loads(note.read_text())
    assert d["rank"] == "1" and d["devices"] == "" and d["error"].startswith(done.stdout.split()[1])
    assert cuda_failures(RunDir(tmp_path)) == (CudaFailure("1", d["error"], ""),)


def test_a_process_that_never_touches_cuda_leaves_no_note(tmp_path):
    done = _with_hook("import torch\nprint(torch.ones(2).sum().item())", tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "2.0", done.stderr
    assert not RunDir(tmp_path).machine.exists() and cuda_failures(RunDir(tmp_path)) == ()


def test_notes_are_read_by_rank_and_odd_ones_passed_over(tmp_path):
    folder = RunDir(tmp_path).machine
    folder.mkdir()
    (folder / "cuda.pid9.json").write_text(json.dumps({"error": "RuntimeError: No CUDA GPUs are available",
                                                        "rank": "1", "devices": "7"}))
    (folder / "cuda.pid3.json").write_text(json.dumps({"error": "RuntimeError: CUDA driver initialization failed",
                                                        "rank": "0", "devices": None}))
    (folder / "cuda.pid4.json").write_text("{not json")
    (folder / "cuda.pid5.json").write_text(json.dumps({"error": 5}))
    assert cuda_failures(RunDir(tmp_path)) == (
        CudaFailure("0", "RuntimeError: CUDA driver initialization failed"),
        CudaFailure("1", "RuntimeError: No CUDA GPUs are available", "7"))


FAILED = (CudaFailure("1", "RuntimeError: No CUDA GPUs are available", "7"),)


@pytest.mark.parametrize("outcome, cuda, failures, skipped", [
    (Outcome.FAIL, True, FAILED, True),
    (Outcome.HANG, True, FAILED, True),  # its peers waited for it at the rendezvous
    (Outcome.FAIL, False, FAILED, False),  # on CPU, touching CUDA is the code's doing
    (Outcome.FAIL, True, (), False),  # a failure of the code on a machine whose CUDA works
    (Outcome.PASS, True, FAILED, False),  # a script that caught it and went on
    (Outcome.SKIP, True, FAILED, False),
])
def test_the_rule(outcome, cuda, failures, skipped):
    c = Classified(outcome, "RuntimeError: boom")
    got, was = machine_verdict(c, cuda, failures)
    assert was is skipped
    if skipped:
        assert got == Classified(Outcome.SKIP, "the machine's: CUDA could not be initialised (rank 1: RuntimeError: "
                                               "No CUDA GPUs are available, CUDA_VISIBLE_DEVICES=7)")
    else:
        assert got is c
