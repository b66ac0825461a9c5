"""The deadlock prover: proofs where the pending collectives can never complete, and no proof
while any rank moved, is outside a collective, or a wait can still complete."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsbisect.forensics.deadlock import (
    Collective,
    RankSnapshot,
    Snapshot,
    gone_snapshot,
    missing_snapshot,
    prove,
    rank_snapshot,
    stack_in_collective,
)

C10D = "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
LOGGER = "/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py"
IN_ALLREDUCE = [[C10D, "all_reduce", 3252], [LOGGER, "wrapper", 83], ["/job/train.py", "<module>", 20]]
IN_BARRIER = [[C10D, "barrier", 5356], [LOGGER, "wrapper", 83], ["/job/train.py", "<module>", 21]]
COMPUTING = [["/job/train.py", "compute", 7], ["/job/train.py", "<module>", 19]]


def coll(seq: int, op: str = "ALLREDUCE", numel: int | None = 4, group: str = "gloo:0", state: str = "scheduled",
         desc: str = "default_pg") -> Collective:
    sizes = (numel,) if numel is not None else ()
    return Collective(group=group, seq=seq, op=op, numel_in=sizes, numel_out=sizes, state=state, desc=desc)


def rank(r: int, *pending: Collective, world: int = 2, stack=IN_ALLREDUCE, done: int | None = None,
         in_collective: bool | None = None, **kw) -> RankSnapshot:
    last = done if done is not None else min((c.seq for c in pending), default=1) - 1
    return RankSnapshot(rank=r, pid=1000 + r, world_size=world, stack=tuple(":".join(map(str, f)) for f in stack),
                        in_collective=stack_in_collective(stack) if in_collective is None else in_collective,
                        pending=pending, completed=(("gloo:0", last),), **kw)


def snaps(*ranks: RankSnapshot, second: tuple[RankSnapshot, ...] | None = None) -> tuple[Snapshot, Snapshot]:
    return Snapshot(5.0, tuple(ranks)), Snapshot(8.4, tuple(second if second is not None else ranks))


# ------------------------------------------------------------------ proofs


def test_different_sequence_numbers_the_seed_2_shape():
    a = rank(0, coll(119, "_ALLGATHER_BASE", 2048), done=118)
    b = rank(1, coll(120, "_ALLGATHER_BASE", 32), done=119)
    proof = prove(*snaps(a, b))
    assert proof is not None and proof.rule == "sequence"
    assert proof.text == ("deadlock proven at 8.4 s: rank 0 waits in _ALLGATHER_BASE #119 (2048), "
                          "rank 1 in _ALLGATHER_BASE #120 (32) — different sequence numbers")
    assert proof.at == 8.4 and dict(proof.waits)[1][0].seq == 120
    assert proof.where == "rank 0 waits in _ALLGATHER_BASE #119 (2048), rank 1 in _ALLGATHER_BASE #120 (32)"
    assert proof.why == "different sequence numbers"  # typed: nothing cuts them back out of the text


def test_different_ops_at_one_sequence_number_the_toy_skip():
    a = rank(0, coll(2, "ALLREDUCE", 4))
    b = rank(1, coll(2, "BARRIER", None), stack=IN_BARRIER)
    proof = prove(*snaps(a, b))
    assert proof is not None and proof.rule == "op"
    assert proof.text.endswith("rank 0 waits in ALLREDUCE #2 (4), rank 1 in BARRIER #2 — different ops at #2")


def test_different_sizes():
    proof = prove(*snaps(rank(0, coll(5, numel=2048)), rank(1, coll(5, numel=32))))
    assert proof is not None and proof.rule == "size" and "different sizes at #5" in proof.text


def test_a_rank_that_exited_while_another_waits_for_it():
    first = (rank(0, coll(4)), gone_snapshot(1, 2.0))
    second = (rank(0, coll(4)), gone_snapshot(1, 6.0))
    proof = prove(Snapshot(5.0, first), Snapshot(8.0, second))
    assert proof is not None and proof.rule == "exited" and proof.gone == (1,)
    assert proof.text == "deadlock proven at 8.0 s: rank 0 waits in ALLREDUCE #4 (4), rank 1 exited — rank 1 exited 6 s ago"


def test_a_rank_that_passed_the_collective_and_waits_in_another_group():
    """Rank 1 completed #7 of the default group (a mismatched partner) and went on into a
    subgroup's all_reduce, where rank 2 waits with other sizes; rank 0 still waits in #7."""
    a = rank(0, coll(7), world=3)
    b = replace(rank(1, coll(3, group="gloo:1", desc="dp"), world=3), completed=(("gloo:0", 7), ("gloo:1", 2)),
                members=(("gloo:1", (1, 2)),))
    c = replace(rank(2, coll(3, group="gloo:1", desc="dp", numel=8), world=3),
                completed=(("gloo:0", 7), ("gloo:1", 2)))
    proof = prove(*snaps(a, b, c))
    assert proof is not None and proof.rule == "passed", proof
    assert "rank 1 already passed #7" in proof.text and "rank 1 in ALLREDUCE #3 (4) on dp" in proof.text


DESTROYING = [[C10D, "destroy_process_group", 2100], ["/job/train.py", "<module>", 30]]


def test_a_rank_parked_in_torch_distributed_after_passing_the_collective():
    """The FIELD-NOTES pair: rank 1's barrier #2 matched rank 0's all_reduce #2 and completed on
    rank 1, which went on into destroy_process_group and stays there; rank 0 still waits in #2."""
    a = rank(0, coll(2), done=1)
    b = rank(1, stack=DESTROYING, done=2)
    proof = prove(*snaps(a, b))
    assert proof is not None and proof.rule == "passed", proof
    assert proof.text.endswith("rank 0 waits in ALLREDUCE #2 (4), rank 1 in destroy_process_group() "
                               "— rank 1 already passed #2")


def test_a_parked_rank_that_has_not_reached_the_collective_may_still_come():
    a = rank(0, coll(2), done=1)
    b = rank(1, stack=[[C10D, "new_group", 4000], ["/job/train.py", "<module>", 12]], done=1)
    assert prove(*snaps(a, b)) is None


def test_many_ranks_are_grouped_in_the_text():
    ranks = [rank(r, coll(10), world=8) for r in range(7)] + [rank(7, coll(11), world=8)]
    proof = prove(*snaps(*ranks))
    assert proof is not None
    assert "ranks 0-6 wait in ALLREDUCE #10 (4), rank 7 in ALLREDUCE #11 (4)" in proof.text


def test_nccl_rank_blocked_in_cuda_synchronize_counts_as_in_a_collective():
    sync = [["/v/site-packages/torch/cuda/__init__.py", "synchronize", 985], ["/job/t.py", "<module>", 9]]
    a = rank(0, coll(4, group="nccl:0", state="started"), stack=sync)
    b = rank(1, coll(5, group="nccl:0", state="scheduled"), stack=sync)
    assert prove(*snaps(a, b)) is not None


# ------------------------------------------------------------------ no proof


def test_a_matched_slow_collective_is_no_deadlock():
    """Both ranks in the same large all_reduce: it can complete."""
    assert prove(*snaps(rank(0, coll(9, numel=1 << 26)), rank(1, coll(9, numel=1 << 26)))) is None


def test_a_rank_computing_before_the_collective_is_no_deadlock():
    a = rank(0, coll(3))
    b = rank(1, stack=COMPUTING, done=2)
    assert prove(*snaps(a, b)) is None


def test_a_rank_outside_a_collective_with_a_stale_pending_entry_is_no_deadlock():
    assert prove(*snaps(rank(0, coll(3)), rank(1, coll(4), stack=COMPUTING))) is None


def test_progress_between_the_snapshots_is_no_deadlock():
    a1, b = rank(0, coll(3)), rank(1, coll(4))
    a2 = rank(0, coll(3, state="started"))
    assert prove(*snaps(a1, b, second=(a2, b))) is None
    a3 = replace(a1, stack=a1.stack[:1] + ("/job/train.py:<module>:99",))
    assert prove(*snaps(a1, b, second=(a3, b))) is None
    a4 = replace(a1, pid=4242)  # restarted
    assert prove(*snaps(a1, b, second=(a4, b))) is None


def test_a_rank_that_did_not_answer_is_no_deadlock():
    assert prove(*snaps(rank(0, coll(3)), missing_snapshot(1))) is None


def test_a_rank_gone_too_recently_is_no_deadlock():
    """A crashed rank is followed by the launcher ending the job: wait until it has been gone a while."""
    first = (rank(0, coll(4)), gone_snapshot(1, 0.5))
    second = (rank(0, coll(4)), gone_snapshot(1, 3.5))
    assert prove(Snapshot(5.0, first), Snapshot(8.0, second)) is None
    # and one that answered at the first look and was gone at the second moved
    assert prove(Snapshot(5.0, (rank(0, coll(4)), rank(1, coll(4)))),
                 Snapshot(8.0, (rank(0, coll(4)), gone_snapshot(1, 9.0)))) is None


def test_every_rank_gone_is_no_deadlock():
    gone = (gone_snapshot(0, 9.0), gone_snapshot(1, 9.0))
    assert prove(Snapshot(1, gone), Snapshot(2, gone)) is None


def test_unreliable_completion_or_p2p_is_no_deadlock():
    assert prove(*snaps(rank(0, coll(3)), rank(1, coll(4), reliable=False))) is None
    p2p = replace(coll(1, "SEND"), p2p=True)
    assert prove(*snaps(rank(0, coll(3)), rank(1, p2p))) is None


def test_a_subgroup_wait_that_can_complete_keeps_it_open():
    """Ranks 0 and 1 match in a subgroup's all_reduce while rank 2 waits elsewhere: 0 and 1 can move."""
    sub = coll(3, group="gloo:1", desc="tp")
    a, b = rank(0, sub, world=3), rank(1, sub, world=3)
    c = rank(2, coll(8), world=3)
    assert prove(*snaps(a, b, c)) is None


def test_world_size_disagreement_or_missing_ranks_is_no_proof():
    assert prove(*snaps(rank(0, coll(3)), rank(1, coll(4), world=3))) is None
    assert prove(*snaps(rank(0, coll(3), world=3), rank(1, coll(4), world=3))) is None


# ------------------------------------------------------------------ property


_ops = st.sampled_from(["ALLREDUCE", "BARRIER", "_ALLGATHER_BASE"])


@st.composite
def _rank_pair(draw, r: int, world: int):
    """A rank's two snapshots; each may be in or out of a collective, and may move."""
    pending = draw(st.lists(st.builds(coll, st.integers(1, 3), _ops, st.sampled_from([4, 32, None])),
                            min_size=draw(st.sampled_from([0, 1, 1, 1])), max_size=2, unique_by=lambda c: c.seq))
    stack = draw(st.sampled_from([IN_ALLREDUCE, IN_ALLREDUCE, IN_BARRIER, COMPUTING]))
    first = rank(r, *pending, world=world, stack=stack)
    second = first
    change = draw(st.sampled_from(["none"] * 6 + ["state", "stack", "new", "gone"]))
    if change == "state" and pending:
        second = replace(first, pending=(replace(pending[0], state="started"), *first.pending[1:]))
    elif change == "stack":
        second = replace(first, stack=("/job/train.py:<module>:30",), in_collective=False)
    elif change == "new":
        second = replace(first, pending=(*first.pending, coll(9)))
    elif change == "gone":
        second = gone_snapshot(r, draw(st.floats(0, 20)))
    return first, second


@st.composite
def _worlds(draw):
    world = draw(st.integers(2, 4))
    pairs = [draw(_rank_pair(r, world)) for r in range(world)]
    return Snapshot(5.0, tuple(p[0] for p in pairs)), Snapshot(8.0, tuple(p[1] for p in pairs))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_worlds())
def test_property_no_proof_while_a_rank_moves_or_is_outside_a_collective(worlds):
    first, second = worlds
    proof = prove(first, second)
    moved = any(a.answered and (not b.answered or a != b) for a, b in zip(first.ranks, second.ranks))
    outside = any(s.answered and not s.in_collective for snap in worlds for s in snap.ranks)
    if moved or outside:
        assert proof is None
    if proof is not None:  # then no rank's wait can be completed by the others
        heads = {r: hs for r, hs in proof.waits}
        for hs in heads.values():
            for h in hs:
                assert not all(any(x.matches(h) for x in heads[m]) for m in heads if m not in proof.gone)


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 6), st.integers(1, 50), _ops, st.sampled_from([1, 4, 1 << 20]))
def test_property_every_rank_in_the_same_collective_is_never_a_deadlock(world, seq, op, numel):
    ranks = [rank(r, coll(seq, op, numel), world=world) for r in range(world)]
    assert prove(*snaps(*ranks)) is None


# ------------------------------------------------------------------ the hook's answers


def gloo_entry(seq: int, name: str = "all_reduce", sizes=((4,),), retired: bool | None = True) -> dict:
    entry = {"collective_seq_id": seq, "p2p_seq_id": 0, "profiling_name": f"gloo:{name}", "state": "scheduled",
             "input_sizes": [list(x) for x in sizes], "output_sizes": [list(x) for x in sizes],
             "process_group": ["0", "default_pg"], "is_p2p": False, "time_discovered_completed_ns": 0}
    if retired is not None:
        entry["retired"] = retired
    return entry


def gloo_answer(entries: list[dict], last_completed: int, rank: int = 0, stack=IN_ALLREDUCE) -> dict:
    """As the hook writes it on torch 2.13.0+cpu (entries trimmed to the fields read)."""
    return {"n": 1, "rank": rank, "pid": 77, "world_size": 2, "backend": "gloo", "stack": stack, "dumps": [{
        "family": "fr", "via": "_dump_fr_trace_json", "version": "2.10",
        "pg_status": {"0": {"last_completed_collective": str(last_completed),
                            "last_enqueued_collective": str(max(e["collective_seq_id"] for e in entries)),
                            "last_started_collective": "-1"}},
        "pg_config": {"": {"desc": "", "name": "", "ranks": "[0, 1]"}},
        "entries": entries}]}


# rank 0 stuck in all_reduce #2: gloo's entries stay "scheduled"; #1 is retired
GLOO_ANSWER = gloo_answer([gloo_entry(1), gloo_entry(2, sizes=((2, 2),), retired=False)], last_completed=1)


def test_rank_snapshot_from_a_gloo_answer_uses_retired_for_completion():
    s = rank_snapshot(GLOO_ANSWER)
    assert s.rank == 0 and s.pid == 77 and s.world_size == 2 and s.in_collective and s.reliable
    assert s.pending == (Collective("gloo:0", 2, "ALLREDUCE", (4,), (4,), "scheduled", False, "default_pg"),)
    assert s.completed == (("gloo:0", 1),)
    assert s.blocked and s.heads()[0].label == "ALLREDUCE #2 (4)"


def test_gloo_pg_status_race_does_not_make_a_finished_collective_pending():
    """Measured on torch 2.13: broadcast #4 done and retired, but a gloo worker that finished
    #3 late left last_completed_collective at 3; rank 0 now waits in the big all_reduce #5."""
    entries = [gloo_entry(3), gloo_entry(4, "broadcast", ((1,),)), gloo_entry(5, sizes=((1 << 30,),), retired=False)]
    s = rank_snapshot(gloo_answer(entries, last_completed=3))
    assert [c.label for c in s.heads()] == [f"ALLREDUCE #5 ({1 << 30})"]
    assert s.completed == (("gloo:0", 4),)
    peer = rank_snapshot(gloo_answer(entries, last_completed=4, rank=1))
    assert prove(Snapshot(5, (s, peer)), Snapshot(8, (s, peer))) is None  # the same all_reduce on both


def test_rank_snapshot_without_retired_falls_back_on_pg_status_or_states():
    s = rank_snapshot(gloo_answer([gloo_entry(1, retired=None), gloo_entry(2, retired=None)], last_completed=1))
    assert s.reliable and [c.seq for c in s.pending] == [2]
    dump = dict(gloo_answer([gloo_entry(1, retired=None)], 0)["dumps"][0], pg_status={})
    s = rank_snapshot(dict(GLOO_ANSWER, dumps=[dump]))
    assert not s.reliable and not s.blocked  # gloo's entries never say "completed"
    nccl = {"family": "nccl", "via": "_dump_nccl_trace", "pg_status": {}, "pg_config": {
        "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}, "entries": [
        {"collective_seq_id": 1, "profiling_name": "nccl:all_reduce", "state": "completed",
         "input_sizes": [[4]], "output_sizes": [[4]], "process_group": ["0", "default_pg"]},
        {"collective_seq_id": 2, "profiling_name": "nccl:_all_gather_base", "state": "started",
         "input_sizes": [[2048]], "output_sizes": [[4096]], "process_group": ["0", "default_pg"]}]}
    s = rank_snapshot(dict(GLOO_ANSWER, dumps=[nccl]))
    assert s.reliable and [c.label for c in s.pending] == ["_ALLGATHER_BASE #2 (2048)"]
    assert s.members == (("nccl:0", (0, 1)),)


def test_rank_snapshot_of_an_error_answer_is_not_blocked():
    s = rank_snapshot({"rank": 1, "pid": 5, "world_size": 2, "stack": IN_BARRIER, "dumps": [],
                       "error": "no flight-recorder dump entry point in this torch"})
    assert not s.blocked and s.note.startswith("no flight-recorder")
    assert "no flight-recorder" in s.describe()


@pytest.mark.parametrize("frames, expected", [
    (IN_ALLREDUCE, True),
    (COMPUTING, False),
    ([["/v/torch/cuda/__init__.py", "synchronize", 1]], True),
    ([["/v/torch/cuda/__init__.py", "is_available", 1]], False),
    ([], False),
    ("junk", False),
])
def test_stack_in_collective(frames, expected):
    assert stack_in_collective(frames) is expected
