"""A hang's signature in one typed form (``identity.HangSignature``), whichever rule proved the
hang; its frames from the snapshot that proved it; old records (text only) still readable."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from dsbisect.forensics.deadlock import Collective, Proof, StoreWait
from dsbisect.forensics.stuck import Frame, RankState, Signature, analyze, hang_record
from dsbisect.verdict.identity import HangSignature, Identity, matches
from dsbisect.records import migrate
from recorded import learned
from dsbisect.core.model import Outcome
from dsbisect.records.run import Evidence

C10D = "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
SITE = "/v/lib/python3.11/site-packages"


def bcast(seq: int) -> Collective:
    return Collective(group="gloo:0", seq=seq, op="BROADCAST", numel_in=(1,), numel_out=(1,), desc="default_pg")


NEW_GROUP = StoreWait("new_group", "pg:1", (0, 1), "new_group")
ZOO_STACKS = (
    (0, (f"{C10D}:_new_process_group_helper:2169", f"{C10D}:new_group:5863",
         f"{SITE}/torch/utils/data/datapipes/iter/sharding.py:_share_dist_seed:40",
         f"{SITE}/accelerate/data_loader.py:__iter__:560", "/job/case.py:main:70")),
    (1, (f"{C10D}:broadcast:3151", f"{C10D}:broadcast_object_list:4026",
         f"{SITE}/accelerate/utils/operations.py:broadcast_object_list:400",
         f"{SITE}/accelerate/data_loader.py:_fetch_batches:520", f"{SITE}/accelerate/data_loader.py:__iter__:580",
         "/job/case.py:main:70")),
)
ZOO_PROOF = Proof(rule="store", at=12.0, where="rank 0 waits in new_group (rendezvous of pg 1), rank 1 in BROADCAST #4 (1)",
                  why="rank 1 never comes to new_group's rendezvous (it waits in BROADCAST #4 (1))",
                  waits=((1, (bcast(4),)),), stores=((0, NEW_GROUP),), stacks=ZOO_STACKS)


def state(rank: int, op: str | None, frames: tuple[Frame, ...] = ()) -> RankState:
    return RankState(rank, op, None, None, None, None, frames, ("py-spy",))


# the same deadlock at gloo's timeout: the stacks' outermost torch.distributed calls
ZOO_TIMEOUT = Signature(
    (state(0, "new_group", (Frame("main", "/job/case.py", 70),)),
     state(1, "broadcast_object_list", (Frame("_fetch_batches", f"{SITE}/accelerate/data_loader.py", 520),))),
    "rank 0 in new_group, rank 1 in broadcast_object_list; ranks in different ops: 0 new_group, 1 broadcast_object_list",
    "data_loader.py:_fetch_batches", ())


def test_the_early_proof_and_the_timeout_give_one_signature_for_a_store_wait():
    early, late = hang_record(None, ZOO_PROOF), hang_record(ZOO_TIMEOUT, None)
    assert early.waits == late.waits == ((0, "NEW_GROUP"), (1, "BROADCAST"))
    assert early.form == "rank 0 in NEW_GROUP, rank 1 in BROADCAST"
    a = learned(Outcome.HANG, ZOO_PROOF.text, early.text, hang=early)
    b = learned(Outcome.HANG, "collective timeout", late.text, hang=late)
    assert a.message == b.message and matches(a, b) and matches(b, a)


def test_the_early_proof_and_the_timeout_give_one_signature_for_monitored_barrier():
    proof = Proof("store", 9.0, "rank 0 waits in ALLREDUCE #5 (4), rank 1 in monitored_barrier", "…",
                  waits=((0, (replace(bcast(5), op="ALLREDUCE", numel_in=(4,), numel_out=(4,)),)),),
                  stores=((1, StoreWait("monitored_barrier", "monitored_barrier:0", (0, 1), "monitored_barrier")),))
    timeout = Signature((state(0, "all_reduce"), state(1, "monitored_barrier")), "…", "", ())
    assert hang_record(None, proof).waits == hang_record(timeout, None).waits == ((0, "ALLREDUCE"), (1, "BARRIER"))


def test_the_frames_come_from_the_proving_snapshot(tmp_path):
    """An older py-spy dump (the quiet one, taken in an import) is in the run folder; the proof's
    stacks say where the ranks were when it was proven, and the signature says that."""
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    for r in (0, 1):
        (stacks / f"pyspy.rank{r}.quiet.txt").write_text(
            'Thread 0x1 (idle): "MainThread"\n    _build_tables (/job/slowload.py:4)\n'
            "    <module> (/job/slowload.py:6)\n    <module> (/job/case.py:3)\n")
    sig = analyze(tmp_path)
    assert "slowload.py:_build_tables" in sig.stack  # what would have won
    hang = hang_record(sig, ZOO_PROOF)
    assert hang.text == f"{ZOO_PROOF.where} — operations.py:broadcast_object_list ← data_loader.py:_fetch_batches " \
                        "← data_loader.py:__iter__ (rank 0: data_loader.py:__iter__ ← case.py:main)"
    assert hang.frames == ("operations.py:broadcast_object_list", "data_loader.py:_fetch_batches",
                           "data_loader.py:__iter__")
    assert learned(Outcome.HANG, ZOO_PROOF.text, hang.text, hang=hang).frames == hang.frames


def test_a_deadlock_dump_outranks_an_older_quiet_one(tmp_path):
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "pyspy.rank0.quiet.txt").write_text(
        'Thread 0x1 (idle): "MainThread"\n    _build_tables (/job/slowload.py:4)\n    <module> (/job/case.py:3)\n')
    (stacks / "pyspy.rank0.deadlock.txt").write_text(
        f'Thread 0x1 (idle): "MainThread"\n    all_reduce ({C10D}:3252)\n    exchange (/job/case.py:9)\n'
        "    <module> (/job/case.py:12)\n")
    assert analyze(tmp_path).stack == "case.py:exchange ← case.py:<module>"


# ------------------------------------------------------------------ the typed form


def test_to_json_and_back():
    h = hang_record(None, ZOO_PROOF)
    again = HangSignature.from_json(json.loads(json.dumps(h.to_json())))
    assert again == h
    assert HangSignature.from_json(Evidence.of(hang=h.to_json()).hang) == h  # as the store keeps it


@pytest.mark.parametrize("bad", [None, 3, [], {"waits": "x"}, {"waits": [[0]]}, {"waits": [["0", "ALLREDUCE"]]},
                                 {"waits": [[True, "ALLREDUCE"]]}, {"waits": [], "frames": "a.py:f"}])
def test_from_json_of_something_else(bad):
    assert HangSignature.from_json(bad) is None


def test_an_old_record_has_only_its_text():
    """A run recorded before the signature was typed: its text is read (by ``records.migrate``), as then."""
    old = "rank 0 waits in ALLREDUCE #2 (1024), rank 1 in BARRIER #2 — toy.py:step ← toy.py:<module> (rank 1: x.py:f)"
    h = HangSignature.from_text(old)
    assert h.waits == ((0, "ALLREDUCE"), (1, "BARRIER")) and h.frames == ("toy.py:step", "toy.py:<module>")
    assert HangSignature.from_json(old) is None  # the typed form only: the text is migrate's to read
    late = learned(Outcome.HANG, "timeout", "rank 0 in all_reduce, rank 1 in barrier — toy.py:step")
    assert matches(learned(Outcome.HANG, old, old), late)
    # an Identity stored before it carried "hang" (a bisection's learned regression): lifted as it is read
    stored = {"kind": "hang", "error": "", "message": "rank 0 in ALLREDUCE, rank 1 in BARRIER", "frames": [],
              "identity": "HANG rank 0 in ALLREDUCE, rank 1 in BARRIER", "shown": old}
    ident = Identity.from_json(migrate.identity(stored))
    assert ident.hang_waits() == ((0, "ALLREDUCE"), (1, "BARRIER")) and matches(ident, late)
    assert ident.as_json() == stored | {"hang": HangSignature.from_text(stored["message"]).to_json()}
    assert Identity.from_json(ident.as_json()) == ident and migrate.identity(ident.as_json()) == ident.as_json()


def test_waits_the_text_left_out_still_tell_two_hangs_apart():
    """Five ranks in five ops: the text shows four and '+1 more', so two hangs that differ in the
    fifth rank read the same; their typed waits do not."""
    ops = ["all_reduce", "barrier", "broadcast", "all_gather"]

    def sig(last: str) -> Signature:
        states = tuple(state(r, op) for r, op in enumerate([*ops, last]))
        return Signature(states, "rank 0 in all_reduce, rank 1 in barrier, rank 2 in broadcast, rank 3 in all_gather"
                                 ", +1 more", "", ())

    a, b = hang_record(sig("reduce_scatter"), None), hang_record(sig("gather"), None)
    assert a.text == b.text
    ia, ib = (learned(Outcome.HANG, "timeout", h.text, hang=h) for h in (a, b))
    assert not matches(ia, ib)
    assert matches(ia, learned(Outcome.HANG, "timeout", a.text, hang=a))
