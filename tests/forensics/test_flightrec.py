"""flightrec: the one reader of torch's flight-recorder dumps, for forensics and deadlock.

The entries below are trimmed to the fields read, as torch 2.13's gloo recorder writes them
(``_dump_fr_trace_json``, three groups: ``init_process_group``, ``new_group()`` and
``new_group(group_desc="mine")``): process_group is always ``[name, description]``.
"""

from __future__ import annotations

import json

import pytest

from dsbisect.forensics import flightrec
from dsbisect.forensics.deadlock import rank_snapshot
from dsbisect.forensics.flightrec import Dump, Entry
from dsbisect.forensics.stuck import analyze
from dsbisect.forensics.stacks import Frame


def entry(seq: int = 1, pg: object = ("0", "default_pg"), **more) -> dict:
    data = {"collective_seq_id": seq, "p2p_seq_id": 0, "profiling_name": "gloo:all_reduce", "state": "scheduled",
            "input_sizes": [[4]], "output_sizes": [[4]], "is_p2p": False, "retired": False, "pg_id": 7}
    if pg is not None:
        data["process_group"] = list(pg) if isinstance(pg, tuple) else pg
    return data | more


@pytest.mark.parametrize(("value", "pg_id", "expected"), [
    (["0", "default_pg"], 0, ("0", "default_pg")),  # torch 2.13, the default group
    (["1", "undefined"], 1, ("1", "undefined")),  # new_group() without a description
    (["2", "mine"], 2, ("2", "mine")),
    # no description given: "" (unknown), never the name (forensics took the name) ...
    (["3"], 3, ("3", "")),
    (["3", None], 3, ("3", "")),
    (["3", ""], 3, ("3", "")),
    ("3", 9, ("3", "")),
    (3, 9, ("3", "")),
    # ... and the recorder's pg_id only where there is no process_group at all
    (None, 9, ("9", "")),
])
def test_process_group(value, pg_id, expected):
    assert flightrec.process_group(value, pg_id) == expected


@pytest.mark.parametrize(("data", "expected"), [
    (entry(), Entry("0", "default_pg", "gloo", 1, "ALLREDUCE", (4,), (4,), "scheduled", False, False, ())),
    (entry(2, profiling_name="nccl:_all_gather_base", input_sizes=[[2, 1024], [8]], output_sizes=[[4096]],
           state="completed", retired=True),
     Entry("0", "default_pg", "nccl", 2, "_ALLGATHER_BASE", (2048, 8), (4096,), "completed", False, True, ())),
    (entry(is_p2p=True, p2p_seq_id=5, profiling_name="nccl:send 0->1"),
     Entry("0", "default_pg", "nccl", 5, "send 0->1", (4,), (4,), "scheduled", True, False, ())),
    ({k: v for k, v in entry(input_sizes=[["x"]]).items() if k != "retired"},
     Entry("0", "default_pg", "gloo", 1, "ALLREDUCE", (), (4,), "scheduled", False, None, ())),
    (entry(collective_seq_id="12", frames=[{"name": "step", "filename": "/job/train.py", "line": 9}, "junk"]),
     Entry("0", "default_pg", "gloo", 12, "ALLREDUCE", (4,), (4,), "scheduled", False, False,
           (Frame("step", "/job/train.py", 9),))),
    (entry(collective_seq_id=None), None),
    (entry(collective_seq_id=True), None),
    (entry(profiling_name=None), None),
    ("not an entry", None),
])
def test_entry(data, expected):
    assert flightrec.entry(data) == expected


def test_dump_reads_pg_status_and_pg_config():
    found = flightrec.dump({"entries": [entry(), "junk"], "pg_status": {"0": {"last_completed_collective": "3"}},
                            "pg_config": {"0": {"ranks": "[1, 0]"}, "": {"ranks": "[]"}, "1": {"ranks": [2]}}})
    assert found == Dump(entries=(flightrec.entry(entry()),), last_completed=(("0", 3),),
                         ranks=(("0", (0, 1)), ("1", (2,))))
    assert flightrec.dump({"no": "entries"}) is None and flightrec.dump([1, 2]) is None


@pytest.mark.parametrize(("value", "expected"), [(3, 3), ("12", 12), (" -3 ", -3), ("1_0", None), ("+1", None),
                                                 (True, None), (1.0, None), (None, None)])
def test_as_int(value, expected):
    assert flightrec.as_int(value) == expected


# ---------------------------------------------------- where forensics and deadlock disagreed


UNDESCRIBED = [["0"], ["0", None], "0", None]  # None: only pg_id (0)


@pytest.mark.parametrize("pg", UNDESCRIBED)
def test_an_undescribed_group_is_pg_name_in_both_readers(tmp_path, pg):
    """forensics took a missing description for the group's name ("0"), deadlock for unknown:
    now both read "" and say "pg 0"; the default group's description still reads as it is."""
    pg = tuple(pg) if isinstance(pg, list) else pg
    dump = {"entries": [entry(1, pg, pg_id=0), entry(2, pg, pg_id=0)]}
    (tmp_path / "nccl_trace_rank_0").write_text(json.dumps(dump))
    (state,) = analyze(tmp_path).ranks
    assert (state.op, state.seq, state.group) == ("ALLREDUCE", 1, "pg 0")
    answer = {"rank": 0, "pid": 5, "world_size": 2, "stack": [["torch/distributed/distributed_c10d.py",
                                                              "all_reduce", 1]], "dumps": [dump]}
    (head,) = rank_snapshot(answer).heads()
    assert head.desc == "" and head.label == "ALLREDUCE #1 (4) on pg 0"


def test_an_undescribed_group_is_not_the_default_group():
    """Only default_pg's members are every rank: a group whose description is unknown has the
    ranks that recorded it (here rank 0 alone), so a wait in it is not proven hopeless by a
    rank that never touched it."""
    answer = {"rank": 0, "pid": 5, "world_size": 2, "stack": [["torch/distributed/distributed_c10d.py",
                                                              "all_reduce", 1]],
              "dumps": [{"entries": [entry(1, "0", pg_id=0)]}]}
    described = dict(answer, dumps=[{"entries": [entry(1)]}])
    assert [c.desc for c in rank_snapshot(answer).pending] == [""]
    assert [c.desc for c in rank_snapshot(described).pending] == ["default_pg"]


def test_a_described_group_reads_the_same_in_both(tmp_path):
    dump = {"entries": [entry(1, ("2", "mine"))]}
    (tmp_path / "nccl_trace_rank_0").write_text(json.dumps(dump))
    assert analyze(tmp_path).ranks[0].group == "mine"
    answer = {"rank": 0, "world_size": 1, "stack": [], "dumps": [dump]}
    assert rank_snapshot(answer).pending[0].label == "ALLREDUCE #1 (4) on mine"


def test_load_refuses_classes_and_reads_json(tmp_path):
    import os
    import pickle

    class Evil:
        def __reduce__(self):
            return os.system, ("true",)

    (tmp_path / "p").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(pickle.UnpicklingError, match="refused to load"):
        flightrec.load(tmp_path / "p")
    (tmp_path / "j").write_text(json.dumps({"entries": []}))
    assert flightrec.load(tmp_path / "j") == {"entries": []}
