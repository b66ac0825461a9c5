"""Shared fixtures (a wheelhouse of toy releases, an env cache, a CLI runner, the toy deadlock run
once), GPU markers, and the groups of tests that share a fixture (pytest-xdist). The helpers the
tests import from here live in helpers.py and indexes.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# The helpers here (toypkg, browser, ...) and every package's tests by their module name, as
# pytest imports them (a test may borrow another's helpers: ``from test_early_hang import _launch``).
_HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(_HERE)] + sorted(str(p) for p in _HERE.iterdir()
                                     if p.is_dir() and p.name not in {"data", "__pycache__"})
import toypkg  # noqa: E402
from helpers import (ToyHang, cli_json, commit, commit_toy, git, invoke_cli, live_pids,  # noqa: E402,F401
                     make_case, offline, pyproject, requirements_history, slurm_job_under, stopped_dsbisect,
                     toy_hang, wait_until, write_matrix)  # the tests import these from conftest
from indexes import DatedIndex, SimpleIndex  # noqa: E402,F401

# A pytest-xdist worker starts with COLUMNS=80, LINES=24: a console made when dsbisect.cli is
# imported would keep 80 columns for every test. A worker's environment is a plain run's.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)


def pytest_sessionstart(session):
    """README command 1 installs torch with ``pip install --no-compile``; where it was, the
    bytecode of what the tests' ranks import is cached once here (dsbisect does the same before
    its first run), not compiled again by every rank under PYTHONDONTWRITEBYTECODE."""
    from dsbisect.envs import base as base_env

    base_env.cache_bytecode(base_env.inspect_base(sys.executable))


TOY_RELEASES = {"1.0.0": "ok", "1.1.0": "ok", "1.2.0": "ok", "1.3.0": "skip", "1.4.0": "skip", "1.5.0": "skip",
                "1.6.0": "skip", "1.7.0": "skip"}  # the toy releases most tests use: 1.3.0 hangs


def _cuda_gpus() -> int:
    if not shutil.which("nvidia-smi"):
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return len([ln for ln in out.stdout.splitlines() if ln.startswith("GPU ")]) if out.returncode == 0 else 0


@pytest.hookimpl(tryfirst=True)  # the groups before pytest-xdist reads them
def pytest_collection_modifyitems(config, items):
    gpus = _cuda_gpus()
    skip_gpu = pytest.mark.skip(reason=f"needs CUDA and at least 2 GPUs (found {gpus})")
    for item in items:
        if "gpu" in item.keywords and gpus < 2:
            item.add_marker(skip_gpu)
    groups = _worker_groups(items) | {item: (m.args or (m.kwargs["name"],))[0] for item in items
                                      if (m := item.get_closest_marker("xdist_group"))}  # a test's own
    for item, group in groups.items():
        item.add_marker(pytest.mark.xdist_group(group))
    _tell_the_scheduler(config, groups)


# ------------------------------------------------------------------ three workers (pytest-xdist)
# pytest -n 3 --dist loadgroup (pyproject's addopts): a test that waits (a hang's timeout, a
# Slurm job) overlaps one that computes. No test is timed (a limit of seconds is reached on a
# driven clock, tests/launch/driven.py; a wait for real processes has a generous timeout), so
# any test may run beside any other. What plain loadgroup does not do here: the tests that share
# a fixture of module or session scope (a grid, the toy deadlock, the sshds, a Slurm sleeper) are
# put in one xdist_group, so that it is made once, as without workers (a test's own xdist_group
# marker is kept: the tests that need much memory share one); and the groups reach the
# scheduler through files (below), since pytest 9.2 hides the ``@group`` suffix of a test's id.

# Session fixtures every worker makes for itself, cheaply (a folder, env variables, zip files).
_PER_WORKER = {"cache_dir", "wheelhouse", "hermetic_indexes", "sigint_as_from_a_terminal"}
_TESTS = Path(__file__).resolve().parent


def _shared_fixtures(item) -> set[str]:
    """The fixtures of module scope or wider, defined in these tests, that ``item`` uses."""
    import inspect

    info = getattr(item, "_fixtureinfo", None)
    found = set()
    for name, defs in (info.name2fixturedefs.items() if info else ()):
        last = defs[-1]
        if last.scope == "function" or name in _PER_WORKER:
            continue
        try:
            ours = Path(inspect.getfile(last.func)).resolve().is_relative_to(_TESTS)
        except TypeError:  # a builtin
            ours = False
        if ours:
            found.add(f"{last.baseid or '.'}::{name}")
    return found


def _worker_groups(items) -> dict:
    """Each item that shares a fixture with others -> its group's name (items joined by any
    fixture they share, transitively; the group is named after its first fixture)."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    uses = {item: sorted(_shared_fixtures(item)) for item in items}
    for names in uses.values():
        for other in names[1:]:
            a, b = root(names[0]), root(other)
            parent[max(a, b)] = min(a, b)
    return {item: root(names[0]) for item, names in uses.items() if names}


def _tell_the_scheduler(config, groups: dict) -> None:
    """On a worker, write each grouped test's group where the controller's scheduler reads it:
    pytest 9.2 no longer sees the ``@group`` suffix that pytest-xdist 3.8 writes into a test's
    id for ``--dist loadgroup`` (pytest-xdist issue #1386), so the groups would be ignored; the
    controller collects no tests, so it knows no markers."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    path = config._tmp_path_factory.getbasetemp().parent / f"groups.{worker}.json"
    path.with_suffix(".tmp").write_text(json.dumps({item.nodeid: group for item, group in groups.items()}))
    path.with_suffix(".tmp").replace(path)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` with the groups the workers wrote (``_tell_the_scheduler``), read
    once every worker has collected, before any test is handed out."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    folder = config._tmp_path_factory.getbasetemp()

    class FixtureGroups(LoadGroupScheduling):
        groups: dict | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                self.groups = {}
                for path in sorted(folder.glob("groups.*.json")):
                    self.groups.update(json.loads(path.read_text()))
            return self.groups.get(nodeid) or super()._split_scope(nodeid)

    return FixtureGroups(config, log)


@pytest.fixture(scope="session", autouse=True)
def sigint_as_from_a_terminal():
    """Started in the background by a non-interactive shell (`bash -c '... &'`, nohup), pytest and
    every process it starts would ignore SIGINT, and the Ctrl-C tests would test nothing: give
    SIGINT its default Python handler back, so that the processes the tests start get it too."""
    before = signal.getsignal(signal.SIGINT)
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture(scope="session", autouse=True)
def hermetic_indexes(tmp_path_factory):
    """The machine's own pip/uv index settings (pip.conf, PIP_*, UV_*) out of the tests: dsbisect
    honours them (indexes.resolve), and the tests must give the same answers anywhere."""
    saved = dict(os.environ)
    for name in list(os.environ):
        if (name.startswith(("PIP_", "UV_")) and name != "UV_CACHE_DIR") or name == "VIRTUAL_ENV":
            del os.environ[name]
    os.environ["PIP_CONFIG_FILE"] = os.devnull
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("xdg-config"))
    yield
    os.environ.clear()
    os.environ.update(saved)


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
    return invoke_cli


@pytest.fixture(scope="session")
def toy_deadlock(tmp_path_factory, wheelhouse, cache_dir) -> ToyHang:
    """The toy's deadlock at a 300 s collective timeout, proven early: run once a session and
    shared by the tests that only read it (the early verdict's latency and proof, its record,
    its signature's identity, its page). Read only: write beside it, never into its store."""
    return toy_hang(tmp_path_factory.mktemp("toy-deadlock"), wheelhouse, cache_dir, 300, 400)


@pytest.fixture(scope="session")
def compute_launch(tmp_path_factory):
    """tests/forensics/test_early_hang.py's "compute" scenario on gloo (rank 1 computes for SECS, silently,
    while rank 0 waits in the all_reduce: no hang), launched once a session with the start-up
    hook and read by the tests of it (its no-false-hang test, the HTML page's): (the
    LaunchResult, its RunDir). Read only."""
    from test_early_hang import HOOK, _launch

    folder = tmp_path_factory.mktemp("compute")
    hook, job = folder / "hook", folder / "job"
    hook.mkdir()
    job.mkdir()
    shutil.copy(HOOK, hook / "dsbisect_hook.py")
    (hook / "sitecustomize.py").write_text("import dsbisect_hook  # noqa: F401\n")
    res, run, _, _ = _launch(job, hook, "compute")
    return res, run


@pytest.fixture(scope="session")
def toy_timeout_hang(tmp_path_factory, wheelhouse, cache_dir) -> ToyHang:
    """The same deadlock with --no-early-hang at a 6 s collective timeout: gloo's timeout ends
    it. Run once a session, read only, as ``toy_deadlock``. Its wall timeout (300 s) is only a
    backstop: the tests that read it want gloo's timeout as the reason, and time the hang from
    the deadlock's own stamp; on a machine under a load of 35, 106-120 s were not enough for
    the ranks to reach the collective."""
    return toy_hang(tmp_path_factory.mktemp("toy-timeout-hang"), wheelhouse, cache_dir, 6, 300, "--no-early-hang")


@pytest.fixture
def simple_index(tmp_path_factory):
    index = SimpleIndex(tmp_path_factory.mktemp("index"))
    yield index
    index.close()


