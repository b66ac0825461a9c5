"""Point venvs built for real with uv from a local wheelhouse, layered on this interpreter."""

from __future__ import annotations

import subprocess

import pytest

import toypkg
from dsbisect.envs.cache import MARKER
from dsbisect.envs.venvs import EnvManager
from dsbisect.core.errors import EnvBuildError
from dsbisect.core.model import BaseMode, IndexOptions, Point

pytestmark = pytest.mark.slow  # real venvs


@pytest.fixture(scope="module")
def mgr(cache_dir, tmp_path_factory):
    wh = tmp_path_factory.mktemp("envs-wheels")
    toypkg.build_wheel(wh, "2.0.0", "ok", dist="dsb-env-toy")
    toypkg.build_wheel(wh, "2.1.0", "broken", dist="dsb-env-toy")
    # A release of a package the base already has (filelock, a torch dependency), to be shadowed.
    toypkg.build_wheel(wh, "0.0.1", "ok", dist="filelock")
    # A stand-in "numpy" without BUFSIZE (numpy 2 removed it), for the compat shim.
    toypkg.build_wheel(wh, "0.0.2", "ok", dist="numpy", module="numpy")
    # A release that needs a torch the base does not have: torch is held, so this cannot build.
    path = toypkg.build_wheel(wh, "2.2.0", "ok", dist="dsb-env-toy")
    _add_requirement(path, "torch>=99")
    return EnvManager(cache_dir, index=IndexOptions(offline=True, find_links=(str(wh),)))


def _add_requirement(wheel, req: str) -> None:
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        files = {n: z.read(n) for n in z.namelist()}
    meta = next(n for n in files if n.endswith("/METADATA"))
    files[meta] = files[meta].replace(b"Summary:", f"Requires-Dist: {req}\nSummary:".encode())
    with zipfile.ZipFile(wheel, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)


def _py(point_env, code: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(point_env.python), "-c", code], capture_output=True, text=True, **kw)


def test_layered_env_sees_base_torch_and_its_own_package(mgr):
    assert mgr.mode is BaseMode.LAYERED
    env = mgr.ensure(Point(versions=(("dsb-env-toy", "2.0.0"),)))
    assert not env.reused and (env.path / MARKER).is_file()
    out = _py(env, "import dsb_toy, torch, sys; print(dsb_toy.__version__, torch.__version__, sys.prefix)")
    assert out.returncode == 0, out.stderr
    version, torch_version, prefix = out.stdout.split()
    assert version == "2.0.0" and torch_version == mgr.base.version_of("torch") and prefix == str(env.path)
    assert ("dsb-env-toy", "2.0.0") in env.installed
    assert not any(n == "torch" for n, _ in env.installed)  # reused from the base, not copied


def test_reuse_is_fast_and_keyed_by_pins(mgr):
    p = Point(versions=(("dsb-env-toy", "2.0.0"),))
    first = mgr.ensure(p)
    again = mgr.ensure(p)
    assert again.reused and again.path == first.path and again.installed == first.installed
    other = mgr.spec_for(Point(versions=(("dsb-env-toy", "2.0.0"),), pins=("filelock==0.0.1",)))
    assert other.key != first.key


def test_pinning_a_base_package_shadows_it_and_says_so(mgr):
    env = mgr.ensure(Point(versions=(("filelock", "0.0.1"),)))
    base_version = mgr.base.version_of("filelock")
    assert ("filelock", base_version, "0.0.1") in env.shadowed
    out = _py(env, "import importlib.metadata as m; print(m.version('filelock'))")
    assert out.stdout.strip() == "0.0.1"


def test_unresolvable_point_is_a_build_error_with_the_resolvers_reason(mgr):
    with pytest.raises(EnvBuildError) as e:
        mgr.ensure(Point(versions=(("dsb-env-toy", "2.1.0"),)))
    assert "dsb-nonexistent-dependency" in str(e.value)
    assert not list(mgr.paths.envs.glob("*.tmp"))


def test_base_torch_is_held(mgr):
    with pytest.raises(EnvBuildError) as e:
        mgr.ensure(Point(versions=(("dsb-env-toy", "2.2.0"),)))
    assert "torch" in str(e.value)


def test_compat_shim_restores_numpy_bufsize(mgr):
    env = mgr.ensure(Point(versions=(("numpy", "0.0.2"),)))
    code = "import numpy; print(numpy.BUFSIZE)"
    plain = _py(env, code)
    shimmed = _py(env, code, env={"DSBISECT_COMPAT": "numpy-bufsize"})
    assert plain.returncode != 0 and "has no attribute 'BUFSIZE'" in plain.stderr
    assert shimmed.returncode == 0 and shimmed.stdout.strip() == "8192"


def test_prune_removes_envs(mgr, tmp_path):
    small = EnvManager(tmp_path / "c", index=mgr.index)
    small.ensure(Point(versions=(("dsb-env-toy", "2.0.0"),)))
    assert len(small.existing()) == 1
    removed, busy = small.prune()
    assert len(removed) == 1 and busy == [] and small.existing() == []


def test_stubs_keep_the_base_entry_points(mgr):
    """A stub is what importlib.metadata finds first: it must carry the entry points
    (setuptools finds its commands through them, pytest its plugins)."""
    env = mgr.ensure(Point(versions=(("dsb-env-toy", "2.0.0"),)))
    code = ("import importlib.metadata as m; "
            "print(sorted(e.name for e in m.entry_points(group='distutils.commands') if e.name == 'dist_info'))")
    out = _py(env, code)
    assert out.stdout.strip() == "['dist_info']", out.stderr
