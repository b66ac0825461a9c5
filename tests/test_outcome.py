"""classify() and verdict(): pure tables."""

from __future__ import annotations

import pytest

from dsbisect.model import Outcome, RegressOn, Verdict
from dsbisect.outcome import classify, combine, first_error, verdict

GLOO_TIMEOUT = (
    "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
    "Timed out waiting 6000ms for recv operation to complete"
)


@pytest.mark.parametrize(
    "exit_code, timed_out, hang_line, why, tail, outcome, reason",
    [
        (0, False, "", "", "", Outcome.PASS, ""),
        (1, False, "", "", "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: boom", Outcome.FAIL, "ValueError: boom"),
        (1, False, GLOO_TIMEOUT, "", "", Outcome.HANG, "[rank0]: RuntimeError"),
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


def test_an_early_deadlock_proof_gives_the_signature_its_collectives():
    from dsbisect.runner import proven

    why = ("deadlock proven at 35.8 s: rank 0 waits in _ALLGATHER_BASE #119 (2048), rank 1 in _ALLGATHER_BASE "
           "#120 (32) — different sequence numbers")
    assert proven(why) == "rank 0 waits in _ALLGATHER_BASE #119 (2048), rank 1 in _ALLGATHER_BASE #120 (32)"
    assert proven("no exit within the 60 s wall timeout") == ""
