"""Issue 36: a launcher that cannot start the ranks is not the job's failure.

Real runs of the 2-rank toy in point venvs layered on a base of their own: one with torch and no
DeepSpeed (a Transformers or Accelerate user's environment), one with neither.  Before: the
script case ran under the deepspeed launcher the venv lacks and both were ``FAIL exit 1``
(``No module named 'deepspeed'``), the user's script never ran; now the script runs under
torchrun (it comes with torch), and where the launcher cannot start at all the run is a SKIP
that says why and what to do.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import toypkg
from conftest import offline

pytestmark = pytest.mark.slow


def _closure(name: str) -> set[str]:
    """``name`` and the distributions it requires, transitively (no extras)."""
    out, todo = set(), [name]
    while todo:
        n = re.sub(r"[-_.]+", "_", todo.pop()).lower()
        if n in out:
            continue
        out.add(n)
        try:
            reqs = md.requires(n) or []
        except md.PackageNotFoundError:
            continue
        todo += [re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0] for r in reqs if "extra ==" not in r]
    return out


def _base(tmp_path: Path, with_torch: bool = True) -> Path:
    """A base venv of its own: torch and what it needs (linked from dsbisect's venv), no DeepSpeed."""
    from dsbisect.envs.uv import uv_bin

    folder = tmp_path / "base"
    subprocess.run([uv_bin(), "venv", str(folder), "--python", sys.executable, "--offline", "-q"], check=True)
    if with_torch:
        import torch

        site, only = Path(torch.__file__).parents[1], tmp_path / "torch-only"
        only.mkdir()
        wanted = _closure("torch")
        for module, dists in md.packages_distributions().items():
            if any(re.sub(r"[-_.]+", "_", d).lower() in wanted for d in dists):
                for name in (module, f"{module}.py"):
                    if (site / name).exists() and not (only / name).exists():
                        (only / name).symlink_to(site / name)
        for info in site.glob("*.dist-info"):  # their metadata too: the import check reads it
            if re.sub(r"[-_.]+", "_", info.name.split("-")[0]).lower() in wanted:
                (only / info.name).symlink_to(info)
        (next(folder.glob("lib/python3*/site-packages")) / "torch_only.pth").write_text(f"{only}\n")
    return folder / "bin" / "python"


def _run(tmp_path: Path, house: Path, cache_dir: Path, python: Path, *line: str, opts: tuple = ()) -> tuple[dict, str]:
    toypkg.write_repro(tmp_path)
    cmd = [sys.executable, "-m", "dsbisect", "run", "--versions", "dsb-lm=1.0.0", "--python", str(python),
           "--base", "layered", "--accelerator", "cpu", *offline(house, cache_dir), "--format", "json", *opts, "--", *line]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = json.loads(out.stdout)["runs"]
    return run, out.stderr


@pytest.fixture(scope="module")
def house(tmp_path_factory):
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("lm-wheels"), {"1.0.0": "ok"}, dist="dsb-lm")


def test_a_script_runs_under_a_launcher_the_venv_has(tmp_path, house, cache_dir):
    """torch, no DeepSpeed: 2 ranks of the script run under torchrun and pass (before: FAIL exit 1);
    one process as given needs no launcher, so none is said to be swapped."""
    base = _base(tmp_path, with_torch=True)
    run, err = _run(tmp_path, house, cache_dir, base, "python", "toy_repro.py", opts=("--nproc", "2"))
    assert run["outcome"] == "pass", (run, err[-2000:])
    assert "the deepspeed launcher is not installed in the point venv" in err, err[-2000:]
    run, err = _run(tmp_path / "one", house, cache_dir, base, "python", "toy_repro.py")
    assert run["outcome"] == "pass", (run, err[-2000:])
    assert "not installed in the point venv" not in err and "no launcher" in err, err[-2000:]


def test_a_launcher_that_starts_no_rank_makes_the_run_untestable(tmp_path, house, cache_dir):
    """torch, no DeepSpeed, and the user's own line names DeepSpeed's launcher (kept as given):
    it cannot start (no module deepspeed), no rank ran: a SKIP naming the launcher, its error and
    the fix (before: FAIL exit 1, "1.4.0 (the good end) also failed")."""
    run, err = _run(tmp_path, house, cache_dir, _base(tmp_path, with_torch=True),
                    "python", "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "toy_repro.py")
    assert run["outcome"] == "skip", (run, err[-2000:])
    assert "no rank of the job started" in run["reason"] and "No module named 'deepspeed'" in run["reason"], run
    assert "launcher installed in the point venv" in run["reason"], run
