"""The regression's identity (pure): normalising, learning from the bad end, matching, the rule."""

from __future__ import annotations

import pytest

from dsbisect.verdict.identity import (
    Identity,
    Rule,
    canonical_op,
    hang_form,
    judge,
    matches,
    normalise,
    resolve,
)
from dsbisect.core.model import Outcome, RegressOn, Verdict
from recorded import learned


@pytest.mark.parametrize("text, expected", [
    ("CUDA error: an illegal memory access at 0x7f3a2c00beef", "CUDA error: an illegal memory access at <hex>"),
    ("Output 0 of SplitBackward0 is a view", "Output <n> of SplitBackward0 is a view"),
    ("size mismatch for weight: copying torch.Size([4096, 1024]) into torch.Size([1024])",
     "size mismatch for weight: copying torch.Size([<n>…]) into torch.Size([<n>…])"),
    ("No such file or directory: '/tmp/run-12/ckpt/global_step3/mp_rank_00_model_states.pt'",
     "No such file or directory: <path>"),
    (r"cannot open C:\Users\me\ckpt\latest", "cannot open <path>"),
    ("tensor at <object at 0x55d0c0ffee10> on rank 3", "tensor at <object at <hex>> on rank <n>"),
    ("run 5c2f9e1a7b3d4e60 failed after 12.5 s", "run <hex> failed after <n> s"),
    ("loss went NaN", "loss went NaN"),
    ("  spaces \n  and\tlines  ", "spaces and lines"),
    ("lr=1e-05 step -3", "lr=<n> step <n>"),
    ("samples [5, 7, 8, 9, 16] were served to no rank", "samples [<n>…] were served to no rank"),
    ("shape (4,8,2) vs (4, 8,) at 3, 4", "shape (<n>…) vs (<n>…) at <n>, <n>"),
])
def test_normalise(text, expected):
    assert normalise(text) == expected


@pytest.mark.parametrize("a, b, same", [
    ("RuntimeError: Output 0 of SplitBackward0 is a view", "RuntimeError: Output 1 of SplitBackward0 is a view", True),
    ("ValueError: the loss went NaN at step 12", "ValueError: the loss went NaN at step 340", True),
    ("FileNotFoundError: '/a/b/c.pt' missing", "FileNotFoundError: '/x/y.pt' missing", True),
    ("torch.OutOfMemoryError: CUDA out of memory", "OutOfMemoryError: CUDA out of memory", True),
    ("RuntimeError: Output 0 of SplitBackward0 is a view",
     "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'", False),
    ("ValueError: the loss went NaN", "ValueError: shapes do not match", False),
    ("rank 1 killed by SIGSEGV (Fatal Python error: Segmentation fault)",
     "rank 0 killed by SIGSEGV (Fatal Python error: Segmentation fault)", True),
    ("rank 1 killed by SIGSEGV (Fatal Python error: Segmentation fault)", "exit 1", False),
    # the zoo's accelerate_sampler_shard_dupes: one check, lists of other lengths at two releases
    ("AssertionError: samples [5, 7, 8, 9, 16] were served to no rank",
     "AssertionError: samples [5, 6, 11, 20] were served to no rank", True),
    ("AssertionError: samples [5] were served to no rank", "AssertionError: samples [5, 6] were served to no rank",
     True),
])
def test_failures_match_by_type_and_normalised_message(a, b, same):
    assert matches(learned(Outcome.FAIL, a), learned(Outcome.FAIL, b)) is same


def test_a_failure_whose_message_changed_matches_in_the_same_innermost_package_frame():
    a = learned(Outcome.FAIL, "KeyError: 'weight'", frames=("deepspeed/runtime/engine.py:load",))
    b = learned(Outcome.FAIL, "KeyError: 'module.weight'", frames=("deepspeed/runtime/engine.py:load",))
    c = learned(Outcome.FAIL, "KeyError: 'module.weight'", frames=("deepspeed/utils/zero_to_fp32.py:parse",))
    assert matches(a, b) and not matches(a, c)


@pytest.mark.parametrize("a, b, same", [
    # the zoo's accelerate_batch_sampler_no_batch_size: 0.24.0's own regression (#2057) in the
    # same function as the bad end's (#2310): another attribute is another failure
    ("AttributeError: 'DataLoaderShard' object has no attribute 'sampler'",
     "AttributeError: 'DataLoaderShard' object has no attribute 'batch_size'", False),
    ("KeyError: 'weight'", "KeyError: '_orig_mod.weight'", True),  # a rename keeps the name inside
    ("RuntimeError: Expected all tensors to be on the same device",
     "RuntimeError: Expected all tensors to be on the same device, but found at least two devices", True),
    ("TypeError: step() got an unexpected keyword argument 'closure'",
     "TypeError: step() got an unexpected keyword argument 'lr'", False),
    ("ValueError: 'a' and 'b' differ", "ValueError: 'b' and 'a' differ now", True),  # the same names
])
def test_a_changed_message_in_the_same_frame_matches_only_when_it_names_the_same_things(a, b, same):
    where = ("accelerate/data_loader.py:prepare_data_loader",)
    assert matches(learned(Outcome.FAIL, a, frames=where), learned(Outcome.FAIL, b, frames=where)) is same


# One deadlock, two rules: the early proof and the collective timeout's forensics.
EARLY = ("rank 0 waits in ALLREDUCE #2 (1024), rank 1 in BARRIER #2 — "
         "dsb_toy/__init__.py:step ← toy_repro.py:<module>")
AT_TIMEOUT = ("rank 0 in all_reduce numel 4 at SeqNum 2, rank 1 in barrier; ranks in different ops: "
              "0 all_reduce, 1 barrier — dsb_toy/__init__.py:step ← toy_repro.py:<module>")


def test_one_deadlock_has_one_hang_form_whichever_rule_proved_it():
    assert hang_form(EARLY) == hang_form(AT_TIMEOUT) == "rank 0 in ALLREDUCE, rank 1 in BARRIER"
    early, late = learned(Outcome.HANG, "", EARLY), learned(Outcome.HANG, "", AT_TIMEOUT)
    assert early.describe() == late.describe()
    assert early.frames == ("dsb_toy/__init__.py:step", "toy_repro.py:<module>")
    assert matches(early, late) and matches(late, early)


@pytest.mark.parametrize("text, form", [
    ("ranks 0-2 wait in _ALLGATHER_BASE #119 (2048), rank 3 in _ALLGATHER_BASE #120 (32)",
     "ranks 0-3 in _ALLGATHER_BASE"),  # by rank and op: sequence numbers are the proof's, not the form's
    ("rank 0 in reduce_scatter_tensor, rank 1 not in a collective — a.py:f", "rank 0 in _REDUCE_SCATTER_BASE"),
    ("rank 0 in barrier, rank 1 exited", "rank 0 in BARRIER"),
    ("timed out", ""),
])
def test_hang_form(text, form):
    assert hang_form(text) == form


def test_hangs_in_other_collectives_differ_and_a_plain_timeout_matches_any_hang():
    end = learned(Outcome.HANG, "", EARLY)
    assert not matches(end, learned(Outcome.HANG, "", "rank 0 in broadcast, rank 1 in barrier"))
    assert matches(end, learned(Outcome.HANG, "timed out"))
    assert matches(end, learned(Outcome.HANG, "", "rank 0 in all_reduce, rank 1 not in a collective"))
    assert not matches(end, learned(Outcome.HANG, "", "rank 0 in all_reduce, rank 1 in broadcast"))
    assert not matches(end, learned(Outcome.FAIL, "ValueError: x"))


@pytest.mark.parametrize("asked, end, rule", [
    (RegressOn.AUTO, Outcome.HANG, RegressOn.HANG),
    (RegressOn.AUTO, Outcome.FAIL, RegressOn.FAIL),
    (RegressOn.AUTO, None, RegressOn.ANY),
    (RegressOn.HANG, Outcome.FAIL, RegressOn.HANG),
    (RegressOn.ANY, Outcome.HANG, RegressOn.ANY),
])
def test_auto_becomes_the_kind_of_the_bad_ends_failure(asked, end, rule):
    ident = Identity(end, "", "") if end else None
    assert resolve(asked, ident) is rule


def _j(outcome, reason, rule, signature=""):
    return judge(outcome, f"{signature} {reason}".strip(), rule, learned(outcome, reason, signature))


def test_a_different_failure_is_stepped_around_unless_any_failure_or_a_signature():
    bad_end = learned(Outcome.FAIL, "RuntimeError: Output 0 of SplitBackward0 is a view")
    other = "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'"
    assert _j(Outcome.FAIL, "RuntimeError: Output 3 of SplitBackward0 is a view", Rule(RegressOn.FAIL, None, bad_end)) \
        is Verdict.BAD
    assert _j(Outcome.FAIL, other, Rule(RegressOn.FAIL, None, bad_end)) is Verdict.SKIP
    assert _j(Outcome.FAIL, other, Rule(RegressOn.FAIL)) is Verdict.BAD  # --any-failure: today's rule
    assert _j(Outcome.FAIL, other, Rule(RegressOn.FAIL, "_cuda_setDevice", bad_end)) is Verdict.BAD
    assert _j(Outcome.PASS, "", Rule(RegressOn.FAIL, None, bad_end)) is Verdict.GOOD
    assert _j(Outcome.HANG, "timed out", Rule(RegressOn.FAIL, None, bad_end)) is Verdict.SKIP
    # --regress-on any: a hang still counts when the bad end failed (the user asked for any)
    assert _j(Outcome.HANG, "timed out", Rule(RegressOn.ANY, None, bad_end)) is Verdict.BAD


def test_a_signature_matches_both_forms_of_one_hang():
    for wanted in ("ALLREDUCE", "all_reduce", "BARRIER"):
        rule = Rule(RegressOn.HANG, wanted)
        assert _j(Outcome.HANG, "", rule, EARLY) is Verdict.BAD
        assert _j(Outcome.HANG, "", rule, AT_TIMEOUT) is Verdict.BAD
    assert _j(Outcome.HANG, "", Rule(RegressOn.HANG, "BROADCAST"), AT_TIMEOUT) is Verdict.SKIP


@pytest.mark.parametrize("name, op", [("all_reduce", "ALLREDUCE"), ("ALLREDUCE", "ALLREDUCE"),
                                      ("all_gather_into_tensor", "_ALLGATHER_BASE"), ("barrier", "BARRIER"),
                                      ("my_op", "my_op")])
def test_canonical_op(name, op):
    assert canonical_op(name) == op


def test_a_long_reason_is_shortened_in_the_identity_but_matched_whole():
    long = "RuntimeError: Output 0 of Split is a view and is being modified inplace. " + "x " * 100
    ident = learned(Outcome.FAIL, long, frames=("deepspeed/comm/torch.py:all_gather_into_tensor",))
    assert len(ident.describe()) < 260 and ident.describe().endswith("… at deepspeed/comm/torch.py:all_gather_into_tensor")
    assert matches(ident, learned(Outcome.FAIL, long))
