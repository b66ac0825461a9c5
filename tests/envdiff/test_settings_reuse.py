"""A second bisection of settings answers from the store, as the first ran: what every DeepSpeed
CPU run does besides its training -- its launcher lists /proc (psutil, to stop the ranks when one
fails) and torch's cpp_extension starts ``ninja`` by name before a just-in-time op -- must not make
its record differ from the run now (issue #41: a real case, DeepSpeed #2971 on CPU, re-ran every
trial of a bisection that had just answered: "recorded run 6 is for other inputs: ninja changed,
proc/ has other files").

The job is a small script that does both, run for real, one rank, no launcher.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from dsbisect.envs import toolchain

JOB = """\
import json, os, shutil, subprocess, sys
cfg = json.load(open(sys.argv[sys.argv.index("--config") + 1]))
os.listdir("/proc")  # as psutil does under DeepSpeed's launcher
if shutil.which("ninja"):  # as torch's cpp_extension does before it loads an op
    subprocess.run(["ninja", "--version"], check=True, stdout=subprocess.DEVNULL)
if cfg["zero_optimization"].get("offload_optimizer", {}).get("device") == "cpu":
    sys.exit("ZeRO-Offload with a client optimizer: refused")
print("fine", flush=True)
"""


def _job(tmp_path: Path) -> list[str]:
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "ok.json").write_text(json.dumps({"zero_optimization": {"stage": 2, "overlap_comm": False}}))
    bad = {"zero_optimization": {"stage": 2, "overlap_comm": True, "offload_optimizer": {"device": "cpu"}}}
    (tmp_path / "broken.json").write_text(json.dumps(bad))
    return ["--good-config", "ok.json", "--bad-config", "broken.json", "--", "python", "job.py", "--config",
            "broken.json"]


def _bisect(cli, tmp_path: Path, cache_dir: Path, words: list[str]) -> tuple[dict, str]:
    res = cli("bisect", "--store", str(tmp_path / "store"), "--cache-dir", str(cache_dir), "--format", "json",
              "--regress-on", "fail", *words, cwd=tmp_path)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout), res.stderr


def _runs(out: dict) -> set[int]:
    return {i for s in out["steps"] for i in s["run_ids"]}


def _fake_ninja(folder: Path) -> Path:
    folder.mkdir()
    (folder / "ninja").write_text("#!/bin/sh\necho 1.0.0-fake\n")
    (folder / "ninja").chmod(0o755)
    return folder


@pytest.mark.slow
def test_a_job_that_lists_proc_is_answered_from_the_store(tmp_path, cli, cache_dir):
    words = _job(tmp_path)
    out, _ = _bisect(cli, tmp_path, cache_dir, words)
    assert out["env_diff"]["culprits"] == ["zero_optimization.offload_optimizer.device"], out["message"]
    again, said = _bisect(cli, tmp_path, cache_dir, words)
    assert again["env_diff"]["culprits"] == out["env_diff"]["culprits"]
    assert _runs(again) == _runs(out) and "running it again" not in said, said


@pytest.mark.slow
def test_the_ninja_a_run_got_is_the_one_it_is_compared_with(tmp_path, cli, cache_dir, monkeypatch):
    """The first bisection from a plain shell, the second with another ninja first on the caller's
    PATH (a venv activated): the runs got dsbisect's ninja both times, so the second reuses them."""
    if toolchain.own_ninja() is None:
        pytest.skip("dsbisect's environment has no ninja: the ranks get the caller's")
    words = _job(tmp_path)
    system = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    monkeypatch.setenv("PATH", system)
    out, _ = _bisect(cli, tmp_path, cache_dir, words)
    monkeypatch.setenv("PATH", f"{_fake_ninja(tmp_path / 'other')}{os.pathsep}{system}")
    again, said = _bisect(cli, tmp_path, cache_dir, words)
    assert _runs(again) == _runs(out) and "ninja changed" not in said, said
