"""A look-ahead build that the answer made useless is killed, not waited for (issue 23 item 7).

Real processes throughout: a command with a grandchild under ``proc.cancellable``, and a real
look-ahead venv build whose sdist's setup.py runs for a minute.
"""

from __future__ import annotations

import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from conftest import live_pids, make_case, pyproject
from dsbisect.core import proc
from dsbisect.envs.venvs import EnvManager
from dsbisect.core.model import EnvOptions, IndexOptions, Point
from dsbisect.run.runner import Runner
from dsbisect.store.store import Store


def _wait_for(path: Path, limit: float) -> int:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text().strip():
            return int(path.read_text().split()[0])
        time.sleep(0.05)
    raise AssertionError(f"{path} did not appear within {limit:g} s")


def test_a_cancelled_run_kills_its_whole_group_and_raises(tmp_path):
    pidfile = tmp_path / "grandchild"
    stop = threading.Event()
    out: list[BaseException | proc.Completed] = []

    def go() -> None:
        with proc.cancellable(stop):
            try:
                out.append(proc.run(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"]))
            except proc.Cancelled as e:
                out.append(e)

    t = threading.Thread(target=go)
    t.start()
    grandchild = _wait_for(pidfile, 120)  # guards only: each waits for an event
    stop.set()
    t.join(120)
    assert not t.is_alive()
    assert isinstance(out[0], proc.Cancelled), out
    deadline = time.monotonic() + 60
    while live_pids([grandchild]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_pids([grandchild]) == []  # the grandchild (a compiler, in a build) went with it
    with proc.cancellable(stop), pytest.raises(proc.Cancelled):
        proc.run(["true"])  # nothing starts once cancelled
    assert proc.run(["true"]).ok  # outside the context: as before


def test_run_outside_a_cancellable_context_is_unchanged(tmp_path):
    done = proc.run([sys.executable, "-c", "import os; print(os.getsid(0) == os.getpid())"])
    assert done.ok and done.stdout.strip() == "False"  # not a session of its own


# A setup.py that builds for a minute, as DeepSpeed's sdist does on a loaded 2-core machine.
SETUP = """\
import os, pathlib, time
p = pathlib.Path({marker!r})
if not p.exists():  # the first time: as long as a DeepSpeed sdist build on a loaded machine
    p.write_text(str(os.getpid()))
    time.sleep(90)
from setuptools import setup
setup()
"""


@pytest.mark.slow
def test_stop_ahead_kills_a_look_ahead_build_under_way(tmp_path):
    marker = tmp_path / "setup-pid"
    src = tmp_path / "sdist" / "dsb_slow-1.0.0"
    (src / "dsb_slow").mkdir(parents=True)
    (src / "pyproject.toml").write_text(pyproject("dsb-slow", "1.0.0", "dsb_slow"))
    (src / "setup.py").write_text(SETUP.format(marker=str(marker)))
    (src / "dsb_slow" / "__init__.py").write_text("")
    house = tmp_path / "house"
    house.mkdir()
    with tarfile.open(house / "dsb_slow-1.0.0.tar.gz", "w:gz") as tar:
        tar.add(src, arcname="dsb_slow-1.0.0")
    envs = EnvManager(tmp_path / "cache", EnvOptions(build_pins=(), build_with_torch=("dsb-slow",)),
                      IndexOptions(offline=True, find_links=(str(house),)))
    runner = Runner(store=Store(tmp_path / "st"), envs=envs)
    point = Point(versions=(("dsb-slow", "1.0.0"),))
    runner.prepare_ahead(make_case(tmp_path), [point])
    builder = _wait_for(marker, 180)  # setup.py of the look-ahead build is running
    t0 = time.monotonic()
    runner.stop_ahead()
    took = time.monotonic() - t0
    print(f"stop_ahead returned after {took:.2f} s (the build had ~90 s to go)")
    assert live_pids([builder]) == []  # killed, not awaited
    assert envs.built(point) is None  # no venv, and no half-built one left behind
    assert not list((tmp_path / "cache").rglob("dsb_slow-1.0.0-*.whl"))
    assert not [p for p in (tmp_path / "cache").rglob("*.tmp") if p.is_dir()]


@pytest.mark.slow
def test_a_bisection_ends_without_waiting_for_a_look_ahead_build(tmp_path):
    """1.0.0 good, 1.1.0 bad: once 1.1.0 is tested the answer is known, and the look-ahead
    build of 1.2.0 (in case 1.1.0 had passed: an sdist whose setup.py runs for 90 s) is
    killed when the bisection returns, not waited for."""
    from dataclasses import replace

    from toypkg import build_wheel

    from dsbisect.bisect.bisection import Bisection
    from dsbisect.core.model import Accelerator, Answer, RegressOn
    from dsbisect.records.results import Request

    house = tmp_path / "house"
    build_wheel(house, "1.0.0", "ok")
    build_wheel(house, "1.1.0", "raise")
    build_wheel(house, "1.3.0", "raise")
    marker = tmp_path / "setup-pid"
    src = tmp_path / "sdist" / "dsb_toy-1.2.0"
    (src / "dsb_toy").mkdir(parents=True)
    (src / "pyproject.toml").write_text(pyproject("dsb-toy", "1.2.0", "dsb_toy"))
    (src / "setup.py").write_text(SETUP.format(marker=str(marker)))
    (src / "dsb_toy" / "__init__.py").write_text("")
    with tarfile.open(house / "dsb_toy-1.2.0.tar.gz", "w:gz") as tar:
        tar.add(src, arcname="dsb_toy-1.2.0")
    index = IndexOptions(offline=True, find_links=(str(house),))
    envs = EnvManager(tmp_path / "cache", EnvOptions(build_pins=(), build_with_torch=("dsb-toy",)), index)
    runner = Runner(store=Store(tmp_path / "st"), envs=envs)
    case = replace(make_case(tmp_path, script="import dsb_toy\nassert dsb_toy.BEHAVIOUR == 'ok', 'boom'\n", nproc=1),
                   accelerator=Accelerator.CPU)
    req = Request(package="dsb-toy", good="1.0.0", bad="1.3.0", case=case, regress_on=RegressOn.FAIL)
    t0 = time.monotonic()
    result = Bisection(runner, index, req).run()
    took = time.monotonic() - t0
    assert (result.verdict, result.last_good, result.first_bad) == (Answer.FOUND, "1.0.0", "1.1.0"), result.message
    started = marker.is_file()  # its setup.py had started (else it was dropped before it got there)
    print(f"bisection took {took:.1f} s; the look-ahead build {'was in setup.py' if started else 'had not reached setup.py'}")
    if started:
        assert live_pids([int(marker.read_text())]) == []  # killed when the bisection returned
    assert envs.built(Point(versions=(("dsb-toy", "1.2.0"),))) is None
    assert [s.version for s in result.steps] == ["1.0.0", "1.3.0", "1.1.0"]  # 1.2.0 was never run
