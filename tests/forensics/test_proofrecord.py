"""The early deadlock proof as a run folder keeps it (``fr/proof.json``): written and read back
typed, key for key, in the shape every dsbisect wrote."""

from __future__ import annotations

import json

from dsbisect.forensics.deadlock import prove
from dsbisect.forensics.proofrecord import Looked, ProofRecord
from test_deadlock import IN_BARRIER, coll, rank, snaps

# a proof.json as launch.rounds wrote it (the toy's skipped collective, gloo)
WRITTEN = {
    "text": "deadlock proven at 8.4 s: rank 0 waits in ALLREDUCE #2 (4), rank 1 in BARRIER #2 — different ops at #2",
    "rule": "op", "at": 8.4, "requests": [3, 4], "wall_time": 1796400000.5, "gone": [],
    "waits": {"0": ["ALLREDUCE #2 (4)"], "1": ["BARRIER #2"]}, "store_waits": {},
    "snapshots": [{"request": 3, "at": 5.0, "ranks": {"0": "waits in ALLREDUCE #2", "1": "waits in BARRIER #2"}},
                  {"request": 4, "at": 8.4, "ranks": {"1": "waits in BARRIER #2", "0": "waits in ALLREDUCE #2"}}],
}


def test_a_written_proof_reads_back_typed_and_writes_the_same_json():
    p = ProofRecord.from_json(json.loads(json.dumps(WRITTEN)))
    assert p.to_json() == WRITTEN and list(p.to_json()) == list(WRITTEN)
    assert (p.rule, p.at, p.requests, p.gone) == ("op", 8.4, (3, 4), ())
    assert p.looked_at(4) == Looked(4, 8.4, (("1", "waits in BARRIER #2"), ("0", "waits in ALLREDUCE #2")))
    assert p.looked_at(4).by_rank()[0] == ("0", "waits in ALLREDUCE #2") and p.looked_at(9) is None


def test_a_round_writes_what_the_proof_and_its_snapshots_say():
    a, b = rank(0, coll(2, "ALLREDUCE", 4)), rank(1, coll(2, "BARRIER", None), stack=IN_BARRIER)
    first, second = snaps(a, b)
    proof = prove(first, second)
    made = ProofRecord.of(proof, (3, 4), (first, second), 1796400000.5).to_json()
    assert list(made) == list(WRITTEN) and made["text"] == proof.text and made["requests"] == [3, 4]
    assert made["waits"] == {"0": ["ALLREDUCE #2 (4)"], "1": ["BARRIER #2"]}
    assert [s["request"] for s in made["snapshots"]] == [3, 4] and made["snapshots"][1]["at"] == 8.4
    assert made["snapshots"][0]["ranks"] == {"0": a.describe(), "1": b.describe()}
    assert ProofRecord.from_json(made) == ProofRecord.of(proof, (3, 4), (first, second), 1796400000.5)


def test_a_file_that_is_no_proof_reads_as_none_and_odd_values_are_passed_over():
    assert ProofRecord.from_json([1]) is None and ProofRecord.from_json({"text": "x"}) is None
    odd = ProofRecord.from_json({"requests": [3, "x"], "snapshots": [5, {"request": "r", "at": "soon"}]})
    assert odd.requests == (3,) and odd.snapshots == (Looked(None, None, ()),) and odd.text == ""
