"""A collective-timeout line is evidence, not a verdict (issue 20, "wrong verdicts").

The pure table: what ``classify`` makes of runs that printed the words of a hang (NCCL's
watchdog, gloo's recv/send timeout, ProcessGroupGloo's "Timed out", a config dump, a warning,
``print(os.environ)``, a py-spy dump) and then passed, failed otherwise, or really died of a
timeout.  Then real runs (slow): one rank without a launcher where the launcher does not matter,
the toy 2-rank gloo package under the deepspeed launcher where it does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import toypkg
from conftest import offline, write_matrix
from dsbisect.core.model import Outcome
from dsbisect.verdict.outcome import classify, is_hang_text

TB = "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    step()\n"
GLOO = ("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
        "Timed out waiting 6000ms for recv operation to complete")
GLOO_SEND = ("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:136] "
             "Timed out waiting 6000ms for send operation to complete")
PG_GLOO = "RuntimeError: ProcessGroupGloo::barrier: Timed out after 6000 ms"
WATCHDOG = ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, "
            "NumelIn=4, NumelOut=4, Timeout(ms)=6000) ran for 6001 milliseconds before timing out.")
NCCL_ERR = f"torch.distributed.DistBackendError: {WATCHDOG}"
CONFIG = "config: nccl collective operation timeout = 1800 s (default)"
ENVIRON = ("environ({'PATH': '/usr/bin', 'NOTE': 'Watchdog caught collective operation timeout; "
           "NCCL watchdog thread terminated', 'RANK': '0'})")
WARNING = ("/x/torch/distributed/c10d.py:12: UserWarning: ProcessGroupGloo timed out once; "
           "collective operation timeout raised to 1800 s\n  warnings.warn(")
PYSPY = ("Thread 0x7F12 (idle): \"MainThread\"\n    wait (torch/distributed/distributed_c10d.py:3252)\n"
         "    all_reduce (torch/distributed/distributed_c10d.py:3252)")
VALUE = "ValueError: the loss went NaN"
STEPS = "\n".join(f"step {i} loss 0.{i}" for i in range(20))
DS_EXIT = "[ERROR] [launch.py:259:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=1'] exits with return code = {}"
ABORT = "Fatal Python error: Aborted\n\nThread 0x1 (most recent call first):\n  <no Python frame>"


def tb(error: str, prefix: str = "") -> str:
    return "\n".join(prefix + ln for ln in (TB + error).splitlines())


def caught(error: str) -> str:
    """What a script that caught the timeout and printed it (traceback.print_exc) leaves."""
    return tb(error) + "\nretrying the step"


H, F, P, S = Outcome.HANG, Outcome.FAIL, Outcome.PASS, Outcome.SKIP

# (name, exit code, timed out, why, {rank: log}, expected outcome, text the reason contains)
CASES = [
    # exit 0 is a pass, whatever was printed
    ("config dump, exit 0", 0, False, "", {0: f"{CONFIG}\nstep 1\ndone"}, P, ""),
    ("caught gloo recv timeout, retried, exit 0", 0, False, "", {0: caught(GLOO) + "\n" + STEPS + "\ndone"}, P, ""),
    ("caught timeout, last thing printed, exit 0", 0, False, "", {0: "step 1\n" + tb(GLOO)}, P, ""),
    ("watchdog words in print(os.environ), exit 0", 0, False, "", {0: ENVIRON, 1: "done"}, P, ""),
    ("warning with the words, exit 0", 0, False, "", {0: WARNING + "\ndone"}, P, ""),
    ("py-spy dump printed by the script, exit 0", 0, False, "", {0: PYSPY + "\ndone"}, P, ""),
    ("words then 125: untestable", 125, False, "", {0: CONFIG}, S, "exited 125"),
    # a rank that died of the timeout: a hang
    ("gloo recv timeout killed rank 0", 1, False, "", {0: "step 1\n" + tb(GLOO), 1: tb(GLOO)}, H, "Timed out waiting"),
    ("gloo send timeout killed rank 1", 1, False, "", {0: "fine", 1: tb(GLOO_SEND)}, H, "send operation"),
    ("ProcessGroupGloo timed out killed rank 0", 1, False, "", {0: tb(PG_GLOO)}, H, "ProcessGroupGloo::barrier"),
    ("NCCL DistBackendError killed rank 0", 1, False, "", {0: tb(NCCL_ERR), 1: ""}, H, "Watchdog caught"),
    ("raised from a timeout", 1, False, "",
     {0: tb(GLOO) + "\n\nThe above exception was the direct cause of the following exception:\n\n"
         + tb("RuntimeError: the step failed")}, H, "Timed out waiting"),
    ("NCCL watchdog, then the process aborted", 1, False, "", {0: f"{WATCHDOG}\n{ABORT}", 1: "fine"}, H,
     "Watchdog caught"),
    ("watchdog, aborted, no faulthandler (launcher's -6)", 1, False, "", {0: WATCHDOG, 1: "", -1: DS_EXIT.format(-6)},
     H, "Watchdog caught"),
    ("a timeout line and the run did not finish", None, True, "no exit within the 30 s wall timeout",
     {0: WATCHDOG}, H, "wall timeout"),
    # the words, and a rank that failed of something else: a failure, with its own reason
    ("config dump, then ValueError", 1, False, "", {0: f"{CONFIG}\n" + tb(VALUE)}, F, VALUE),
    ("caught timeout, went on, then ValueError", 1, False, "", {0: caught(GLOO) + f"\n{STEPS}\n" + tb(VALUE)}, F,
     VALUE),
    ("caught timeout, the handler failed", 1, False, "",
     {0: tb(GLOO) + "\n\nDuring handling of the above exception, another exception occurred:\n\n" + tb(VALUE)}, F,
     VALUE),
    ("caught timeout, went on for long, exit 1 with no traceback", 1, False, "",
     {0: caught(GLOO) + "\n" + STEPS + "\nbad checkpoint"}, F, "exit 1"),
    ("a passing rank's words while another fails", 1, False, "", {0: tb(VALUE, "[rank0]: "), 1: f"{CONFIG}\ndone"}, F,
     VALUE),
    ("a peer's caught timeout while rank 0 is SIGKILLed", 1, False, "", {0: "", 1: caught(GLOO), -1: DS_EXIT.format(-9)},
     F, "killed by SIGKILL"),
    ("a rank's timeout while another crashed", 1, False, "", {0: tb(GLOO), 1: tb(VALUE)}, F, VALUE),
    ("aborted with no timeout report", 1, False, "", {0: ABORT, 1: f"{CONFIG}"}, F, "killed by SIGABRT"),
    ("segfault beside a config dump", 1, False, "", {0: CONFIG, 1: "Fatal Python error: Segmentation fault"}, F,
     "SIGSEGV"),
    ("warning with the words, then exit 1", 1, False, "", {0: WARNING}, F, "exit 1"),
    ("words in os.environ, then exit 3", 3, False, "", {0: ENVIRON}, F, "exit 3"),
]


@pytest.mark.parametrize("name, code, timed_out, why, logs, outcome, reason", CASES, ids=[c[0] for c in CASES])
def test_the_words_are_evidence_not_a_verdict(name, code, timed_out, why, logs, outcome, reason):
    ranks = {r: text for r, text in logs.items() if r >= 0}
    tail = "\n".join([*ranks.values(), logs.get(-1, "")])
    first_line = next((ln for text in logs.values() for ln in text.splitlines() if is_hang_text(ln)), "")
    c = classify(code, timed_out, first_line, why, tail, ranks)
    assert c.outcome is outcome, c
    assert reason in c.reason, c


@pytest.mark.parametrize("combined, outcome, reason", [
    (tb(GLOO, "[rank0]: ") + "\n" + tb(GLOO, "[rank1]: "), H, "Timed out waiting"),
    (tb(GLOO, "[rank0]: ") + "\n" + tb(VALUE, "[rank1]: "), F, VALUE),
    (f"[rank1]: {CONFIG}\n" + tb(VALUE, "[rank0]: "), F, VALUE),
])
def test_one_combined_log_is_read_rank_by_rank(combined, outcome, reason):
    """A launcher without per-rank logs (torchrun --tee into one log): the [rankN]: prefixes say whose."""
    c = classify(1, False, "x", "", combined, {})
    assert c.outcome is outcome and reason in c.reason, c


@pytest.mark.parametrize("tag", ["[default{r}]:[rank{r}]: ", "[default{r}]:", "[trainer{r}]:[rank{r}]: ",
                                 "[worker{r}]:"])
@pytest.mark.parametrize("second, outcome, reason", [(GLOO, H, "Timed out waiting"), (VALUE, F, VALUE)])
def test_torchrun_tee_tags_before_torchs_own_are_read_too(tag, second, outcome, reason):
    """torchrun --tee puts its role and local rank before each line ("[default1]:"), before
    torch's own "[rank1]: " where torch adds one: a deadlock both ranks died of is a hang (it
    was a FAIL, "no rank died of a timeout", when only the launcher's log was at hand)."""
    combined = tb(GLOO, tag.format(r=0)) + "\n" + tb(second, tag.format(r=1))
    c = classify(1, False, "x", "", combined, {})
    assert c.outcome is outcome and reason in c.reason, c


def test_a_tagged_lines_rank_is_torchs_own_where_both_say():
    from dsbisect.verdict.outcome import rank_tagged

    assert rank_tagged("[default1]:[rank3]: RuntimeError: x") == (3, "RuntimeError: x")
    assert rank_tagged("[default2]:  File \"x.py\"") == (2, " File \"x.py\"")
    assert rank_tagged("[rank0]:   File \"x.py\"") == (0, "  File \"x.py\"")
    for untagged in ("[W1202 06:19:43.63 Utils.hpp:137] Warning", "[2024-05-10 14:06:47,879] [INFO] x", "step 1"):
        assert rank_tagged(untagged) == (None, untagged)


def test_torchruns_root_cause_rank_decides():
    root = "Root Cause (first observed failure):\n[0]:\n  rank : 1 (local_rank: 1)\n  exitcode : 1 (pid: 9)"
    ranks = {0: tb(GLOO), 1: tb(VALUE)}
    assert classify(1, False, "x", "", root + "\n" + ranks[0], ranks).outcome is F
    ranks = {0: tb(VALUE), 1: tb(GLOO)}
    c = classify(1, False, "x", "", root, ranks)
    assert c.outcome is H and "Timed out" in c.reason


def test_the_words_themselves_are_recognised():
    for line in (WATCHDOG, GLOO, GLOO_SEND, PG_GLOO, CONFIG, "NCCL watchdog thread terminated with exception"):
        assert is_hang_text(line), line
    assert not is_hang_text("step 3 loss 0.2") and not is_hang_text(VALUE)


# ------------------------------------------------------------------ real runs

def _launch(tmp_path: Path, code: str, **kw):
    """One real rank (RANK=0), under launch() with the runner's hooks, as a 1-rank run is."""
    from dsbisect.forensics.evidence import Capture
    from dsbisect.launch.supervise import LaunchSpec, launch
    from dsbisect.core.rundir import RunDir

    run = RunDir(tmp_path / "run")
    run.ranks.mkdir(parents=True)
    script = tmp_path / "job.py"
    script.write_text(code)
    env = dict(os.environ, RANK="0", PYTHONUNBUFFERED="1")
    argv = ("/bin/sh", "-c", 'exec "$@" >>"$0" 2>&1', str(run.rank_log(0)), sys.executable, str(script))
    spec = LaunchSpec(argv=argv, env=env, cwd=tmp_path, run=run, **({"wall_timeout": 600.0} | kw))  # a backstop
    capture = Capture(run)
    res = launch(spec, on_hang=capture, on_quiet=capture, on_idle=capture.stuck)
    return res, classify(res.exit_code, res.timed_out, res.hang_line, res.why, *run.tails())


@pytest.mark.slow
def test_a_run_that_prints_the_words_and_goes_on_is_not_cut_short(tmp_path):
    """The words, then 6 s of steps (longer than the grace), then exit 0: a pass, run to its end."""
    code = (f"import time\nprint({WATCHDOG!r}, flush=True)\nprint({CONFIG!r}, flush=True)\n"
            "for i in range(12):\n    time.sleep(0.5)\n    print('step', i, flush=True)\n")
    res, c = _launch(tmp_path, code)
    assert res.exit_code == 0 and not res.timed_out and c.outcome is P, (res, c)
    assert res.seconds > 6 and "step 11" in (tmp_path / "run" / "ranks" / "rank0.log").read_text()


@pytest.mark.slow
def test_the_words_then_a_silent_busy_rank_is_not_a_hang(tmp_path):
    """The words, then 8 s without output while the rank computes in Python (its stack moves):
    watched on, and it passes.  The stack's depth changes with every call (0..96 frames of a()), so
    two looks at it see different stacks; a loop of a() and b() alone was seen twice in a() by
    chance, once in a full suite, and judged not to move."""
    code = (f"import time\nprint({CONFIG!r}, flush=True)\n"
            "def a(n, d):\n    return a(n, d - 1) if d else sum(i * i for i in range(n))\n"
            "t, k = time.monotonic(), 0\nwhile time.monotonic() - t < 8:\n    a(20000, k % 97); k += 1\n"
            "print('done', flush=True)\n")
    res, c = _launch(tmp_path, code)
    assert res.exit_code == 0 and c.outcome is P, (res, c)


@pytest.mark.slow
def test_the_words_then_silence_is_no_hang_before_a_limit(tmp_path):
    """NCCL's watchdog words, then a rank asleep outside any collective: the words decide nothing
    (issue 36); the idle limit, from the ranks' state (no CPU, a still stack), ends it, with the
    words kept as evidence.  (A real NCCL wait is proven by the early verdict's rounds.)"""
    code = f"import time\nprint({WATCHDOG!r}, flush=True)\ntime.sleep(600)\n"
    res, c = _launch(tmp_path, code, idle_timeout=3.0, quiet_after=1.0)
    assert res.exit_code is None and c.outcome is H and "no output and no rank's stack moved" in c.reason, (res, c)
    assert res.hang_line.startswith("[Rank 0] Watchdog caught"), res


def _run(tmp_path: Path, house: Path, cache_dir: Path, version: str, *extra: str) -> dict:
    cmd = [sys.executable, "-m", "dsbisect", "run", "matrix.yaml", *offline(house, cache_dir),
           "--format", "json", *extra]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    (run,) = json.loads(out.stdout)["runs"]
    return run


WORDS_STEPS = {
    # rank 0 prints the config words, and catches a real gloo timeout (rank 1 is late) and retries
    "words": """
def step(dist):
    import datetime, time, torch
    print("config: nccl collective operation timeout = 1800 s (default)", flush=True)
    t = torch.ones(4)
    pg = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=2))
    if dist.get_rank() == 1:
        time.sleep(4)  # never in pg's all_reduce: rank 0's times out, then both meet in the next one
    else:
        try:
            dist.all_reduce(torch.ones(1), group=pg)
        except RuntimeError as e:
            print(f"caught: {e}; retrying", flush=True)
    dist.all_reduce(t)
    assert float(t[0]) == 2, t
    print("trained on after the timeout", flush=True)
""",
    # the words, then a failure of another kind
    "wordsraise": """
def step(dist):
    print("Watchdog caught collective operation timeout (a quoted line, not a timeout)", flush=True)
    if dist.get_rank() == 0:
        raise ValueError("dsb_toy: the loss went NaN")
""",
}


@pytest.fixture(scope="module")
def words_house(tmp_path_factory):
    toypkg.STEP.update(WORDS_STEPS)
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("words-wheels"),
                                   {"1.0.0": "words", "1.1.0": "wordsraise", "1.2.0": "skip"}, dist="dsb-words")


@pytest.mark.slow
@pytest.mark.parametrize("version, outcome, reason", [
    ("1.0.0", "pass", ""),
    ("1.1.0", "fail", "ValueError: dsb_toy: the loss went NaN"),
])
def test_real_ranks_that_print_the_words(tmp_path, cache_dir, words_house, version, outcome, reason):
    write_matrix(tmp_path, [version], package="dsb-words", collective_timeout=30, timeout=120)
    run = _run(tmp_path, words_house, cache_dir, version)
    assert run["outcome"] == outcome and reason in run["reason"], run
    log = "\n".join(p.read_text() for p in Path(run["run_dir"]).rglob("*.log"))
    assert "collective operation timeout" in log
    if version == "1.0.0":
        assert "caught:" in log and "Timed out" in log, log[-2000:]
        assert any("did not decide" in n for n in run["evidence"]["notes"]), run["evidence"]["notes"]


@pytest.mark.slow
def test_a_real_missed_collective_is_still_a_hang(toy_timeout_hang):
    """The toy's missed all_reduce with the early proof off: gloo's timeout (6 s) kills the
    ranks and the run is a HANG with the timeout as reason and its signature (how soon after is
    printed, not asserted).
    (The session's run of it, ``toy_timeout_hang``, which test_regression reads too.)"""
    run = toy_timeout_hang.run
    assert run["outcome"] == "hang" and "Timed out waiting 6000ms" in run["reason"], run
    assert run["signature"], run
    ended = Path(run["run_dir"], "run.json").stat().st_mtime
    after = ended - toypkg.deadlock_time(Path(run["run_dir"]))
    print(f"hang recorded {after:.1f} s after the missed collective (gloo timeout 6 s)")
    assert after > 6, after  # not before gloo's timeout: the timeout ended it
