"""classify() and verdict(): pure tables."""

from __future__ import annotations

import pytest

from dsbisect.core.model import Outcome, RegressOn, Verdict
from dsbisect.verdict.outcome import classify, combine, first_error, traceback_errors, verdict

GLOO_TIMEOUT = (
    "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
    "Timed out waiting 6000ms for recv operation to complete"
)


@pytest.mark.parametrize(
    "exit_code, timed_out, hang_line, why, tail, outcome, reason",
    [
        (0, False, "", "", "", Outcome.PASS, ""),
        (1, False, "", "", "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: boom", Outcome.FAIL, "ValueError: boom"),
        # a rank died of the timeout (its last traceback): a hang; the line alone is no cause of death
        (1, False, GLOO_TIMEOUT, "", "[rank0]: Traceback (most recent call last):\n[rank0]:   File \"x.py\", line 1\n"
         + GLOO_TIMEOUT, Outcome.HANG, "RuntimeError: [../third_party/gloo"),
        (1, False, GLOO_TIMEOUT, "", "", Outcome.FAIL, "exit 1"),
        (None, True, "", "no exit within the 30 s wall timeout", "", Outcome.HANG, "wall timeout"),
        (125, False, "", "", "", Outcome.SKIP, "exited 125"),
        (-9, False, "", "", "", Outcome.FAIL, "signal SIGKILL"),
        (250, False, "", "", "", Outcome.FAIL, "exit 250"),
        (3, False, "", "", "nothing useful", Outcome.FAIL, "exit 3"),
    ],
)
def test_classify(exit_code, timed_out, hang_line, why, tail, outcome, reason):
    c = classify(exit_code, timed_out, hang_line, why, tail)
    assert c.outcome is outcome
    assert reason in c.reason


def test_first_error_skips_rank_prefix_and_warnings():
    tail = (
        "UserWarning: something\n"
        "[rank1]: Traceback (most recent call last):\n"
        "[rank1]:   File \"/x/toy.py\", line 9, in <module>\n"
        "[rank1]:     dsb_toy.step(dist)\n"
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: ... unhandled cuda error\n"
    )
    assert first_error(tail).startswith("torch.distributed.DistBackendError: NCCL error")


H, F, P, S = Outcome.HANG, Outcome.FAIL, Outcome.PASS, Outcome.SKIP
G, B, K = Verdict.GOOD, Verdict.BAD, Verdict.SKIP


@pytest.mark.parametrize(
    "regress, expected",
    [
        (RegressOn.HANG, {H: B, F: K, P: G, S: K}),
        (RegressOn.FAIL, {H: K, F: B, P: G, S: K}),
        (RegressOn.ANY, {H: B, F: B, P: G, S: K}),
    ],
)
def test_verdict_mapping(regress, expected):
    assert {o: verdict(o, regress) for o in expected} == expected


def test_signature_narrows_bad_to_the_same_hang():
    sig = "rank 0 in _ALLGATHER_BASE numel 32 at SeqNum 118"
    assert verdict(H, RegressOn.HANG, sig, wanted="_ALLGATHER_BASE") is B
    assert verdict(H, RegressOn.HANG, "rank 0 in REDUCE numel 2", wanted="_ALLGATHER_BASE") is K
    assert verdict(F, RegressOn.ANY, "CUDA out of memory", wanted="_allgather_base") is K


@pytest.mark.parametrize(
    "runs, expected",
    [([G, G, G], G), ([G, B], B), ([B], B), ([K], K), ([G, K], K), ([], K), ([K, B], B)],
)
def test_combine_repeats(runs, expected):
    assert combine(runs) is expected


# What the deepspeed launcher printed when rank 1 segfaulted and rank 0 ended on the closed
# connection within the same second (CI, 2026-12-01): the code is rank 0's, the command line
# its last rank's, whichever rank ended first.
_DS_LINE = ("[ERROR] [launch.py:259:sigkill_handler] ['python', '-u', 'toy.py', '--local_rank=1'] "
            "exits with return code = {code}")
_PEER = ("[rank0]: Traceback (most recent call last):\n[rank0]:   File \"toy.py\", line 3\n"
         "[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:51429.")
_SEGV = "rank 1 of 2: dsb_toy 1.2.0\nFatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):"


@pytest.mark.parametrize("code", [1, -11])
def test_a_rank_killed_by_a_signal_is_named_whichever_rank_the_launcher_saw_end_first(code):
    ranks = {0: _PEER, 1: _SEGV}
    tail = "\n".join([_PEER, _SEGV, _DS_LINE.format(code=code)])
    c = classify(1, False, "", "", tail, ranks)
    assert c.outcome is Outcome.FAIL
    assert c.reason == "rank 1 killed by SIGSEGV (Fatal Python error: Segmentation fault)"


def test_the_deepspeed_launchers_command_line_does_not_name_the_rank():
    # rank 0 was OOM-killed (no faulthandler line); the launcher's line names --local_rank=1
    c = classify(1, False, "", "", _DS_LINE.format(code=-9), {0: "", 1: ""})
    assert c.reason == "a rank killed by SIGKILL"


def test_torchruns_root_cause_names_the_rank():
    tail = "Root Cause (first observed failure):\n[0]:\n  time : x\n  rank : 3 (local_rank: 3)\n  exitcode : -9 (pid: 1)"
    assert classify(1, False, "", "", tail).reason == "rank 3 killed by SIGKILL"


def test_two_ranks_killed_by_the_same_signal_are_both_named():
    abort = "Fatal Python error: Aborted\n"
    c = classify(1, False, "", "", "", {0: abort, 1: "fine", 2: abort})
    assert c.reason == "ranks 0, 2 killed by SIGABRT (Fatal Python error: Aborted)"


def test_tails_reads_each_launchers_rank_log_names(tmp_path):
    from dsbisect.core.rundir import RunDir

    run = RunDir(tmp_path)
    files = {"rank0.log": "direct 0", "20261201054811_rank1.log": "deepspeed 1",
             "abc_x/attempt_0/2/stdout.log": "torchrun out 2", "abc_x/attempt_0/2/stderr.log": "torchrun err 2",
             "other.log": "no rank"}
    for name, text in files.items():
        (run.ranks / name).parent.mkdir(parents=True, exist_ok=True)
        (run.ranks / name).write_text(text + "\n")
    _, tails = run.tails()
    assert tails == {0: "direct 0", 1: "deepspeed 1", 2: "torchrun err 2\ntorchrun out 2"}


def test_the_error_that_caused_a_failure_is_named_not_a_peers_reaction():
    value = ("[rank1]: Traceback (most recent call last):\n[rank1]:   File \"toy.py\", line 3\n"
             "[rank1]: ValueError: the loss went NaN")
    ranks = {0: _PEER, 1: value}
    assert classify(1, False, "", "", "\n".join([_PEER, value]), ranks).reason == "ValueError: the loss went NaN"
    # one combined log (a launcher without per-rank logs): the same
    assert classify(1, False, "", "", "\n".join([_PEER, value]), {}).reason == "ValueError: the loss went NaN"
    # only reactions: the first one is still named
    assert classify(1, False, "", "", _PEER, {0: _PEER}).reason.startswith("RuntimeError: [gloo/transport/tcp/pair.cc:553]")


# Reasons that read: the message of an exception, whatever its first lines hold.
_TB = "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    step()\n"


@pytest.mark.parametrize("tail, reason", [
    (_TB + "RuntimeError: \nOutput 0 of SplitBackward0 is a view\nand more\n",
     "RuntimeError: Output 0 of SplitBackward0 is a view"),
    (_TB + "RuntimeError: \n   \n\t\n  Error(s) in loading state_dict for Net:\n\tMissing key(s)\n",
     "RuntimeError: Error(s) in loading state_dict for Net:"),
    ("[rank0]: " + _TB.replace("\n  ", "\n[rank0]:   ") + "[rank0]: RuntimeError: \n[rank0]: tied weights differ\n",
     "RuntimeError: tied weights differ"),
    (_TB + "ValueError: plain\n", "ValueError: plain"),
    (_TB + "KeyError: 'weight'\n\nThe above exception was the direct cause of the following exception:\n\n"
     + _TB + "RuntimeError: could not load the checkpoint\n",
     "RuntimeError: could not load the checkpoint (from KeyError: 'weight')"),
    (_TB + "KeyError: 'weight'\n\nDuring handling of the above exception, another exception occurred:\n\n"
     + _TB + "AttributeError: 'NoneType' object has no attribute 'load'\n",
     "AttributeError: 'NoneType' object has no attribute 'load' (from KeyError: 'weight')"),
    (_TB + "ValueError: inner\n\nThe above exception was the direct cause of the following exception:\n\n"
     + _TB + "RuntimeError\n", "RuntimeError (from ValueError: inner)"),
    (_TB + "ValueError: one\n" + _TB + "ValueError: two\n", "ValueError: one"),
])
def test_a_reason_reads_the_first_non_empty_line_and_a_chain_is_one_error(tail, reason):
    assert first_error(tail) == reason
    assert classify(1, False, "", "", tail).reason == reason


def test_an_error_line_outside_a_traceback_whose_message_begins_with_a_newline():
    assert first_error("noise\nRuntimeError: \n\n  the real message\n") == "RuntimeError: the real message"


@pytest.mark.parametrize(("text", "first"), [
    ("srun: error: localhost: task 1: Exited with exit code 3\nsrun: error: localhost: task 0: Exited with exit code 143",
     (1, 3)),
    ("srun: launch/slurm: _step_signal: Terminating StepId=11.0\nsrun: error: n2: task 3: Killed", (3, -9)),
    ("srun: error: n1: tasks 0-1: Segmentation fault (core dumped)", (0, -11)),
    ("srun: error: n1: task 0: Aborted", (0, -6)),
    ("srun: error: Unable to allocate resources: Invalid partition name specified", None),
    ("a rank printed srun: error: x: task 1: Exited with exit code 2 mid-line", None),  # only srun's own lines
])
def test_first_rank_exit_reads_sruns_task_lines(text, first):
    from dsbisect.verdict.outcome import first_rank_exit

    assert first_rank_exit(text) == first


def test_a_first_failure_that_is_a_reaction_to_a_peer_does_not_decide_the_hang():
    """torchrun names the first rank to exit; where the rank that timed out (rank 0, gloo) is the
    slower to exit, the first named is its peer's reaction ("Connection closed by peer"), and the
    toy deadlock was recorded as a FAIL ('no rank died of a timeout')."""
    from dsbisect.verdict.outcome import died_of_timeout

    r0 = ("[default0]:[rank0]: Traceback (most recent call last):\n"
          "[default0]:[rank0]:   File \"/x/toy_repro.py\", line 12, in <module>\n"
          "[default0]:[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] "
          "Timed out waiting 3000ms for recv operation to complete\n")
    reaction = ("[default1]:[rank1]: Traceback (most recent call last):\n"
                "[default1]:[rank1]: RuntimeError: Connection closed by peer [127.0.0.1]:40211\n")
    crash = ("[default1]:[rank1]: Traceback (most recent call last):\n"
             "[default1]:[rank1]: ValueError: the loss went NaN\n")
    assert "Timed out waiting 3000ms" in died_of_timeout(r0 + reaction, {0: r0, 1: reaction}, first=(1, 1))
    assert died_of_timeout(r0 + crash, {0: r0, 1: crash}, first=(1, 1)) == ""  # a crash named first decides
    assert died_of_timeout(r0 + reaction, {0: r0, 1: reaction}, first=(1, -9)) == ""  # killed: no timeout


def test_a_message_whose_first_line_ends_in_a_colon_keeps_the_lines_that_say_what():
    """accelerate's load_state: the first line names nothing, the next ones are the point."""
    text = ("Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
            "RuntimeError: Error(s) in loading state_dict for TiedLM:\n"
            "\tMissing key(s) in state_dict: \"head.weight\".\n\tUnexpected key(s) in state_dict: \"lm.weight\".\n")
    assert traceback_errors(text) == ['RuntimeError: Error(s) in loading state_dict for TiedLM: Missing key(s) in '
                                      'state_dict: "head.weight". Unexpected key(s) in state_dict: "lm.weight".']


def test_a_long_reason_is_cut_at_a_words_end():
    text = "Traceback (most recent call last):\nValueError: " + "word " * 100 + "\n"
    (reason,) = traceback_errors(text)
    assert reason.endswith("word…") and len(reason) <= 300


PYTEST_TAIL = """\
F                                                                        [100%]
=================================== FAILURES ===================================
___________________________________ test_add ___________________________________

    def test_add():
>       assert add(2, 2) == 4
E       assert 5 == 4
E        +  where 5 = add(2, 2)

tests/test_add.py:5: AssertionError
=========================== short test summary info ============================
FAILED tests/test_add.py::test_add - assert 5 == 4
FAILED tests/test_add.py::test_sub - RuntimeError: the reduction lost a term
1 failed in 0.05s
"""


def test_a_pytest_run_names_the_tests_that_failed():
    from dsbisect.verdict.outcome import pytest_failures

    c = classify(1, False, "", "", PYTEST_TAIL)
    assert c.outcome is Outcome.FAIL
    assert c.reason == "FAILED tests/test_add.py::test_add - assert 5 == 4 (and 1 more)"
    assert pytest_failures("FAILED tests/x.py::t - no summary header\n") == ""  # words alone, out of place
    assert classify(0, False, "", "", PYTEST_TAIL).outcome is Outcome.PASS  # the exit code decides
    errored = PYTEST_TAIL.replace("FAILED tests/test_add.py::test_add - assert 5 == 4\nFAILED tests/test_add.py::"
                                  "test_sub - RuntimeError: the reduction lost a term\n",
                                  "ERROR tests/test_add.py - ImportError: cannot import name 'add'\n")
    assert classify(2, False, "", "", errored).reason == "ERROR tests/test_add.py - ImportError: cannot import name 'add'"
