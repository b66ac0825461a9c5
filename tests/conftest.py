"""Shared fixtures: a wheelhouse of toy releases, an env cache, a CLI runner, GPU markers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
import toypkg  # noqa: E402

# The releases of dsb-toy that most tests use: 1.3.0 introduces the hang.
TOY_RELEASES = {
    "1.0.0": "ok",
    "1.1.0": "ok",
    "1.2.0": "ok",
    "1.3.0": "skip",
    "1.4.0": "skip",
    "1.5.0": "skip",
    "1.6.0": "skip",
    "1.7.0": "skip",
}


def _cuda_gpus() -> int:
    if not shutil.which("nvidia-smi"):
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return len([ln for ln in out.stdout.splitlines() if ln.startswith("GPU ")]) if out.returncode == 0 else 0


def pytest_collection_modifyitems(config, items):
    gpus = _cuda_gpus()
    skip_gpu = pytest.mark.skip(reason=f"needs CUDA and at least 2 GPUs (found {gpus})")
    for item in items:
        if "gpu" in item.keywords and gpus < 2:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One env cache (venvs, wheels, uv cache) for the whole session, as a user would have."""
    path = tmp_path_factory.mktemp("cache")
    os.environ["UV_CACHE_DIR"] = str(path / "uv")
    return path


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory) -> Path:
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("wheelhouse"), TOY_RELEASES)


@pytest.fixture
def repro(tmp_path) -> Path:
    return toypkg.write_repro(tmp_path)


@pytest.fixture
def cli():
    """Invoke the Typer app in-process with a wide, colourless terminal."""
    from dsbisect.cli import app

    runner = CliRunner()

    def invoke(*args: str, cwd: Path | None = None):
        old = Path.cwd()
        if cwd:
            os.chdir(cwd)
        try:
            return runner.invoke(app, list(args), env={"COLUMNS": "220", "NO_COLOR": "1", "TERM": "dumb"},
                                 catch_exceptions=False)
        finally:
            os.chdir(old)

    return invoke


def write_matrix(folder: Path, versions: list[str], *, name: str = "toy", extra: str = "",
                 package: str = "dsb-toy", collective_timeout: float = 6, timeout: float = 90) -> Path:
    """A matrix with one toy case over ``versions`` of the toy package, on 2 CPU ranks."""
    toypkg.write_repro(folder)
    text = f"""\
defaults:
  collective_timeout: {collective_timeout}
  timeout: {timeout}
  accelerator: cpu
  nproc: 2
  env: {{OMP_NUM_THREADS: "1"}}
cases:
  {name}:
    script: toy_repro.py
    axes:
      {package}: [{", ".join(f'"{v}"' for v in versions)}]
{extra}"""
    path = folder / "matrix.yaml"
    path.write_text(text)
    return path
