"""Shared fixtures: a wheelhouse of toy releases, an env cache, a CLI runner, GPU markers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
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


def invoke_cli(*args: str, cwd: Path | None = None):
    """The Typer app in-process with a wide, colourless terminal (what ``cli`` calls; for
    session fixtures, which cannot take the function-scoped ``cli``)."""
    from dsbisect.cli import app

    old = Path.cwd()
    if cwd:
        os.chdir(cwd)
    try:
        return CliRunner().invoke(app, list(args), env={"COLUMNS": "220", "NO_COLOR": "1", "TERM": "dumb"},
                                  catch_exceptions=False)
    finally:
        os.chdir(old)


@pytest.fixture
def cli():
    """Invoke the Typer app in-process with a wide, colourless terminal."""
    return invoke_cli


@dataclass(frozen=True)
class ToyHang:
    """One real run of the toy's deadlock (dsb-toy 1.3.0: rank 1 skips the all_reduce rank 0
    waits in) through the whole tool: matrix, point venv, the deepspeed launcher, 2 CPU ranks."""

    folder: Path  # the matrix's folder (its store is ``store``)
    store: Path
    run: dict  # the run's record, as ``run --format json`` gave it
    ended: float  # time.time() when ``run`` returned
    left: tuple[int, ...]  # the run's processes still alive just then (live_pids)


def _toy_hang(folder: Path, house: Path, cache_dir: Path, collective_timeout: float, timeout: float,
              *extra: str) -> ToyHang:
    write_matrix(folder, ["1.3.0"], collective_timeout=collective_timeout, timeout=timeout)
    res = invoke_cli("run", "matrix.yaml", *offline(house, cache_dir), "-q", "--format", "json", *extra, cwd=folder)
    ended = time.time()
    assert res.exit_code == 0, res.output
    (run,) = json.loads(res.stdout)["runs"]
    return ToyHang(folder, folder / ".dsbisect", run, ended, tuple(live_pids(run["evidence"]["pids"])))


@pytest.fixture(scope="session")
def toy_deadlock(tmp_path_factory, wheelhouse, cache_dir) -> ToyHang:
    """The toy's deadlock at a 300 s collective timeout, proven early: run once a session and
    shared by the tests that only read it (the early verdict's latency and proof, its record,
    its signature's identity, its page). Read only: write beside it, never into its store."""
    return _toy_hang(tmp_path_factory.mktemp("toy-deadlock"), wheelhouse, cache_dir, 300, 400)


@pytest.fixture(scope="session")
def compute_launch(tmp_path_factory):
    """tests/test_early_hang.py's "compute" scenario on gloo (rank 1 computes for SECS, silently,
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
    return _toy_hang(tmp_path_factory.mktemp("toy-timeout-hang"), wheelhouse, cache_dir, 6, 300, "--no-early-hang")


def cli_json(cli, *args: str, cwd: Path, exit_code: int = 0):
    """``dsbisect ARGS -q --format json`` through ``cli``: its exit code asserted, its report parsed
    (the result too, for its stderr).  The one way the tests read a command's JSON."""
    res = cli(args[0], "-q", "--format", "json", *args[1:], cwd=cwd)  # before any `-- COMMAND`
    assert res.exit_code == exit_code, res.output
    return json.loads(res.stdout), res


def offline(house: Path, cache_dir: Path | None = None) -> list[str]:
    """The options of a test's runs: packages from the local wheelhouse ``house`` only, venvs in
    the session's ``cache_dir``."""
    return ["--offline", "--find-links", str(house)] + (["--cache-dir", str(cache_dir)] if cache_dir else [])


def wait_until(predicate, timeout: float, what: str = "", every: float = 0.05):
    """``predicate()``'s first true value, asked every ``every`` s; fails the test after ``timeout``
    s (instead of a fixed sleep: as short as it can be, and long enough on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what or predicate}")
        time.sleep(every)


def make_case(folder: Path, name: str = "c", script: str = "pass\n", **settings):
    """A case with a script of ``script``'s text in ``folder``, as ``--script`` would make it."""
    from dataclasses import replace

    from dsbisect.matrix import script_case

    path = folder / f"{name}.py"
    path.write_text(script)
    return replace(script_case(path, settings.pop("nproc", 2)), name=name, **settings)


def write_matrix(folder: Path, versions: list[str], *, name: str = "toy", extra: str = "",
                 package: str = "dsb-toy", collective_timeout: float = 6, timeout: float = 90,
                 nproc: int = 2) -> Path:
    """A matrix with one toy case over ``versions`` of the toy package, on 2 CPU ranks (or
    ``nproc``: 1 runs the rank without a launcher, 2-4 s less a run, for tests of the search
    that need no second rank: "ok", "raise", "import" and "broken" toys)."""
    toypkg.write_repro(folder)
    text = f"""\
defaults:
  collective_timeout: {collective_timeout}
  timeout: {timeout}
  accelerator: cpu
  nproc: {nproc}
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


class SimpleIndex:
    """A PEP 503 package index served over http from a folder, for tests (no network needed).

    ``add(wheel, yanked="")`` publishes a file; each project page lists its files, with
    ``data-yanked`` where given.  ``url`` is the ``.../simple/`` base URL.
    """

    def __init__(self, root: Path):
        import functools
        import http.server
        import threading

        self.root = root
        (root / "files").mkdir(parents=True, exist_ok=True)
        self.files: dict[str, list[tuple[str, str]]] = {}
        handler = functools.partial(_QuietHandler, directory=str(root))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"

    def add(self, path: Path, yanked: str = "") -> None:
        from packaging.utils import canonicalize_name, parse_wheel_filename

        name = canonicalize_name(parse_wheel_filename(path.name)[0])
        shutil.copy(path, self.root / "files" / path.name)
        self.files.setdefault(name, []).append((path.name, yanked))
        page = self.root / "simple" / name
        page.mkdir(parents=True, exist_ok=True)
        links = "".join(
            f'<a href="../../files/{f}"{f" data-yanked={chr(34)}{y}{chr(34)}" if y else ""}>{f}</a>\n'
            for f, y in self.files[name])
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
        (self.root / "simple" / "index.html").write_text(
            "<html><body>" + "".join(f'<a href="{n}/">{n}</a>' for n in self.files) + "</body></html>")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _quiet_handler_base():
    import http.server

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    return Handler


_QuietHandler = _quiet_handler_base()


@pytest.fixture
def simple_index(tmp_path_factory):
    index = SimpleIndex(tmp_path_factory.mktemp("index"))
    yield index
    index.close()


def live_pids(pids) -> list[int]:
    """The pids among ``pids`` still running (not zombies)."""
    import psutil

    from dsbisect.proc import is_live

    alive = []
    for pid in pids:
        try:
            if is_live(psutil.Process(pid)):
                alive.append(pid)
        except psutil.Error:
            continue
    return alive


def git(repo: Path, *args: str) -> str:
    """git in ``repo`` with a fixed author, failing the test on error."""
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@e", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@e")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout
