"""Waiting for a lock (core.waits): said with who holds it, and ended by a cancel or a Ctrl-C.

Fast: a real lock held by a real other process (its pid and command read from the kernel's
table of file locks); the wait said at the right moments of a clock the test drives; a
cancelled thread's wait ended.  Slow: two real dsbisect processes sharing a cache, one building
a venv (its index answers slowly), the other waiting for that venv: the waiter says so, names
the holder, and SIGINT ends it at once with exit 130.
"""

from __future__ import annotations

import functools
import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import toypkg
from conftest import wait_until, write_matrix
from dsbisect.core import proc, waits
from dsbisect.core.tell import listening

HOLD = """\
import fcntl, sys, time
f = open(sys.argv[1], "a")
fcntl.flock(f, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture
def holder(tmp_path):
    """Another process holding an exclusive flock on ``tmp_path/x.lock`` (as a filelock holder does)."""
    lock = tmp_path / "x.lock"
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(lock), "--marker-words"], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    yield lock, p
    p.kill()
    p.wait()


def test_the_holder_of_a_lock_is_named_by_pid_and_command(holder):
    lock, p = holder
    assert waits.holders(lock) == [p.pid]
    said = waits.described(waits.holders(lock))
    assert said.startswith(f"held by pid {p.pid} (python") and " -c " in said and "\n" not in said
    assert waits.described([]) == "held by another process"


def test_a_wait_is_said_after_a_moment_again_later_and_ends_when_cancelled(holder):
    lock, p = holder
    now = [0.0]
    told: list[str] = []
    wait = waits.Waiting("the venv of toy · dsb-toy 1.3.0", lambda: waits.holders(lock), clock=lambda: now[0])
    with listening(told.append):
        for t in (0.5, 1.9):  # a short wait is not said
            now[0] = t
            wait.still()
        assert told == []
        now[0] = 2.0
        wait.still()
        now[0] = 20.0
        wait.still()
        now[0] = 32.0  # said again every 30 s
        wait.still()
    assert len(told) == 2 and told[0].startswith(f"waiting for the venv of toy · dsb-toy 1.3.0: held by pid {p.pid} (")
    assert told[0].endswith("(2 s so far; Ctrl-C stops)") and "(32 s so far" in told[1]
    stop = threading.Event()
    stop.set()
    with proc.cancellable(stop), pytest.raises(proc.Cancelled):
        wait.still()


def test_a_thread_waiting_for_a_lock_stops_once_cancelled(holder):
    lock, _ = holder
    stop, ended = threading.Event(), []

    def wait() -> None:
        try:
            with proc.cancellable(stop), waits.held(lock, "a lock held elsewhere"):
                ended.append("got it")
        except proc.Cancelled:
            ended.append("cancelled")

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.3)
    stop.set()
    t.join(timeout=10)
    assert not t.is_alive() and ended == ["cancelled"]


# ------------------------------------------------------------------ two real dsbisects, slow


class _Slow(http.server.SimpleHTTPRequestHandler):
    """Serves the index folder; a download of a file named in ``held`` waits until ``gate`` is set."""

    gate: threading.Event = threading.Event()
    held: tuple[str, ...] = ()

    def do_GET(self):
        if any(h in self.path for h in self.held):
            self.gate.wait(900)
        super().do_GET()

    def log_message(self, *args):
        pass


def _dsbisect(args: list[str], cwd: Path, cache: Path) -> subprocess.Popen:
    env = dict(os.environ, COLUMNS="200", DSBISECT_HEARTBEAT="0", UV_CACHE_DIR=str(cache / "uv"))
    return subprocess.Popen([sys.executable, "-m", "dsbisect", *args], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_dsbisect_waiting_for_another_ones_venv_says_so_and_stops_on_ctrl_c(tmp_path, simple_index):
    """A runs dsb-wait 1.1.0 and holds its venv's lock while its index serves the wheel slowly.
    B, sharing the cache, bisects 1.0.0..1.4.0: after the ends it tests 1.2.0 (whose wheel comes
    slowly too) while its look-ahead wants 1.1.0's venv, which A holds.  B says what it waits for
    and that A holds it, and SIGINT ends B at once (exit 130, "interrupted"), its look-ahead's wait
    included, although A still holds the lock (before: ~51 s, silent, until A let go)."""
    behaviour = {"1.0.0": "ok", "1.1.0": "ok", "1.2.0": "ok", "1.3.0": "raise", "1.4.0": "raise"}
    for version, does in behaviour.items():
        simple_index.add(toypkg.build_wheel(tmp_path / "w", version, does, dist="dsb-wait"))
    gate = threading.Event()
    handler = type("Handler", (_Slow,), {"gate": gate, "held": ("dsb_wait-1.1.0", "dsb_wait-1.2.0")})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(simple_index.root)))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/simple/"
    write_matrix(tmp_path, ["1.0.0"], package="dsb-wait", nproc=1)
    cache = tmp_path / "cache"
    common = ["--index-url", url, "--cache-dir", str(cache)]
    a = _dsbisect(["run", "--versions", "dsb-wait=1.1.0", "--nproc", "1", "--accelerator", "cpu", "--store",
                   str(tmp_path / "a"), *common, "--", "python", "toy_repro.py"], tmp_path, cache)
    b = None
    try:
        wait_until(lambda: list(cache.glob("locks/*.lock")) and waits.holders(next(cache.glob("locks/*.lock"))),
                   900, "A to hold the venv lock of dsb-wait 1.1.0")
        b = _dsbisect(["bisect", "dsb-wait", "1.0.0", "1.4.0", "--case", "toy", "--regress-on", "fail", "--jobs", "1",
                       "--store", str(tmp_path / "b"), *common], tmp_path, cache)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(b.stderr.readline, "")), daemon=True)
        reader.start()
        said = wait_until(lambda: next((ln for ln in lines if ln.startswith("waiting for the venv of")), None), 900,
                          "B to say it waits for the venv")
        assert "dsb-wait 1.1.0" in said and f"held by pid {a.pid} (" in said and "dsbisect run" in said, said
        before = "".join(lines[:lines.index(said)])
        assert "testing 1.2.0" in before and "dsb-wait 1.1.0: preparing venv" not in before  # the look-ahead waits
        b.send_signal(signal.SIGINT)
        code = b.wait(timeout=120)  # a guard only: the event asserted is the exit and its words
        reader.join(timeout=10)
        assert code == 130, "".join(lines)
        assert "interrupted" in lines[-1] and "Traceback" not in "".join(lines), "".join(lines)
        assert a.poll() is None  # A still builds: B stopped waiting, not because the lock was freed
    finally:
        gate.set()
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in (a, b):
            if p is not None:
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
        server.shutdown()
        server.server_close()


WAIT_FOR = """\
import fcntl, os, sys
claim = os.path.join(sys.argv[2], "ops-building", f"shm_comm.{os.getpid()}")
os.makedirs(os.path.dirname(claim), exist_ok=True)
open(claim, "w").close()
f = open(sys.argv[1], "a")
fcntl.flock(f, fcntl.LOCK_EX)  # as the hook's shared op build waits for a peer's
"""


def test_a_rank_waiting_for_another_runs_op_build_is_said_with_who(tmp_path, holder):
    """A rank of this run (its claim in the run folder) blocked on the shared build lock of an op
    that a process of another run holds: the phase watch says whose build it waits for."""
    from dsbisect.run.phases import PhaseWatch, waiting_elsewhere

    lock, other = holder
    run_dir = tmp_path / "run"
    rank = subprocess.Popen([sys.executable, "-c", WAIT_FOR, str(lock), str(run_dir)])
    try:
        found = wait_until(lambda: waiting_elsewhere(run_dir), 30, "the rank to block on the lock")
        assert found == {"shm_comm": [other.pid]}
        told: list[str] = []
        with PhaseWatch(tmp_path / "extensions", told.append, run_dir):
            wait_until(lambda: any(t.startswith("waiting for") for t in told), 30, "the watch to say it")
        said = next(t for t in told if t.startswith("waiting for"))
        assert said.startswith(f"waiting for DeepSpeed's shm_comm op, which another run is compiling: held by pid "
                               f"{other.pid} (python")
    finally:
        rank.kill()
        rank.wait()
