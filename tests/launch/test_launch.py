"""launch(): deadlines, hang lines and idle limits end a run, and no process survives it.

The jobs are real processes; where a test is about a limit of seconds, the watch loop runs on a
driven clock (``driven.Driven``): the test waits for what the job did, then moves the clock past
the limit. Tests of what real processes do in real time (a child that works, a stack that moves)
keep the real clock, with limits far beyond what they need, and assert nothing on how long."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from conftest import live_pids, wait_until
from driven import Driven
from dsbisect.launch.supervise import LaunchSpec, launch
from dsbisect.core.rundir import RunDir

pytestmark = pytest.mark.slow  # real processes

# A "launcher" that starts a rank (RANK set), which starts a stubborn grandchild that
# ignores SIGTERM and leaves the process group with setsid: the worst case.  The rank
# itself ignores SIGINT and SIGTERM.
RANK = """\
import os, signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"], start_new_session=True)
open(os.environ["PIDS"], "a").write(f"{os.getpid()} {child.pid}\\n")
print("rank ready", flush=True)
time.sleep(600)
"""
STUBBORN = """\
import os, subprocess, sys
rank = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "rank.py")], env=dict(os.environ, RANK="0"))
open(os.environ["PIDS"], "a").write(f"{os.getpid()}\\n")
rank.wait()
"""


def _spec(tmp_path: Path, code: str, **kw) -> LaunchSpec:
    script = tmp_path / "job.py"
    script.write_text(code)
    (tmp_path / "rank.py").write_text(RANK)
    env = dict(os.environ, PIDS=str(tmp_path / "pids"), PYTHONUNBUFFERED="1")
    defaults = dict(wall_timeout=1e6)  # no test ends at the wall unless it says so
    return LaunchSpec(argv=(sys.executable, str(script)), env=env, cwd=tmp_path, run=RunDir(tmp_path / "run"),
                      **(defaults | kw))


def _pids(tmp_path: Path) -> list[int]:
    return [int(x) for x in (tmp_path / "pids").read_text().split()]


def _started(tmp_path: Path, n: int) -> bool:
    path = tmp_path / "pids"
    return path.is_file() and len(path.read_text().split()) >= n


def _logged(tmp_path: Path, text: str) -> bool:
    log = tmp_path / "run" / "launcher.log"
    return log.is_file() and text in log.read_text()


def test_wall_timeout_kills_the_whole_tree(tmp_path):
    taken = []
    run = Driven(_spec(tmp_path, STUBBORN, wall_timeout=4.0), on_hang=lambda procs, why: taken.append((why, len(procs))))
    run.until(lambda: _started(tmp_path, 3), "the launcher, its rank and the rank's child to start")
    run.advance(3.9)
    assert run.thread.is_alive()  # not yet at the deadline
    run.advance(0.35)  # past it: the loop's next look ends the run
    res = run.finish()
    assert res.timed_out and res.exit_code is None and "wall timeout" in res.why
    assert res.seconds == 4.25, res  # on the driven clock: the first look past the deadline
    pids = _pids(tmp_path)
    assert len(pids) == 3
    assert res.survivors == ()
    assert not live_pids(pids)
    assert taken == [("deadline", 1)]  # the hook saw exactly the one rank, before teardown


def test_a_hang_line_then_a_still_rank_ends_only_at_a_limit(tmp_path):
    """The words decide nothing (issue 36): NCCL's watchdog line, then a rank that sleeps (not in
    a collective: nothing proves a deadlock) runs on to its wall timeout; the line is kept as
    evidence.  Before, the line ended the run as a hang after the grace."""
    code = (
        "import time\nprint('step 1', flush=True)\n"
        "print('[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, "
        "NumelIn=4, NumelOut=4, Timeout(ms)=5000) ran for 5001 milliseconds before timing out.', flush=True)\n"
        "time.sleep(600)\n"
    )
    run = Driven(_spec(tmp_path, code, wall_timeout=8.0))
    run.until(lambda: _logged(tmp_path, "Watchdog caught"), "the job to print the watchdog's line")
    run.advance(7.5)
    assert run.thread.is_alive()  # the words ended nothing
    run.advance(1)
    res = run.finish()
    assert res.hang_line.startswith("[Rank 1] Watchdog caught")
    assert res.timed_out and "wall timeout" in res.why, res
    assert res.hang_after in (0.0, 0.25) and res.seconds == 8.25, res  # the line seen at a first look


def test_idle_limit(tmp_path):
    code = "import time\nprint('started', flush=True)\ntime.sleep(600)\n"
    run = Driven(_spec(tmp_path, code, idle_timeout=2.0))
    run.until(lambda: _logged(tmp_path, "started"), "the job's first line")
    run.advance(2)  # the line was seen at the first or second look (0 or 0.25 s): not yet 2 s of quiet
    assert run.thread.is_alive()
    run.advance(0.5)
    res = run.finish()
    assert res.timed_out and "no output and no rank's stack moved for 2 s" in res.why, res
    assert 2.0 < res.seconds <= 2.5, res


COMPILING = """\
import os, subprocess, sys
# the rank waits, silent, on a child that works (a JIT build's compiler), then goes on and ends
burn = "import time\\nt = time.time()\\nwhile time.time() - t < 7: sum(range(10000))\\n"
rank = "import subprocess, sys\\nsubprocess.check_call([sys.executable, '-c', %r])\\nprint('built', flush=True)\\n" % burn
print('started', flush=True)
sys.exit(subprocess.call([sys.executable, "-c", rank], env=dict(os.environ, RANK="0")))
"""


def test_a_rank_waiting_on_a_child_that_works_is_not_idle(tmp_path):
    """A silent rank whose stack stays in subprocess.wait while its child burns CPU (DeepSpeed's
    JIT op build on a loaded machine: the zoo's ds_decoupled_ckpt_dead_writer was called a hang
    at its fixed end by the idle limit) is busy, not stuck: the run ends on its own."""
    res = launch(_spec(tmp_path, COMPILING, idle_timeout=2.0, wall_timeout=600.0))  # the real clock
    assert res.exit_code == 0 and not res.timed_out, res
    assert "built" in (tmp_path / "run" / "launcher.log").read_text()


POLLING_CHILD = """\
import os, subprocess, sys
# the rank waits forever on an Event-like sleep; its child is idle but wakes often (a helper process)
# (it spins 0.75 ms of every 50: at most 1.5 % of a core, over 12 s more than 0.1 CPU-s)
poll = "import time\\nwhile True:\\n    t = time.perf_counter()\\n    while time.perf_counter() - t < 0.00075: pass\\n    time.sleep(0.049)\\n"
rank = "import subprocess, sys, time\\nsubprocess.Popen([sys.executable, '-c', %r])\\ntime.sleep(600)\\n" % poll
print('started', flush=True)
sys.exit(subprocess.call([sys.executable, "-c", rank], env=dict(os.environ, RANK="0")))
"""


def test_a_rank_whose_child_only_polls_is_still_idle(tmp_path):
    """The other side: a child that wakes every 50 ms and does nothing (DeepSpeed's decoupled
    checkpoint engine's peers, multiprocessing's helpers) is no work; the idle limit still ends
    the hang (on the H200 host the zoo's dead-writer hang went unseen with an absolute threshold)."""
    res = launch(_spec(tmp_path, POLLING_CHILD, idle_timeout=12.0, wall_timeout=600.0))  # the real clock
    assert res.timed_out and "no output and no rank's stack moved" in res.why, res  # the idle limit, not the wall


def test_normal_exit_code_and_log(tmp_path):
    res = launch(_spec(tmp_path, "import sys\nprint('hello')\nsys.exit(3)\n"))
    assert res.exit_code == 3 and not res.timed_out and res.hang_line == ""
    assert "hello" in (tmp_path / "run" / "launcher.log").read_text()


# A job that prints a line, then waits silently until the test creates ``go``.
UNTIL_GO = "import os, time\nprint('x', flush=True)\nwhile not os.path.exists('go'): time.sleep(0.05)\n"


def test_quiet_hook_fires_once_while_silent(tmp_path):
    calls = []
    run = Driven(_spec(tmp_path, UNTIL_GO, quiet_after=1.0), on_quiet=lambda procs, why: calls.append(why))
    run.until(lambda: _logged(tmp_path, "x"), "the job's first line")
    run.advance(1)  # seen at the first or second look: quiet for 1 s at most
    assert calls == []
    run.advance(0.5)
    run.until(lambda: calls, "the quiet hook")
    run.advance(5)  # still quiet: once
    (tmp_path / "go").touch()
    res = run.finish()
    assert res.exit_code == 0 and calls == ["quiet"]


def test_a_slow_quiet_snapshot_does_not_hold_up_the_end(tmp_path):
    """The quiet snapshot runs beside the watch loop: a job that ends meanwhile is seen at once,
    and the launch returns while the snapshot is still under way (taken in line, the job's end
    would wait for it)."""
    import threading

    calls, release, finished = [], threading.Event(), threading.Event()

    def slow(procs, why):
        calls.append((why, len(procs)))
        release.wait(60)  # a snapshot that lasts until the test says
        finished.set()

    try:
        run = Driven(_spec(tmp_path, UNTIL_GO, quiet_after=0.5), on_quiet=slow)
        run.until(lambda: _logged(tmp_path, "x"), "the job's first line")
        run.advance(1)
        run.until(lambda: calls, "the quiet snapshot to begin")
        (tmp_path / "go").touch()
        res = run.finish()
        assert res.exit_code == 0 and [why for why, _ in calls] == ["quiet"]
        assert not finished.is_set()  # the end was not held up by the snapshot
    finally:
        release.set()
    assert finished.wait(10)


def test_interrupt_stops_the_tree(tmp_path):
    import signal
    import threading

    def interrupt():  # once the whole tree is up (an event, not a delay)
        wait_until(lambda: _started(tmp_path, 3), 180, "the tree to start")
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        launch(_spec(tmp_path, STUBBORN))
    wait_until(lambda: not live_pids(_pids(tmp_path)), 60, "every process of the tree to be gone")


# A silent rank that goes from phase0() to phase1() to phase2() when the test says (files ``p1``,
# ``p2``, ``p3``), saying where it is (``in0``, ``in1``, ``in2``); the launcher writes its pid.
SILENT_BUT_BUSY = """\
import os, subprocess, sys
open("launcher.pid", "w").write(str(os.getpid()))
code = (
    "import os, time\\n"
    "def wait(name):\\n    while not os.path.exists(name): time.sleep(0.05)\\n"
    + "".join(f"def phase{i}():\\n    open('in{i}', 'w').close()\\n    wait('p{i + 1}')\\n" for i in range(3))
    + "phase0(); phase1(); phase2()\\n")
sys.exit(subprocess.call([sys.executable, "-c", code], env=dict(os.environ, RANK="0")))
"""


def test_silent_rank_whose_stack_moves_is_not_a_hang(tmp_path):
    """Idle limit 2.5 s, but the rank moves from phase0() to phase1() to phase2(): py-spy
    sees the stacks change at each idle check, so the run ends normally."""
    from dsbisect.forensics.evidence import Capture

    capture, quiet, checks = Capture(RunDir(tmp_path / "run")), [], []

    def snapshot(procs, why):
        capture(procs, why)
        quiet.append(why)

    def stuck(procs):
        checks.append(capture.stuck(procs))
        return checks[-1]

    run = Driven(_spec(tmp_path, SILENT_BUT_BUSY, idle_timeout=2.5, quiet_after=1.0),
                 on_quiet=snapshot, on_idle=stuck)
    run.until(lambda: (tmp_path / "in0").exists(), "the rank's phase0()")
    for n in (1, 2):
        run.advance(1.25)  # quiet for more than 1 s since the start or the last idle check: a snapshot
        run.until(lambda: len(quiet) == n, "the quiet snapshot")
        (tmp_path / f"p{n}").touch()  # the rank moves on after the snapshot...
        run.until(lambda: (tmp_path / f"in{n}").exists(), f"the rank's phase{n}()")
        run.advance(1.5)  # ...and before the idle check (2.75 s after the last one): its stack moved
        assert run.thread.is_alive() and checks == [False] * n, (checks, capture.notes)
        assert [f.function for f in capture.stacks["0"]][:2] == ["wait", f"phase{n}"]
    (tmp_path / "p3").touch()
    pid = int((tmp_path / "launcher.pid").read_text())
    run.until(lambda: not live_pids([pid]), "the job to end")
    res = run.finish()
    assert res.exit_code == 0 and not res.timed_out, res


def test_silent_rank_whose_stack_stays_is_a_hang(tmp_path):
    from dsbisect.forensics.evidence import Capture

    capture = Capture(RunDir(tmp_path / "run"))  # STUBBORN's rank sleeps in one place forever
    run = Driven(_spec(tmp_path, STUBBORN, idle_timeout=2.5, quiet_after=1.0), on_quiet=capture,
                 on_idle=capture.stuck)
    run.until(lambda: _started(tmp_path, 3), "the tree to start")
    run.advance(1.5)
    run.until(lambda: capture.stacks, "the quiet snapshot's stacks")
    res = run.finish()  # the next idle check finds the same stack
    assert res.timed_out and "no rank's stack moved" in res.why
    assert capture.stacks and all(frames for frames in capture.stacks.values())


WORDS_THEN_ANOTHER_ERROR = """\
import sys, time
print("Watchdog caught collective operation timeout (a quoted line, not a timeout)", flush=True)
print("Traceback (most recent call last):", flush=True)
print('  File "train.py", line 3, in <module>', flush=True)
print("[rank0]: ValueError: the loss went NaN", flush=True)
time.sleep(6)  # a slow exit (a loaded machine's teardown): longer than the grace
sys.exit(1)
"""


def test_the_words_then_another_error_is_no_hang_however_slow_the_exit(tmp_path):
    """A rank that printed the timeout words and then died of another exception is not waiting:
    on a loaded machine its exit took longer than the 5 s grace and the run was called a HANG."""
    res = launch(_spec(tmp_path, WORDS_THEN_ANOTHER_ERROR))
    assert not res.timed_out and res.exit_code == 1, res
    assert res.hang_line  # the words are still evidence for the verdict to weigh


# The rank spins in one line, silently, for ever (NCCL's waits spin too); it writes its pid.
SPINNING = """\
import os, subprocess, sys
spin = "import os\\nopen('rank.pid', 'w').write(str(os.getpid()))\\nprint('spinning', flush=True)\\nwhile True: pass\\n"
sys.exit(subprocess.call([sys.executable, "-c", spin], env=dict(os.environ, RANK="0")))
"""


@pytest.mark.parametrize("parked", [False, True], ids=["computing", "parked-in-a-collective"])
def test_a_silent_rank_that_uses_cpu_is_idle_only_when_parked_in_a_wait(tmp_path, parked):
    """Past the idle limit, with a still stack (``on_idle`` says so), a rank that used CPU since
    the output last grew is busy, unless its stack waits inside torch.distributed
    (``on_parked``): then the CPU is a spinning wait and the run is a hang. On the driven
    clock: the test lets the rank use half a CPU-second first, then moves the clock past the
    idle limit (2 s), and the wall timeout (2.75 s) comes before a second idle check."""
    import psutil

    run = Driven(_spec(tmp_path, SPINNING, idle_timeout=2.0, wall_timeout=2.75),
                 on_idle=lambda procs: True, on_parked=lambda procs: parked)
    run.until(lambda: _logged(tmp_path, "spinning"), "the rank's line")
    rank = psutil.Process(int((tmp_path / "rank.pid").read_text()))
    run.until(lambda: sum(rank.cpu_times()[:2]) >= 0.5, "the rank to use half a CPU-second")
    res = run.finish()
    if parked:
        assert "no output and no rank's stack moved for 2 s" in res.why, res
        assert 2.0 < res.seconds <= 2.5, res
    else:
        assert "wall timeout" in res.why and res.seconds == 3.0, res
    assert res.survivors == ()
