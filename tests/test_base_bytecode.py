"""A base whose torch was installed without bytecode (README command 1's ``pip install
--no-compile``) gets the bytecode of what a rank imports cached once, even where
PYTHONDONTWRITEBYTECODE is set; nothing else of the base is compiled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsbisect import base as base_env

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


@pytest.mark.slow
def test_a_new_venv_caches_what_its_package_imports_from_such_a_base(tmp_path, monkeypatch):
    """Through EnvManager and uv: the base's torch without bytecode, a point whose package imports
    a torch module no rank import names (as DeepSpeed imports hundreds): built once, cached."""
    import toypkg
    from dsbisect.envs import EnvManager
    from dsbisect.model import EnvOptions, IndexOptions, Point

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
    assert not _pyc(site, "torch.unused").exists()
    point = Point(versions=(("dsb-bc", "1.0.0"),))
    env = envs.ensure(point)
    # what the point's package imports from the base: cached at its build
    assert _pyc(site, "torch").exists() and _pyc(site, "torch.unused").exists(), said
    assert any("caching the bytecode dsb-bc, torch import from the base" in s for s in said)
    assert env.version_of("dsb-bc") == "1.0.0" and not env.reused
    # the base reinstalled without bytecode, the venv reused: the rank imports are cached again
    for module in ("torch", "torch.unused"):
        _pyc(site, module).unlink()
    again = envs.ensure(point)
    assert again.reused and _pyc(site, "torch").exists() and not _pyc(site, "torch.unused").exists()
    assert said[-1] == "caching the bytecode of the base's torch for its ranks (installed without it; once)"
    # a base that had its bytecode (pip compiled it) gets no such import at a venv's build
    plain = EnvManager(tmp_path / "cache2", EnvOptions(), IndexOptions(find_links=(str(house),), offline=True))
    plain.log = said.append
    n = len(said)
    plain.ensure(Point(versions=(("dsb-bc", "1.0.0"),)))
    assert not any("caching the bytecode" in s for s in said[n:])
