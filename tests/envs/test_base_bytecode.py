"""A base whose torch was installed without bytecode (README command 1's ``pip install
--no-compile``) gets the bytecode of what a rank imports cached once, even where
PYTHONDONTWRITEBYTECODE is set; nothing else of the base is compiled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsbisect.envs import base as base_env

TAG = f"cpython-{sys.version_info[0]}{sys.version_info[1]}"


def _base_with_a_torch(tmp_path: Path, dynamo: str = "") -> Path:
    """A real venv of this interpreter whose site-packages holds a package named torch (with
    torch.distributed.run and torch._dynamo) and one that no rank imports; no bytecode."""
    venv = tmp_path / "base"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    for rel, text in {"torch/__init__.py": "X = 1\n", "torch/distributed/__init__.py": "",
                      "torch/distributed/run.py": "import torch\n", "torch/_dynamo/__init__.py": dynamo,
                      "torch/unused.py": "Y = 2\n", "other/__init__.py": ""}.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    return venv


def _pyc(site: Path, module: str) -> Path:
    path = site / Path(*module.split("."))
    src = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    return src.parent / "__pycache__" / f"{src.stem}.{TAG}.pyc"


def test_what_a_rank_imports_is_compiled_once_under_dontwritebytecode(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # as on the project's and CI's machines
    venv = _base_with_a_torch(tmp_path)
    base = base_env.inspect_base(str(venv / "bin" / "python"))
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert base_env.missing_bytecode(base)
    said: list[str] = []
    assert base_env.cache_bytecode(base, said.append) is True
    assert said == ["caching the bytecode of the base's torch for its ranks (installed without it; once)"]
    for module in ("torch", "torch.distributed", "torch.distributed.run", "torch._dynamo"):
        assert _pyc(site, module).exists(), module
    assert not _pyc(site, "torch.unused").exists() and not _pyc(site, "other").exists()  # not all of it
    assert not base_env.missing_bytecode(base)
    assert base_env.cache_bytecode(base, said.append) is False and len(said) == 1  # the second time: nothing
    assert os.environ["PYTHONDONTWRITEBYTECODE"] == "1"  # dsbisect's own environment is as it was


def test_a_module_that_fails_to_import_leaves_the_rest_cached(tmp_path):
    venv = _base_with_a_torch(tmp_path, dynamo="raise ImportError('no dynamo in this torch')\n")
    base = base_env.inspect_base(str(venv / "bin" / "python"))
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert base_env.cache_bytecode(base) is True
    assert _pyc(site, "torch").exists() and _pyc(site, "torch.distributed.run").exists()


def test_a_base_without_torch_or_with_its_bytecode_runs_nothing(tmp_path):
    venv = tmp_path / "plain"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    said: list[str] = []
    assert base_env.cache_bytecode(base_env.inspect_base(str(venv / "bin" / "python")), said.append) is False
    assert said == []
    # this project's own venv: pip compiled its torch, or an earlier run cached it
    here = base_env.inspect_base(sys.executable)
    if here.version_of("torch"):
        base_env.cache_bytecode(here)
        assert not base_env.missing_bytecode(here)


def _check_in_run(env, run_dir: Path, **extra: str) -> dict:
    """The import check the first interpreter of a run makes (the start-up hook), as the runner
    asks for it, under PYTHONDONTWRITEBYTECODE: the import_check.json it wrote."""
    import json

    run_dir.mkdir()
    variables = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "DSBISECT_RUN_DIR": str(run_dir),
                 "DSBISECT_CHECK_IMPORTS": "dsb-bc,torch", "DSBISECT_TRACK_IMPORTS": "0", **extra}
    probe = "import os, sys; print(sys.dont_write_bytecode, os.environ.get('DSBISECT_CHECK_BYTECODE'))"
    done = subprocess.run([str(env.python), "-c", probe], env=variables, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "None"]  # the user's code: their setting, no variable left
    return json.loads((run_dir / "import_check.json").read_text())


@pytest.mark.slow
def test_a_new_venvs_first_run_caches_what_its_package_imports_from_such_a_base(tmp_path, monkeypatch):
    """Through EnvManager and uv: the base's torch without bytecode, a point whose package imports
    a torch module no rank import names (as DeepSpeed imports hundreds). The venv's build imports
    nothing; the import check its run makes caches that module, where the runner asks for it."""
    import toypkg
    from dsbisect.envs.venvs import EnvManager
    from dsbisect.core.model import EnvOptions, IndexOptions, Point

    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    venv = _base_with_a_torch(tmp_path)
    site = next((venv / "lib").glob("python3*/site-packages"))
    info = site / "torch-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 9.9.9\n")
    (info / "RECORD").write_text("")
    monkeypatch.setitem(toypkg.STEP, "uses-torch-unused", "import torch.unused\n")
    house = tmp_path / "house"
    toypkg.build_wheel(house, "1.0.0", "uses-torch-unused", dist="dsb-bc")
    envs = EnvManager(tmp_path / "cache", EnvOptions(python=str(venv / "bin" / "python")),
                      IndexOptions(find_links=(str(house),), offline=True))
    said: list[str] = []
    envs.log = said.append
    assert envs.mode.value == "layered" and _pyc(site, "torch").exists()  # the rank imports: first
    point = Point(versions=(("dsb-bc", "1.0.0"),))
    env = envs.ensure(point)
    assert env.version_of("dsb-bc") == "1.0.0" and not env.reused
    assert not _pyc(site, "torch.unused").exists(), said  # the build imported nothing
    assert envs.caches_bytecode(env)
    # a run's check without the runner's word writes nothing, as PYTHONDONTWRITEBYTECODE says
    check = _check_in_run(env, tmp_path / "run1")
    assert not check["error"] and not _pyc(site, "torch.unused").exists()
    # with it (DSBISECT_CHECK_BYTECODE=1): what the check imported from the base is cached
    check = _check_in_run(env, tmp_path / "run2", DSBISECT_CHECK_BYTECODE="1")
    assert not check["error"] and _pyc(site, "torch.unused").exists()
    assert not _pyc(site, "other").exists()  # not all of the base
    # the base reinstalled without bytecode, the venv reused: the rank imports are cached again
    for module in ("torch", "torch.unused"):
        _pyc(site, module).unlink()
    again = envs.ensure(point)
    assert again.reused and _pyc(site, "torch").exists() and not _pyc(site, "torch.unused").exists()
    assert said[-1] == "caching the bytecode of the base's torch for its ranks (installed without it; once)"
    # a base that had its bytecode (pip compiled it): a run's check is not asked to write any
    plain = EnvManager(tmp_path / "cache2", EnvOptions(), IndexOptions(find_links=(str(house),), offline=True))
    plain.log = said.append
    n = len(said)
    other = plain.ensure(Point(versions=(("dsb-bc", "1.0.0"),)))
    assert not any("caching the bytecode" in s for s in said[n:])
    assert not plain.caches_bytecode(other) or base_env.missing_bytecode(plain.base)
