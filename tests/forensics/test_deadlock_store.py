"""The deadlock prover on waits that no flight recorder lists: a process group's construction
(``new_group``'s gloo rendezvous), the c10d store barrier (``init_process_group``/``new_group``
under TORCH_DIST_INIT_BARRIER=1), ``monitored_barrier`` and torch.distributed.elastic's store
barrier.  A proof only when every rank that must come to the wait is blocked elsewhere (or
gone), and never while one may still come, moved, or already used the group being built."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_deadlock import C10D, IN_ALLREDUCE, LOGGER, coll, rank, snaps

from dsbisect.forensics.deadlock import StoreWait, prove, rank_snapshot

IN_NEW_GROUP = [[C10D, "_new_process_group_helper", 2169], [C10D, "_new_group_with_tag", 6056],
                [C10D, "new_group", 5863], [LOGGER, "wrapper", 97], ["/job/train.py", "<module>", 17]]
IN_STORE_BARRIER = [[C10D, "_store_based_barrier", 1063], [C10D, "_new_group_with_tag", 6096],
                    [C10D, "new_group", 5863], [LOGGER, "wrapper", 97], ["/job/train.py", "<module>", 17]]
IN_MONITORED = [[C10D, "monitored_barrier", 5435], ["/job/train.py", "<module>", 21]]
IN_BROADCAST_OBJ = [[C10D, "broadcast", 3151], [LOGGER, "wrapper", 83], [C10D, "broadcast_object_list", 4026],
                    [LOGGER, "wrapper", 83], ["/job/train.py", "<module>", 18]]
ELASTIC = "/v/lib/python3.11/site-packages/torch/distributed/elastic/utils/store.py"
IN_ELASTIC = [[ELASTIC, "barrier", 190], ["/job/train.py", "sync", 9], ["/job/train.py", "<module>", 30]]


def waiting(r: int, stack, form: str, key: str, ranks=(0, 1), joined=None, *pending, **kw):
    """A rank blocked on the store, as ``rank_snapshot`` makes it from the hook's answer."""
    w = StoreWait(form=form, key=key, ranks=tuple(ranks), call=_call(stack), joined=joined)
    return rank(r, *pending, stack=stack, store_wait=w, **kw)


def _call(stack) -> str:
    calls = [f[1] for f in stack if f[0] == C10D]
    return calls[-1] if calls else ""


def test_new_group_against_broadcast_object_list_the_zoo_shape():
    """accelerate_datapipe_dispatch_hang: rank 0 builds the seed's gloo group, rank 1 waits in
    the batch's broadcast_object_list (its size exchange: BROADCAST on the world)."""
    a = waiting(0, IN_NEW_GROUP, "new_group", "pg:1", done=3)
    b = rank(1, coll(4, "BROADCAST", 1), stack=IN_BROADCAST_OBJ)
    proof = prove(*snaps(a, b))
    assert proof is not None and proof.rule == "store", proof
    assert proof.where == "rank 0 waits in new_group (rendezvous of pg 1), rank 1 in BROADCAST #4 (1)"
    assert proof.why == "rank 1 never comes to new_group's rendezvous (it waits in BROADCAST #4 (1))"
    assert dict(proof.stores)[0].key == "pg:1" and [r for r, _ in proof.waits] == [1]
    assert dict(proof.stacks)[0][0].endswith(":_new_process_group_helper:2169")


@pytest.mark.parametrize("other", [
    pytest.param(lambda: rank(1, coll(4, "ALLGATHER", 1), stack=IN_ALLREDUCE), id="all_gather_object"),
    pytest.param(lambda: rank(1, coll(4, "BARRIER", 1), stack=IN_ALLREDUCE), id="barrier"),
    pytest.param(lambda: waiting(1, IN_MONITORED, "monitored_barrier", "monitored_barrier:0"), id="monitored"),
])
def test_store_barrier_against_other_waits(other):
    a = waiting(0, IN_STORE_BARRIER, "store_barrier", "store_based_barrier_key:1", joined=1, done=3)
    proof = prove(*snaps(a, other()))
    assert proof is not None and proof.rule == "store"
    assert proof.where.startswith("rank 0 waits in new_group (store barrier of pg 1, 1 of 2 joined), rank 1 in ")


def test_monitored_barrier_against_an_all_reduce():
    a = rank(0, coll(5), done=4)
    b = waiting(1, IN_MONITORED, "monitored_barrier", "monitored_barrier:0", done=4)
    proof = prove(*snaps(a, b))
    assert proof is not None
    assert proof.where == "rank 0 waits in ALLREDUCE #5 (4), rank 1 in monitored_barrier"
    assert proof.why == "rank 0 never comes to monitored_barrier (it waits in ALLREDUCE #5 (4))"


def test_elastic_store_barrier_against_an_all_reduce():
    a = rank(0, coll(5), done=4)
    b = waiting(1, IN_ELASTIC, "elastic_barrier", "sync/", done=4)
    assert prove(*snaps(a, b)) is not None


def test_two_ranks_in_different_group_constructions():
    a = waiting(0, IN_NEW_GROUP, "new_group", "pg:1")
    b = waiting(1, IN_NEW_GROUP, "new_group", "pg:2")
    proof = prove(*snaps(a, b))
    assert proof is not None and proof.rule == "store"


# ------------------------------------------------------------------ no proof


def test_every_rank_at_the_same_construction_is_no_deadlock():
    """Slow, but all there: the rendezvous can complete."""
    a = waiting(0, IN_NEW_GROUP, "new_group", "pg:1")
    b = waiting(1, IN_NEW_GROUP, "new_group", "pg:1")
    assert prove(*snaps(a, b)) is None


def test_a_rank_slow_to_reach_the_barrier_is_no_deadlock():
    """Rank 1 computes (outside torch.distributed) before its new_group: it may still come."""
    a = waiting(0, IN_STORE_BARRIER, "store_barrier", "store_based_barrier_key:1", joined=1)
    b = rank(1, stack=[["/job/train.py", "compute", 7], ["/job/train.py", "<module>", 19]])
    assert prove(*snaps(a, b)) is None


def test_a_parked_rank_may_still_come_to_the_barrier():
    a = waiting(0, IN_STORE_BARRIER, "store_barrier", "store_based_barrier_key:1", joined=1)
    b = rank(1, stack=[[C10D, "get_rank", 2300], ["/job/train.py", "<module>", 19]])
    assert b.parked and prove(*snaps(a, b)) is None


def test_the_barrier_counter_moving_is_progress():
    a1 = waiting(0, IN_STORE_BARRIER, "store_barrier", "store_based_barrier_key:1", ranks=(0, 1, 2), joined=1,
                 world=3)
    a2 = replace(a1, store_wait=replace(a1.store_wait, joined=2))
    b = rank(1, coll(4, "BROADCAST", 1), world=3, stack=IN_BROADCAST_OBJ)
    c = rank(2, coll(4, "BROADCAST", 1), world=3, stack=IN_BROADCAST_OBJ)
    assert prove(*snaps(a1, b, c, second=(a2, b, c))) is None
    assert prove(*snaps(a2, b, c)) is not None


def test_a_rank_that_already_used_the_group_passed_its_construction():
    """Rank 1 built pg 1 and waits in its all_reduce: rank 0, still 'in' the construction, may be
    finishing it (no proof from the store side; the collective timeout decides)."""
    a = waiting(0, IN_NEW_GROUP, "new_group", "pg:1")
    b = rank(1, coll(1, group="gloo:1", desc="undefined"), done=0)
    assert prove(*snaps(a, b)) is None


def test_unknown_or_foreign_ranks_to_wait_for_is_no_proof():
    b = rank(1, coll(4, "BROADCAST", 1), stack=IN_BROADCAST_OBJ)
    for ranks in [(), (0, 1, 7)]:
        a = waiting(0, IN_STORE_BARRIER, "store_barrier", "store_based_barrier_key:1", ranks=ranks)
        assert prove(*snaps(a, b)) is None, ranks


def test_a_split_from_the_world_waits_for_every_world_rank():
    """ds_device_id_new_group_hang's shape: rank 0 builds a group of its own by ncclCommSplit of
    the device-bound world (the hook names every world rank), rank 1 waits in a world all_reduce."""
    a = waiting(0, IN_NEW_GROUP, "new_group", "pg:1", ranks=(0, 1), done=2)
    b = rank(1, coll(3, numel=1), done=2)
    assert prove(*snaps(a, b)) is not None
    alone = waiting(0, IN_NEW_GROUP, "new_group", "pg:1", ranks=(0,), done=2)  # gloo: only its members
    assert prove(*snaps(alone, b)) is None


def test_a_subgroup_construction_waits_only_for_its_members():
    """new_group([0, 1]) on 3 ranks: rank 2 computing does not matter; rank 1 blocked does."""
    a = waiting(0, IN_NEW_GROUP, "new_group", "pg:1", world=3)
    b = rank(1, coll(4, "BROADCAST", 1), world=3, stack=IN_BROADCAST_OBJ)
    c = rank(2, coll(4, "BROADCAST", 1), world=3, stack=IN_BROADCAST_OBJ)
    assert prove(*snaps(a, b, c)) is not None
    c_busy = rank(2, world=3, stack=[["/job/train.py", "compute", 7]])
    assert prove(*snaps(a, b, c_busy)) is None  # rank 1's broadcast waits for rank 2, who may come


# ------------------------------------------------------------------ the hook's answer


def test_rank_snapshot_reads_the_store_wait():
    answer = {"n": 1, "rank": 0, "pid": 7, "world_size": 2, "stack": IN_STORE_BARRIER, "dumps": [],
              "store_wait": {"form": "store_barrier", "function": "_store_based_barrier",
                             "key": "store_based_barrier_key:1", "ranks": [0, 1], "count": 2, "joined": 1}}
    s = rank_snapshot(answer)
    assert s.store_wait == StoreWait("store_barrier", "store_based_barrier_key:1", (0, 1), "new_group", 1)
    assert s.blocked and not s.parked
    assert "waits in new_group (store barrier of pg 1, 1 of 2 joined)" in s.describe()


@pytest.mark.parametrize("bad", [None, {}, {"form": "nap", "key": "k"}, {"form": "new_group", "key": ""},
                                 {"form": "new_group", "key": "pg:1", "ranks": ["x"]}, "text"])
def test_rank_snapshot_of_an_odd_store_wait(bad):
    answer = {"n": 1, "rank": 0, "pid": 7, "world_size": 2, "stack": IN_NEW_GROUP, "dumps": [], "store_wait": bad}
    s = rank_snapshot(answer)
    assert s.store_wait is None or s.store_wait.ranks == ()


# ------------------------------------------------------------------ the hook reads the locals


def _hook():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "src" / "dsbisect" / "_hook" / "dsbisect_hook.py"
    spec = importlib.util.spec_from_file_location("dsbisect_hook_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # without DSBISECT_* variables it sets nothing up
    return mod


TORCH_LIKE = '''
import sys
def _store_based_barrier(rank, store, group_name, rendezvous_count, timeout):
    store_key = f"store_based_barrier_key:{group_name}"
    return sys._getframe()
def _new_process_group_helper(group_name, global_ranks_in_group, split_from=None):
    return sys._getframe()
def helper():
    return sys._getframe()
'''


class _Counter:
    """A store as far as the hook uses one: ``clone()`` a new client, ``add(key, 0)`` reads the counter."""

    def __init__(self, counts):
        self.counts = counts

    def clone(self):
        return _Counter(self.counts)

    def add(self, key, n):
        self.counts[key] = self.counts.get(key, 0) + n
        return self.counts[key]


class _World:
    @staticmethod
    def get_world_size():
        return 2


def test_the_hook_reads_the_wait_from_the_innermost_frames_locals():
    hook, scope = _hook(), {}
    exec(compile(TORCH_LIKE, "/v/site-packages/torch/distributed/distributed_c10d.py", "exec"), scope)
    barrier = scope["_store_based_barrier"](0, _Counter({"store_based_barrier_key:1": 1}), "1", 2, None)
    assert hook._store_wait(_World, barrier) == {
        "form": "store_barrier", "function": "_store_based_barrier", "key": "store_based_barrier_key:1",
        "ranks": [0, 1], "count": 2, "joined": 1}
    building = scope["_new_process_group_helper"]("3", [0, 1])
    assert hook._store_wait(_World, building)["key"] == "pg:3"
    # a group of rank 0 alone, split from a device-bound world (NCCL): every world rank must come
    assert hook._store_wait(_World, scope["_new_process_group_helper"]("4", [0]))["ranks"] == [0]
    assert hook._store_wait(_World, scope["_new_process_group_helper"]("4", [0], object()))["ranks"] == [0, 1]
    assert hook._store_wait(_World, scope["helper"]()) is None  # a torch.distributed frame that waits on nothing
    other = {}
    exec(compile(TORCH_LIKE, "/job/train.py", "exec"), other)  # the same name outside torch is not torch's
    assert hook._store_wait(_World, other["_store_based_barrier"](0, _Counter({}), "1", 2, None)) is None
