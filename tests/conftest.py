"""Shared fixtures: a wheelhouse of toy releases, an env cache, a CLI runner, GPU markers."""

from __future__ import annotations

import contextlib
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

# The helpers here (toypkg, browser, ...) and every package's tests by their module name, as
# pytest imports them (a test may borrow another's helpers: ``from test_early_hang import _launch``).
_HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(_HERE)] + sorted(str(p) for p in _HERE.iterdir()
                                     if p.is_dir() and p.name not in {"data", "__pycache__"})
import toypkg  # noqa: E402

# A pytest-xdist worker starts with COLUMNS=80 and LINES=24 in its environment: a console made
# when dsbisect.cli is imported would keep 80 columns for every test (the CLI runner's
# COLUMNS=220 comes later). A worker's environment is a plain run's.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)


def pytest_sessionstart(session):
    """README command 1 installs torch with ``pip install --no-compile``; where it was, the
    bytecode of what the tests' ranks import is cached once here (dsbisect does the same before
    its first run), not compiled again by every rank under PYTHONDONTWRITEBYTECODE."""
    from dsbisect.envs import base as base_env

    base_env.cache_bytecode(base_env.inspect_base(sys.executable))


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


@pytest.hookimpl(tryfirst=True)  # the groups before pytest-xdist reads them
def pytest_collection_modifyitems(config, items):
    gpus = _cuda_gpus()
    skip_gpu = pytest.mark.skip(reason=f"needs CUDA and at least 2 GPUs (found {gpus})")
    for item in items:
        if "gpu" in item.keywords and gpus < 2:
            item.add_marker(skip_gpu)
    groups = _worker_groups(items)
    for item, group in groups.items():
        item.add_marker(pytest.mark.xdist_group(group))
    for item in items:
        kind = _timing_kind(item)
        if kind:
            item.add_marker(getattr(pytest.mark, kind))
    _tell_the_scheduler(config, groups, {kind: [item.nodeid for item in items if item.get_closest_marker(kind)]
                                         for kind in ("alone", "light")})


# ------------------------------------------------------------------ three workers (pytest-xdist)
# On three pytest-xdist workers (pytest -n 3 --dist loadgroup; see pyproject's addopts), so
# that a test that waits (a hang's timeout, a grace period, a Slurm job) overlaps one that
# computes. Three rules keep that from changing what a test proves:
# - the tests that share a fixture of module or session scope (a grid, the toy deadlock, the
#   sshds, a Slurm sleeper) run on one worker, so that it is made once, as without workers;
# - a timing-sensitive test that keeps the CPU busy itself (marked ``alone``: ranks that compute,
#   a small cgroup's points, two points at once) runs beside no other ``alone`` one, at the
#   normal priority;
# - a timing-sensitive test that mostly waits (marked ``light``: a proof on idle ranks, a
#   signal raced against a run, a deadline, Slurm, a heartbeat) runs at the normal priority
#   beside anything: what it needs of the CPU is little, and an ``alone`` test beside it is
#   barely slowed;
# - every other slow test runs in the background (nice +10 and idle I/O: what the timing-
#   sensitive tests leave). Where a worker cannot renice, a timing-sensitive test runs while no
#   other slow test runs (a lock the workers take: shared by slow tests, exclusive by ``alone``
#   and ``light`` ones, with a turnstile).
# The first worker takes the ``alone`` units first, the second the ``light`` ones, the third the
# background ones, each falling back to what is left (``_LANES``). On two workers (the session
# before this layout) the timing-sensitive tests ran one after another on one worker, about
# 750 s of the suite's 850-950 s; on three the two kinds overlap and the suite took 687 s.

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


# The timing-sensitive slow tests, marked ``alone`` here (one table, the reason beside each):
# module -> the test functions (None: all the module's slow tests).
_ALONE = {
    "test_slurm.py": None,  # the one-node Slurm declares this machine's 2 CPUs; a job's 1-minute limit
    "test_multinode.py": None,  # two "nodes" over sshd and pdsh, each a deepspeed launcher with ranks
    "test_memory.py": None,  # a small cgroup: how many points fit depends on the memory the machine has free
    "test_early_hang.py": None,  # an early hang's latency ("within 20 s"), ranks computing for SECS beside waiting ones
    "test_deadlock_store_live.py": None,  # a store wait proven "in under 25 s"; a rank slow to reach it is no hang
    "test_launch.py": None,  # deadlines, grace periods and idle limits of seconds; signals
    "test_quiet_snapshot.py": None,  # a snapshot raced against a silent rank
    "test_verdict_words.py": None,  # the 5 s grace after a rank prints the words; "a hang as fast"
    "test_progress.py": None,  # a heartbeat line every second while a point runs
    "test_concurrency.py": None,  # two points at once: their runs overlap in time
    "test_cli.py": {"test_a_signal_stops_a_bisection_with_its_exit_code",
                    "test_a_signal_while_a_slurm_job_waits_cancels_it_with_its_exit_code"},
    "test_procs_battery.py": {"test_kill_9_of_dsbisect_leaves_no_child_of_a_rank",
                              "test_a_signal_stops_50_signal_ignoring_daemons_within_5_s",
                              "test_a_signal_while_a_stack_snapshot_holds_the_launch_still_stops_the_tree_within_5_s"},
    "test_reliability.py": {"test_a_signal_stops_every_process_and_records_the_run_as_interrupted",
                            "test_kill_9_of_dsbisect_takes_the_run_with_it_and_the_next_start_says_so",
                            "test_a_daemon_that_left_the_tree_is_found_by_its_tag"},
    "test_direct.py": {"test_one_rank_hang_has_the_ranks_stack",  # an idle limit of seconds
                       "test_a_build_lock_left_by_a_killed_run_is_no_hang"},
    "test_revert_proof.py": {"test_a_clean_revert_proves_the_commit_and_survives_ctrl_c"},
    "test_run_cli.py": {"test_killed_run_resumes_without_losing_or_repeating"},
    "test_bisect_cli.py": {"test_killed_bisect_resumes_from_the_store"},
}
# Session fixtures whose runs the tests that read them time (an early verdict's latency): made
# by whichever of their tests comes first, so each of those tests is alone.
_TIMED_FIXTURES = {"toy_deadlock", "toy_timeout_hang", "compute_launch"}


# Of those, the ones that keep the CPU busy themselves (ranks that compute, many points at once,
# a 12 GiB all_reduce, a small cgroup's points): marked ``alone``, they run beside no other
# ``alone`` test. Every other timing-sensitive test mostly waits (a proof on idle ranks, a
# signal, a deadline, Slurm, a heartbeat) and is marked ``light``: it runs at the normal
# priority beside anything (an ``alone`` test included), on a lane of its own.
_HEAVY = {
    "test_memory.py": None,  # a small cgroup's points; a 12 GiB all_reduce beside it would take its memory
    "test_concurrency.py": None,
    "test_multinode.py": None,  # two deepspeed launchers and their ranks over sshd
    "test_early_hang.py": {"test_a_rank_computing_before_the_collective_is_no_hang",
                           "test_one_large_all_reduce_is_no_hang"},
    "test_launch.py": {"test_a_rank_waiting_on_a_child_that_works_is_not_idle"},
    "test_verdict_words.py": {"test_the_words_then_a_silent_busy_rank_is_not_a_hang"},
    "test_deadlock_store_live.py": {"test_a_rank_slow_to_reach_new_group_and_monitored_barrier_is_no_hang"},
    "test_revert_proof.py": {"test_a_clean_revert_proves_the_commit_and_survives_ctrl_c"},
    "test_reliability.py": {"test_a_daemon_that_left_the_tree_is_found_by_its_tag",
                            "test_a_signal_stops_every_process_and_records_the_run_as_interrupted"},
    "test_run_cli.py": {"test_killed_run_resumes_without_losing_or_repeating"},
    "test_bisect_cli.py": {"test_killed_bisect_resumes_from_the_store"},
}
_HEAVY_FIXTURES = {"compute_launch"}  # its ranks compute for SECS


def _in(table: dict, item) -> bool:
    names = table.get(item.path.name, ())
    return names is None or getattr(item, "originalname", item.name) in names


def _timing_kind(item) -> str | None:
    """``alone``, ``light``, or None for a test that is not timing-sensitive."""
    if not _timing_sensitive(item):
        return None
    heavy = _in(_HEAVY, item) or _HEAVY_FIXTURES & set(getattr(item, "fixturenames", ()))
    return "alone" if heavy else "light"


def _timing_sensitive(item) -> bool:
    if _TIMED_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    if item.get_closest_marker("slow") is None and item.get_closest_marker("slurm") is None:
        return False
    return _in(_ALONE, item)


def _tell_the_scheduler(config, groups: dict, kinds: dict[str, list[str]]) -> None:
    """On a worker, write each grouped test's group, and the ``alone`` and ``light`` tests,
    where the controller's scheduler reads them: pytest 9.2 no longer sees the ``@group`` suffix that
    pytest-xdist 3.8 writes into a test's id for ``--dist loadgroup`` (pytest-xdist issue #1386),
    so the groups would be ignored; the controller collects no tests, so it knows no markers."""
    folder = _turn_folder(config)
    if folder is None:
        return
    worker = os.environ["PYTEST_XDIST_WORKER"]
    for name, data in ((f"groups.{worker}.json", {item.nodeid: group for item, group in groups.items()}),
                       (f"kinds.{worker}.json", kinds)):
        (folder / name).with_suffix(".tmp").write_text(json.dumps(data))
        (folder / name).with_suffix(".tmp").replace(folder / name)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` with the groups the workers wrote (``_tell_the_scheduler``); the
    scheduler reads them once every worker has collected, before it hands out any test."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    folder = config._tmp_path_factory.getbasetemp()

    class FixtureGroups(LoadGroupScheduling):
        """Lanes besides the groups: each worker takes the units of its kind first (``_LANES``:
        ``alone``, ``light``, background), and falls back to what is left, so that the
        ``alone`` tests run one after another on one worker, the ``light`` ones on another, and
        the background ones beside both, instead of the workers waiting for each other's
        ``alone`` test. A unit's kind is that of its first kind among ``alone``, ``light``."""

        groups: dict | None = None
        kinds: dict | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                self.groups = {}
                for path in sorted(folder.glob("groups.*.json")):
                    self.groups.update(json.loads(path.read_text()))
            return self.groups.get(nodeid) or super()._split_scope(nodeid)

        def _kind(self, scope: str) -> str:
            """The unit's kind, read once per unit (its tests do not change)."""
            if self.kinds is None:
                tests: dict[str, set] = {"alone": set(), "light": set()}
                for path in sorted(folder.glob("kinds.*.json")):
                    for kind, ids in json.loads(path.read_text()).items():
                        tests[kind].update(ids)
                self.kinds = {s: next((k for k in ("alone", "light") if tests[k] & set(unit)), "background")
                              for s, unit in self.workqueue.items()}
            return self.kinds[scope]

        def _assign_work_unit(self, node) -> None:
            worker = node.workerinput.get("workerid")
            order = _LANES.get(worker, _LANES[None])
            for kind in order:
                scope = next((s for s in self.workqueue if self._kind(s) == kind), None)
                if scope is not None:
                    self.workqueue.move_to_end(scope, last=False)  # what the base class takes next
                    break
            super()._assign_work_unit(node)

    return FixtureGroups(config, log)


# Which units each worker takes first: gw0 the ``alone`` ones, gw1 the light ones, the others the
# background ones; each falls back to what is left.
_LANES = {"gw0": ("alone", "background", "light"), "gw1": ("light", "background", "alone"),
          None: ("background", "light", "alone")}


def _turn_folder(config) -> Path | None:
    """Where the workers of this run keep their lock (beside their base temp folders); None
    when the tests run in one process."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return config._tmp_path_factory.getbasetemp().parent


# How far a slow test that is not timing-sensitive lowers its CPU priority (its processes
# inherit it): beside an ``alone`` test at the normal priority it takes what that one leaves.
BACKGROUND_NICE = 10


def _can_renice() -> bool:
    """Whether this worker may lower its priority and raise it back again (root, CAP_SYS_NICE),
    as running slow tests in the background needs; ``DSBISECT_TEST_BACKGROUND=0`` says no."""
    if os.environ.get("DSBISECT_TEST_BACKGROUND") == "0":
        return False
    try:
        now = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, 0, now + 1)
        os.setpriority(os.PRIO_PROCESS, 0, now)
        return True
    except OSError:
        return False


@contextlib.contextmanager
def _background():
    """This thread (the test's: what it starts inherits it) at BACKGROUND_NICE and idle I/O."""
    import psutil

    me = psutil.Process()
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    io = me.ionice()
    os.setpriority(os.PRIO_PROCESS, 0, nice + BACKGROUND_NICE)
    with contextlib.suppress(OSError, psutil.Error):
        me.ionice(psutil.IOPRIO_CLASS_IDLE)
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
        with contextlib.suppress(OSError, psutil.Error, ValueError):
            me.ionice(io.ioclass, io.value)


@contextlib.contextmanager
def _slow_turn(folder: Path, alone: bool, background: bool):
    """Where the worker may renice (``background``): an ``alone`` test runs beside no other
    ``alone`` one, at the normal priority; any other slow test runs in the background, at a
    lower CPU and I/O priority, so that a timing-sensitive test beside it is barely slowed.
    Else: the slow tests' lock, shared, or exclusive for a timing-sensitive test (``alone`` here:
    the caller passes a ``light`` test as one, since without renicing nothing would protect it).
    A ``light`` test where the worker may renice takes no turn at all (the caller's)."""
    import fcntl

    if background:
        if not alone:
            with _background():
                yield
            return
        with open(folder / "alone.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        return
    with open(folder / "turnstile.lock", "a") as gate, open(folder / "slow.lock", "a") as slow:
        fcntl.flock(gate, fcntl.LOCK_EX)
        if alone:  # waits for the other worker's slow test, holding the gate: no new one starts
            fcntl.flock(slow, fcntl.LOCK_EX)
            fcntl.flock(gate, fcntl.LOCK_UN)
        else:
            fcntl.flock(gate, fcntl.LOCK_UN)
            fcntl.flock(slow, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(slow, fcntl.LOCK_UN)


_BACKGROUND: list[bool] = []  # _can_renice's answer, asked once per worker


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    folder = _turn_folder(item.config)
    alone = item.get_closest_marker("alone") is not None
    light = item.get_closest_marker("light") is not None
    if folder is None or not (alone or item.get_closest_marker("slow")):
        yield
        return
    if not _BACKGROUND:
        _BACKGROUND.append(_can_renice())
    if light and _BACKGROUND[0]:  # at the normal priority, beside anything: it barely uses the CPU
        yield
        return
    with _slow_turn(folder, alone or light, _BACKGROUND[0]):
        yield


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
    write_matrix(folder, ["1.3.0"], collective_timeout=collective_timeout, timeout=timeout,
                 launcher="deepspeed")
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

    from dsbisect.run.matrix import script_case

    path = folder / f"{name}.py"
    path.write_text(script)
    return replace(script_case(path, settings.pop("nproc", 2)), name=name, **settings)


def write_matrix(folder: Path, versions: list[str], *, name: str = "toy", extra: str = "",
                 package: str = "dsb-toy", collective_timeout: float = 6, timeout: float = 90,
                 nproc: int = 2, launcher: str = "direct") -> Path:
    """A matrix with one toy case over ``versions`` of the toy package, on 2 CPU ranks (or
    ``nproc``: 1 runs the rank without a launcher, 2-4 s less a run, for tests of the search
    that need no second rank: "ok", "raise", "import" and "broken" toys).

    ``launcher``: ``direct`` (dsbisect starts the two ranks itself) unless a test is about a
    launcher (``"deepspeed"``, ``"torchrun"``). The two ranks, their collectives and everything
    dsbisect does around them are the same under each; torchrun is one more process that
    imports torch (about 3.6 CPU-s and 2-3 s of a run's wall on 2 cores), DeepSpeed's launcher
    two that each import DeepSpeed. The tests that keep a launcher are those of its line, its
    hangs and signals, and its multi-node and Slurm forms."""
    toypkg.write_repro(folder)
    text = f"""\
defaults:
  collective_timeout: {collective_timeout}
  timeout: {timeout}
  accelerator: cpu
  nproc: {nproc}
  launcher: {launcher}
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


class DatedIndex:
    """A PEP 691 (JSON) package index whose files carry PEP 700 ``upload-time``s, served over http
    from a folder: what ``uv pip compile --exclude-newer`` needs to resolve "as on a date".

    ``add(wheel, "2026-06-01")`` publishes a file uploaded at noon (UTC) of that day; ``url`` is
    the ``.../simple/`` base URL."""

    def __init__(self, root: Path):
        import functools
        import http.server
        import threading

        self.root = root
        (root / "files").mkdir(parents=True, exist_ok=True)
        self.files: dict[str, list[dict]] = {}
        handler = functools.partial(_JsonHandler, directory=str(root))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"

    def add(self, path: Path, day: str) -> None:
        import hashlib
        import json

        from packaging.utils import canonicalize_name, parse_wheel_filename

        name = canonicalize_name(parse_wheel_filename(path.name)[0])
        shutil.copy(path, self.root / "files" / path.name)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        self.files.setdefault(name, []).append({"filename": path.name, "url": f"../../files/{path.name}",
                                                "hashes": {"sha256": digest}, "upload-time": f"{day}T12:00:00Z",
                                                "size": path.stat().st_size})
        page = self.root / "simple" / name
        page.mkdir(parents=True, exist_ok=True)
        (page / "index.json").write_text(json.dumps({"meta": {"api-version": "1.1"}, "name": name,
                                                     "files": self.files[name], "versions": []}))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _json_handler_base():
    import http.server

    class Handler(http.server.SimpleHTTPRequestHandler):
        """A project page (``/simple/NAME/``) as PEP 691 JSON; 404 for a project it does not have."""

        def do_GET(self) -> None:
            parts = [p for p in self.path.split("?")[0].split("/") if p]
            if len(parts) == 2 and parts[0] == "simple":
                page = Path(self.directory) / "simple" / parts[1] / "index.json"
                if not page.is_file():
                    self.send_error(404)
                    return
                data = page.read_bytes()
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            super().do_GET()

        def log_message(self, *args) -> None:
            pass

    return Handler


_JsonHandler = _json_handler_base()


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

    from dsbisect.core.proc import is_live

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
