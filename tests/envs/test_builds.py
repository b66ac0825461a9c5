"""Wheels built from sdists and from commits of a clone, by a builder venv that sees the base's torch."""

from __future__ import annotations

import tarfile
import time
from pathlib import Path

import pytest

from conftest import git, pyproject
from dsbisect.envs.venvs import EnvManager
from dsbisect.core.errors import EnvBuildError
from dsbisect.core.model import EnvOptions, GitSource, IndexOptions

pytestmark = pytest.mark.slow

# A setup.py that, like DeepSpeed's, imports torch while building.
SETUP = "import torch  # noqa: F401\nfrom setuptools import setup\nsetup()\n"


def _source(folder: Path, version: str, code: str = "VALUE = 1\n") -> Path:
    (folder / "dsb_built").mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(pyproject("dsb-built", version, "dsb_built"))
    (folder / "setup.py").write_text(SETUP)
    (folder / "dsb_built" / "__init__.py").write_text(code)
    return folder


@pytest.fixture
def mgr(tmp_path):
    house = tmp_path / "house"
    house.mkdir()
    src = _source(tmp_path / "sdist-src" / "dsb_built-1.0.0", "1.0.0")
    with tarfile.open(house / "dsb_built-1.0.0.tar.gz", "w:gz") as tar:
        tar.add(src, arcname="dsb_built-1.0.0")
    # No build pins: the builder takes setuptools from the base, so no index is needed.
    return EnvManager(tmp_path / "cache", EnvOptions(build_pins=(), build_with_torch=("dsb-built",)),
                      IndexOptions(offline=True, find_links=(str(house),)))


def test_sdist_that_imports_torch_becomes_a_wheel_once(mgr):
    folder = mgr.release_wheel("dsb-built", "1.0.0")
    (wheel,) = folder.glob("dsb_built-1.0.0-*.whl")
    built = wheel.stat().st_mtime
    time.sleep(0.05)
    assert mgr.release_wheel("dsb-built", "1.0.0") == folder and wheel.stat().st_mtime == built  # cached


def test_a_release_wheel_is_shared_by_bases_with_the_same_torch_build(mgr, tmp_path):
    """A second clone's venv (another path, the same torch build) takes the wheel the first one
    built; another torch build gets a wheel of its own."""
    setuptools_from = tuple(mgr.base.site_dirs)  # the builder's setuptools, behind each torch

    def base_with_torch(name: str, version_py: str) -> tuple[str, ...]:
        site = tmp_path / name / "lib" / "site-packages"
        (site / "torch").mkdir(parents=True)
        (site / "torch" / "__init__.py").write_text("")
        (site / "torch" / "version.py").write_text(version_py)
        return (str(site), *setuptools_from)

    same = "__version__ = '2.13.0+cpu'\ngit_version = '0123abc'\ncuda = None\n"
    said: list[str] = []
    mgr.builds.log = said.append
    builds = lambda: [s for s in said if s.startswith("building a wheel")]  # noqa: E731
    first = mgr.builds.release("dsb-built", "1.0.0", base_with_torch("clone-a", same), (), ())
    (wheel,) = first.glob("dsb_built-1.0.0-*.whl")
    built = wheel.stat().st_mtime_ns
    again = mgr.builds.release("dsb-built", "1.0.0", base_with_torch("clone-b", same), (), ())
    assert again == first and wheel.stat().st_mtime_ns == built and len(builds()) == 1
    other = mgr.builds.release("dsb-built", "1.0.0", base_with_torch(
        "clone-c", "__version__ = '2.12.0+cpu'\ngit_version = '4567def'\ncuda = None\n"), (), ())
    assert other != first and len(list(other.glob("dsb_built-1.0.0-*.whl"))) == 1 and len(builds()) == 2
    # the same version and commit built for CUDA is another torch build too
    cuda = mgr.builds.release("dsb-built", "1.0.0", base_with_torch(
        "clone-d", same.replace("cuda = None", "cuda = '12.8'")), (), ())
    assert cuda not in (first, other) and len(builds()) == 3


def test_commit_wheels_are_keyed_by_hash_and_prebuilt_ones_win(mgr, tmp_path):
    repo = tmp_path / "repo"
    git(_source(repo, "2.0.0"), "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    first = git(repo, "rev-parse", "HEAD").strip()
    _source(repo, "2.0.0", "VALUE = 2\n")  # same version, other code: only the hash tells them apart
    git(repo, "commit", "-q", "-am", "two")
    second = git(repo, "rev-parse", "HEAD").strip()

    a = mgr.commit_wheel(GitSource("dsb-built", str(repo), first))
    b = mgr.commit_wheel(GitSource("dsb-built", str(repo), second))
    assert a.parent.name == first and b.parent.name == second and a.name == b.name
    assert mgr.commit_wheel(GitSource("dsb-built", str(repo), first)) == a

    house = Path(mgr.index.find_links[0])
    ready = house / "commits" / ("0" * 40)
    ready.mkdir(parents=True)
    (ready / "dsb_built-2.0.0-py3-none-any.whl").write_bytes(b"prebuilt")
    assert mgr.commit_wheel(GitSource("dsb-built", str(repo), "0" * 40)) == ready / "dsb_built-2.0.0-py3-none-any.whl"


def test_a_commit_that_does_not_build_names_the_error(mgr, tmp_path):
    repo = tmp_path / "broken"
    _source(repo, "3.0.0")
    (repo / "setup.py").write_text("raise RuntimeError('this commit needs CUDA 99')\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "broken")
    head = git(repo, "rev-parse", "HEAD").strip()
    with pytest.raises(EnvBuildError, match="RuntimeError: this commit needs CUDA 99"):
        mgr.commit_wheel(GitSource("dsb-built", str(repo), head))
    with pytest.raises(EnvBuildError, match="git cannot read"):
        mgr.commit_wheel(GitSource("dsb-built", str(repo), "1" * 40))


def test_no_wheel_is_built_for_a_pin_the_base_already_holds(tmp_path):
    """Layered: the base's stub satisfies ``pytest==<the base's>``, so uv installs nothing and a wheel
    built for it would be thrown away (README command 1's deepspeed 0.19.8 point built one)."""
    import importlib.metadata

    from dsbisect.core.model import Point

    version = importlib.metadata.version("pytest")
    house = tmp_path / "house"
    house.mkdir()  # no sdist of pytest in it: a build would fail
    mgr = EnvManager(tmp_path / "cache", EnvOptions(build_pins=(), build_with_torch=("pytest",)),
                     IndexOptions(offline=True, find_links=(str(house),)))
    env = mgr.ensure(Point(versions=(("pytest", version),)))
    assert env.version_of("pytest") in (None, version)  # the base's, not a shadowing copy
    assert not list((tmp_path / "cache" / "wheels").rglob("*.whl")) and not list((tmp_path / "cache" / "builders").iterdir())
