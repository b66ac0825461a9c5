"""The early deadlock verdict: proof, from two snapshots of every rank taken a few seconds
apart, that the ranks' pending collectives can never complete.  Pure: no I/O; frozen
dataclasses in, ``Proof | None`` out (``rank_snapshot`` turns one answer of the start-up
hook, already parsed from JSON, into a ``RankSnapshot``).

A rank's snapshot is what the hook in the rank answered (``_hook/dsbisect_hook.py``: its
main thread's Python stack and its flight recorder's entries), or that its process is gone.
``prove`` declares a deadlock only when, in both snapshots:

- every rank of the world is accounted for: it answered, or its process has been gone for
  at least ``min_gone`` seconds in both (a rank that crashed is followed within a second or
  so by the launcher ending the job, which is a failure, not a hang);
- every rank that answered is inside torch.distributed per its stack: the innermost frame of
  its main thread is in ``distributed_c10d.py``, ``c10d_logger.py``,
  ``_functional_collectives.py`` or a CUDA synchronize, and its completion data can be
  trusted (entries that say ``retired``, or else ``completed`` states or ``pg_status``);
  none waits in a point-to-point op.  Such a rank is *blocked* when it has a pending
  collective, *parked* when it has none (e.g. in ``destroy_process_group`` after a
  mismatched pair completed on its side); at least one rank is blocked;
- nothing moved between the two: same process, same stack, same pending collectives (state
  included), same last completed sequence numbers;
- no pending collective can complete.  A collective, sequence number N of process group G,
  completes only when every member of G waits in G#N with the same op (and, for the ops
  whose tensors must agree on every rank, the same sizes).  Every member that is blocked
  elsewhere, exited, or parked *after having passed G#N* will never join it; a parked member
  that has not passed G#N might still come (no proof).  Blocked ranks whose waits none can
  complete, beside ranks that exited or parked past them, will never move again.

Waits the flight recorder does not list (``StoreWait``, from the hook's ``store_wait``: what
the innermost frame's locals say): a process group's construction (``new_group``: gloo's
connection rendezvous through the store, NCCL's eager init), the c10d store barrier
(``_store_based_barrier`` of ``init_process_group``/``new_group``, with the barrier's counter
read through a clone of the store), ``monitored_barrier`` and torch.distributed.elastic's store
barrier.  Such a rank is *blocked* at the wait's key; the wait ends only when every rank it
names comes to the same key.  It proves nothing while one of them is parked (it may still
come), outside torch.distributed, or has already used the group being built (it passed the
construction); the counter, the stack and the key must be the same in both snapshots.  Then
the rule is ``store``: "rank 1 never comes to new_group's rendezvous (it waits in BROADCAST #4)".

Members of G: every rank for the default group (``default_pg``), else the ranks the
recorder's ``pg_config`` lists for G, else the ranks that answered with a record of G (so a
member that never touched G is left out, which only makes a wait look *more* completable).

The proof names the first mismatch it finds, from the lowest rank's oldest wait: a member
that exited (``exited``), waits at another sequence number of G (``sequence``), in another op
at the same number (``op``), with other sizes (``size``), already passed G#N (``passed``), or
waits in another group (``group``).  Ranks doing anything else (computing, saving, loading,
sleeping) are outside torch.distributed, so a run with such a rank is never proven hung: the
collective timeout decides, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dsbisect.forensics import flightrec
from dsbisect.forensics.flightrec import DEFAULT_PG, as_int
from dsbisect.verdict.hangsig import span

# Ops whose tensors have the same sizes on every rank; the others (gather, scatter,
# all_to_all with splits, ...) are matched on the op alone.
_SIZED = frozenset({
    "ALLREDUCE", "BROADCAST", "REDUCE", "_ALLGATHER_BASE", "_REDUCE_SCATTER_BASE",
    "ALL_GATHER_INTO_TENSOR", "REDUCE_SCATTER_TENSOR", "ALLREDUCE_COALESCED", "BARRIER",
})
_COLLECTIVE_FILES = (
    "torch/distributed/distributed_c10d.py",
    "torch/distributed/c10d_logger.py",
    "torch/distributed/_functional_collectives.py",
)
_SYNC_CALLS = (  # (file, function): a CUDA wait behind an enqueued NCCL collective
    ("torch/cuda/__init__.py", "synchronize"),
    ("torch/cuda/streams.py", "synchronize"),
    ("torch/cuda/streams.py", "wait_event"),
    ("torch/cuda/streams.py", "wait_stream"),
)


@dataclass(frozen=True)
class Collective:
    """One collective a rank recorded: process group, sequence number, op, tensor sizes."""

    group: str  # "<backend>:<pg name>", e.g. "gloo:0", "nccl:1"
    seq: int
    op: str  # e.g. "ALLREDUCE", "_ALLGATHER_BASE", "BARRIER"
    numel_in: tuple[int, ...] = ()  # element count of each input tensor
    numel_out: tuple[int, ...] = ()
    state: str = "scheduled"
    p2p: bool = False
    desc: str = ""  # the group's description, e.g. "default_pg"

    @property
    def label(self) -> str:
        """'ALLREDUCE #3 (4)', with the group when it is not the default one."""
        text = f"{self.op} #{self.seq}"
        if self.numel_in:
            text += f" ({'+'.join(str(n) for n in self.numel_in[:3])}{'+…' if len(self.numel_in) > 3 else ''})"
        if self.desc != DEFAULT_PG:
            named = self.desc and self.desc != "undefined"  # new_group's description when none is given
            text += f" on {self.desc}" if named else f" on pg {self.group.split(':', 1)[-1]}"
        return text

    def matches(self, other: Collective) -> bool:
        """Whether the two can be one collective seen from two ranks."""
        if (self.group, self.seq, self.op) != (other.group, other.seq, other.op):
            return False
        return self.op not in _SIZED or (self.numel_in, self.numel_out) == (other.numel_in, other.numel_out)


_STORE_FORMS = {  # the hook's form -> what the proof calls the wait
    "new_group": "rendezvous", "store_barrier": "store barrier", "monitored_barrier": "monitored_barrier",
    "elastic_barrier": "store barrier",
}


@dataclass(frozen=True)
class StoreWait:
    """A wait on the c10d store (or, for ``monitored_barrier``, on gloo's point-to-point pairs)
    that no flight recorder lists: it ends only when every rank of ``ranks`` comes to ``key``."""

    form: str  # new_group (a process group's construction), store_barrier, monitored_barrier, elastic_barrier
    key: str  # what the ranks meet at: "pg:1", "store_based_barrier_key:1", "monitored_barrier:0"
    ranks: tuple[int, ...]  # the global ranks that must come (() unknown)
    call: str = ""  # the outermost torch.distributed call on the stack: "new_group", "monitored_barrier"
    joined: int | None = None  # the store barrier's counter, where the hook could read it

    @property
    def group(self) -> str:
        """The process group's name the key names ("" when it names none)."""
        tail = self.key.rsplit(":", 1)[-1] if ":" in self.key else ""
        return tail if self.form in ("new_group", "store_barrier", "monitored_barrier") else ""

    @property
    def builds_group(self) -> bool:
        """A wait of a process group's construction: a rank that used the group has passed it."""
        return self.form in ("new_group", "store_barrier") and bool(self.group)

    @property
    def label(self) -> str:
        """'new_group (rendezvous of pg 1)', 'new_group (store barrier of pg 1, 1 of 2 joined)',
        'monitored_barrier', 'store barrier at sync/'."""
        if self.form == "monitored_barrier":
            return "monitored_barrier" + (f" on pg {self.group}" if self.group not in ("", "0") else "")
        if not self.call:
            return f"{_STORE_FORMS.get(self.form, self.form)} at {self.key}"
        what = _STORE_FORMS.get(self.form, self.form) + (f" of pg {self.group}" if self.group else "")
        if self.joined is not None and self.ranks:
            what += f", {self.joined} of {len(self.ranks)} joined"
        return f"{self.call} ({what})"

    @property
    def meeting(self) -> str:
        """What the ranks must all come to, in words: "new_group's rendezvous", "monitored_barrier"."""
        if self.form == "monitored_barrier" or not self.call:
            return self.label.split(" (", 1)[0]
        return f"{self.call}'s {_STORE_FORMS.get(self.form, self.form)}"


@dataclass(frozen=True)
class RankSnapshot:
    """One rank at one moment: what its hook answered, or that its process is gone."""

    rank: int
    answered: bool = True
    pid: int | None = None
    gone_for: float | None = None  # seconds since its process was seen gone (None: running or unknown)
    world_size: int | None = None
    in_collective: bool = False  # the main thread's innermost frame is in a collective or a CUDA wait
    stack: tuple[str, ...] = ()  # the main thread's frames, innermost first ("file:function:line")
    pending: tuple[Collective, ...] = ()  # recorded, not completed; by group, then seq
    completed: tuple[tuple[str, int], ...] = ()  # (group, last completed seq)
    members: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (group, its ranks) where the recorder says
    reliable: bool = True  # False: pending entries whose completion cannot be told
    note: str = ""  # what the answer said went wrong
    store_wait: StoreWait | None = None  # the main thread waits on the c10d store (per its stack)

    @property
    def blocked(self) -> bool:
        """Waiting in a collective (in one per its stack, with a pending one) or on the store."""
        return self.answered and self.reliable and (
            self.store_wait is not None or (self.in_collective and bool(self.pending)))

    @property
    def parked(self) -> bool:
        """Inside torch.distributed per its stack (e.g. ``destroy_process_group``) with no
        collective pending: it will join nothing it has not already passed."""
        return (self.answered and self.in_collective and self.reliable and not self.pending
                and self.store_wait is None)

    def knows(self, group: str) -> bool:
        """Whether the rank's recorder holds a collective of the process group named ``group``
        (so the rank has passed that group's construction)."""
        names = {c.group.split(":", 1)[-1] for c in self.pending} | {g.split(":", 1)[-1] for g, _ in self.completed}
        return group in names

    def heads(self) -> tuple[Collective, ...]:
        """The oldest pending collective of each group: what the rank waits for."""
        lowest: dict[str, Collective] = {}
        for c in self.pending:
            if c.group not in lowest or c.seq < lowest[c.group].seq:
                lowest[c.group] = c
        return tuple(sorted(lowest.values(), key=lambda c: (c.desc != DEFAULT_PG, c.group, c.seq)))

    def last_completed(self, group: str) -> int | None:
        return dict(self.completed).get(group)

    def describe(self) -> str:
        """One line for reports: where the rank waits, or why it counts as not blocked."""
        if not self.answered:
            return f"gone for {self.gone_for:.0f} s" if self.gone_for is not None else "no answer"
        if self.note and not self.pending:
            return self.note
        waits = " and ".join(f"{c.label} [{c.state}]" for c in self.heads()) or "no pending collective"
        if self.store_wait is not None:
            return f"{waits}; main thread waits in {self.store_wait.label}" + ("" if self.reliable else
                                                                              "; completion unknown")
        where = ("in a collective" if self.pending else "inside torch.distributed") if self.in_collective \
            else "outside any collective"
        return f"{waits}; main thread {where}" + ("" if self.reliable else "; completion unknown")


@dataclass(frozen=True)
class Snapshot:
    at: float  # seconds since the launch
    ranks: tuple[RankSnapshot, ...]


@dataclass(frozen=True)
class Proof:
    rule: str  # exited, sequence, op, size, passed, group
    at: float  # seconds since the launch, of the second snapshot
    where: str  # where the ranks wait: "rank 0 waits in ALLREDUCE #2 (4), rank 1 in BARRIER #2"
    why: str  # the first mismatch, in words: "different ops at #2"
    waits: tuple[tuple[int, tuple[Collective, ...]], ...]  # (rank, heads) of the blocked ranks
    gone: tuple[int, ...] = ()
    stores: tuple[tuple[int, StoreWait], ...] = ()  # (rank, its wait) of the ranks blocked on the store
    stacks: tuple[tuple[int, tuple[str, ...]], ...] = ()  # (rank, main-thread frames) of the proving snapshot

    @property
    def text(self) -> str:
        """'deadlock proven at 12.4 s: rank 0 waits in ... — different sequence numbers'."""
        return f"deadlock proven at {self.at:.1f} s: {self.where} — {self.why}"


def prove(first: Snapshot, second: Snapshot, min_gone: float = 5.0) -> Proof | None:
    """A proof that the ranks deadlocked, or None when the snapshots do not prove it."""
    world = _world(first, second)
    if world is None:
        return None
    a, b = _by_rank(first, world), _by_rank(second, world)
    sorted_out = _sort_ranks(a, b, world, min_gone) if a is not None and b is not None else None
    if sorted_out is None:
        return None
    blocked, parked, gone = sorted_out
    if not blocked:
        return None
    heads = {r: s.heads() for r, s in blocked.items()}
    stores = {r: s.store_wait for r, s in blocked.items() if s.store_wait is not None}
    members = _members([*blocked.values(), *parked.values()], world)
    for hs in heads.values():
        if any(_can_complete(h, members[h.group], heads) for h in hs):
            return None
        for h in hs:  # a parked member must have passed the collective, else it may still come
            if any(m in parked and (parked[m].last_completed(h.group) or -1) < h.seq for m in members[h.group]):
                return None
    if any(_store_may_end(w, stores, blocked, gone, world) for w in stores.values()):
        return None
    rule, why = _store_culprit(stores, blocked, gone) or _culprit(heads, {**blocked, **parked}, gone, members)
    # at: to the hundredth, as the record keeps it, so the text and the number agree
    return Proof(rule=rule, at=round(second.at, 2), where=_waits_text(heads, gone, parked, stores), why=why,
                 waits=tuple(sorted((r, hs) for r, hs in heads.items() if hs or r not in stores)),
                 gone=tuple(sorted(gone)), stores=tuple(sorted(stores.items())),
                 stacks=tuple((s.rank, s.stack) for s in second.ranks if s.answered))


def _sort_ranks(a: Mapping[int, RankSnapshot], b: Mapping[int, RankSnapshot], world: int, min_gone: float
                ) -> tuple[dict[int, RankSnapshot], dict[int, RankSnapshot], dict[int, float]] | None:
    """(blocked, parked, gone) ranks, still in both snapshots; None when a rank moved, is outside
    torch.distributed, waits point-to-point, or did not answer (or has been gone too briefly)."""
    blocked: dict[int, RankSnapshot] = {}
    parked: dict[int, RankSnapshot] = {}
    gone: dict[int, float] = {}
    for r in range(world):
        x, y = a[r], b[r]
        if not y.answered:
            if x.answered or x.gone_for is None or y.gone_for is None or y.gone_for < min_gone:
                return None  # unknown, or gone too recently to tell a crash from a finish
            gone[r] = y.gone_for
            continue
        if not (x.answered and _same(x, y)) or any(c.p2p for c in y.pending):
            return None  # it moved; or point-to-point pairs, which are not matched here
        if y.blocked:
            blocked[r] = y
        elif y.parked:
            parked[r] = y
        else:
            return None  # outside any collective, or its completion cannot be told
    return blocked, parked, gone


def _store_may_end(wait: StoreWait, stores: Mapping[int, StoreWait], blocked: Mapping[int, RankSnapshot],
                   gone: Mapping[int, float], world: int) -> bool:
    """Whether a wait on the store might still end: who must come is unknown or outside the
    world, every one of them waits at its key already, or one that is not there is neither
    blocked elsewhere nor gone (a parked rank may still come), or has passed the process group's
    construction (its recorder holds a collective of that group: it was there once)."""
    if not wait.ranks or any(not 0 <= m < world for m in wait.ranks):
        return True
    there = [m for m in wait.ranks if m in stores and stores[m].key == wait.key]
    if len(there) == len(wait.ranks):
        return True
    for m in set(wait.ranks) - set(there):
        if m in gone:
            continue
        if m in blocked and not (wait.builds_group and blocked[m].knows(wait.group)):
            continue  # blocked elsewhere, and never was at the group's construction
        return True
    return False


def _store_culprit(stores: Mapping[int, StoreWait], blocked: Mapping[int, RankSnapshot],
                   gone: Mapping[int, float]) -> tuple[str, str] | None:
    """The first rank that never comes to the lowest store-waiting rank's key: (rule, words)."""
    for r in sorted(stores):
        w = stores[r]
        for m in w.ranks:
            if m == r or (m in stores and stores[m].key == w.key):
                continue
            if m in gone:
                return "exited", f"rank {m} exited {gone[m]:.0f} s ago"
            where = (stores[m].label if m in stores else
                     " and ".join(c.label for c in blocked[m].heads()) if m in blocked else "")
            return "store", f"rank {m} never comes to {w.meeting}" + (f" (it waits in {where})" if where else "")
    return None


def _world(first: Snapshot, second: Snapshot) -> int | None:
    sizes = {s.world_size for snap in (first, second) for s in snap.ranks if s.answered}
    if len(sizes) != 1:
        return None
    (world,) = sizes
    return world if isinstance(world, int) and world > 0 else None


def _by_rank(snap: Snapshot, world: int) -> dict[int, RankSnapshot] | None:
    out: dict[int, RankSnapshot] = {}
    for s in snap.ranks:
        if s.rank in out or not 0 <= s.rank < world:
            return None
        out[s.rank] = s
    return out if len(out) == world else None


def _same(x: RankSnapshot, y: RankSnapshot) -> bool:
    return ((x.pid, x.stack, x.pending, x.completed, x.store_wait)
            == (y.pid, y.stack, y.pending, y.completed, y.store_wait))


def _members(ranks: Iterable[RankSnapshot], world: int) -> dict[str, frozenset[int]]:
    ranks = list(ranks)
    explicit: dict[str, frozenset[int]] = {}
    seen: dict[str, set[int]] = {}
    for s in ranks:
        for group, listed in s.members:
            explicit.setdefault(group, frozenset(listed))
        for group in {c.group for c in s.pending} | {g for g, _ in s.completed}:
            seen.setdefault(group, set()).add(s.rank)
        for c in s.pending:
            if c.desc == DEFAULT_PG:
                explicit[c.group] = frozenset(range(world))
    return {g: explicit.get(g, frozenset(rs)) for g, rs in seen.items()}


def _can_complete(head: Collective, members: frozenset[int], heads: Mapping[int, tuple[Collective, ...]]) -> bool:
    return all(m in heads and any(h.matches(head) for h in heads[m]) for m in members)


def _culprit(heads: Mapping[int, tuple[Collective, ...]], answered: Mapping[int, RankSnapshot],
             gone: Mapping[int, float], members: Mapping[str, frozenset[int]]) -> tuple[str, str]:
    """The first mismatch, from the lowest rank's oldest wait: (rule, words)."""
    for r in sorted(heads):
        for h in heads[r]:
            for m in sorted(members[h.group] - {r}):
                if m in gone:
                    return "exited", f"rank {m} exited {gone[m]:.0f} s ago"
                if m not in answered:
                    continue
                same_group = [x for x in heads.get(m, ()) if x.group == h.group]
                if not same_group:
                    done = answered[m].last_completed(h.group)
                    if done is not None and done >= h.seq:
                        return "passed", f"rank {m} already passed #{h.seq}"
                    return "group", f"rank {m} waits in another process group"
                (x,) = same_group
                if x.seq != h.seq:
                    return "sequence", "different sequence numbers"
                if x.op != h.op:
                    return "op", f"different ops at #{h.seq}"
                if not x.matches(h):
                    return "size", f"different sizes at #{h.seq}"
    return "group", "no wait can complete"


def _waits_text(heads: Mapping[int, tuple[Collective, ...]], gone: Mapping[int, float],
                parked: Mapping[int, RankSnapshot], stores: Mapping[int, StoreWait] | None = None) -> str:
    stores = stores or {}
    labels = {r: " and ".join([*(stores[r].label for _ in [0] if r in stores), *(c.label for c in hs)])
              for r, hs in heads.items()}
    groups: dict[str, list[int]] = {}
    for r in sorted(labels):
        groups.setdefault(labels[r], []).append(r)
    parts = []
    for n, (label, rs) in enumerate(sorted(groups.items(), key=lambda kv: kv[1][0])):
        who = f"rank {rs[0]}" if len(rs) == 1 else f"ranks {span(rs)}"
        verb = ("waits in " if len(rs) == 1 else "wait in ") if n == 0 else "in "
        parts.append(f"{who} {verb}{label}")
    if parked:
        rs = sorted(parked)
        where = (parked[rs[0]].stack[0].split(":")[-2] if parked[rs[0]].stack else "torch.distributed")
        parts.append(f"rank {rs[0]} in {where}()" if len(rs) == 1 else f"ranks {span(rs)} in torch.distributed")
    if gone:
        rs = sorted(gone)
        parts.append(f"rank {rs[0]} exited" if len(rs) == 1 else f"ranks {span(rs)} exited")
    return ", ".join(parts)




# ------------------------------------------------------------------ from the hook's answers


def stack_in_collective(frames: object) -> bool:
    """Whether the innermost frame of a stack (``[[file, function, line], ...]``, innermost
    first) is inside a torch.distributed collective or a CUDA synchronize."""
    if not isinstance(frames, list) or not frames or not isinstance(frames[0], (list, tuple)) or len(frames[0]) < 2:
        return False
    file, function = str(frames[0][0]).replace("\\", "/"), str(frames[0][1])
    return (file.endswith(_COLLECTIVE_FILES)
            or any(file.endswith(f) and function == fn for f, fn in _SYNC_CALLS))


def gone_snapshot(rank: int, gone_for: float) -> RankSnapshot:
    return RankSnapshot(rank=rank, answered=False, gone_for=gone_for)


def missing_snapshot(rank: int) -> RankSnapshot:
    return RankSnapshot(rank=rank, answered=False, note="no answer")


def rank_snapshot(answer: Mapping, rank: int | None = None) -> RankSnapshot:
    """A rank's snapshot from the hook's answer (the JSON of ``fr/rank<R>.<n>.json``)."""
    r = as_int(answer.get("rank"))
    r = rank if r is None else r
    if r is None:
        raise ValueError("the answer names no rank")
    stack = answer.get("stack") if isinstance(answer.get("stack"), list) else []
    pending: list[Collective] = []
    completed: dict[str, int] = {}
    members: dict[str, tuple[int, ...]] = {}
    reliable = True
    for found in answer.get("dumps") or []:
        d = flightrec.dump(found) if isinstance(found, Mapping) else None
        if d is not None:
            ok = _read_dump(d, pending, completed, members)
            reliable = reliable and ok
    return RankSnapshot(
        rank=r, answered=True, pid=as_int(answer.get("pid")), world_size=as_int(answer.get("world_size")),
        in_collective=stack_in_collective(stack), stack=tuple(_frame_text(f) for f in stack),
        pending=tuple(sorted(set(pending), key=lambda c: (c.group, c.p2p, c.seq, c.op))),
        completed=tuple(sorted(completed.items())), members=tuple(sorted(members.items())),
        reliable=reliable, note=str(answer.get("error") or ""), store_wait=store_wait(answer.get("store_wait"), stack),
    )


def store_wait(data: object, stack: object) -> StoreWait | None:
    """The hook's ``store_wait`` (``{"form", "key", "ranks", "joined"}``) with the outermost
    torch.distributed call of ``stack``; None when the answer names none it can be sure of."""
    if not isinstance(data, Mapping) or data.get("form") not in _STORE_FORMS or not data.get("key"):
        return None
    ranks = data.get("ranks") if isinstance(data.get("ranks"), list) else []
    ints = [as_int(r) for r in ranks]
    if any(r is None for r in ints):
        ints = []
    frames = [f for f in (stack if isinstance(stack, list) else []) if isinstance(f, (list, tuple)) and len(f) >= 2]
    calls = [str(f[1]) for f in frames
             if str(f[0]).replace("\\", "/").endswith(_COLLECTIVE_FILES[0]) and str(f[1]) != "wrapper"]
    return StoreWait(form=str(data["form"]), key=str(data["key"]), ranks=tuple(sorted(set(ints))),
                     call=calls[-1] if calls else "", joined=as_int(data.get("joined")))


def _read_dump(d: flightrec.Dump, pending: list[Collective], completed: dict[str, int],
               members: dict[str, tuple[int, ...]]) -> bool:
    """Add one recorder's pending collectives; False when their completion cannot be told.

    An entry is finished when it is ``retired`` (torch retires each entry right after its work
    ran: gloo's worker, NCCL's watchdog) or its ``state`` is ``completed``.  Only a dump whose
    entries carry no ``retired`` falls back on ``pg_status``'s ``last_completed_collective``:
    gloo's two worker threads write that number with a plain store after each work, so a
    worker that finishes #3 late overwrites #4 (measured: #4 done, ``last_completed`` 3 for
    seconds), and with async ops a higher number does not mean the lower ones are done."""
    works = [(_collective(e), e) for e in d.entries]
    status_done = _status_done(d, works, members)
    finished = {n for n, (w, e) in enumerate(works) if w.state == "completed" or e.retired is True}
    for group, done in status_done.items():  # the highest finished number, for "passed"
        highest = max((w.seq for n, (w, _) in enumerate(works) if w.group == group and not w.p2p and n in finished),
                      default=None)
        known = [v for v in (done, highest, completed.get(group)) if v is not None]
        if known:
            completed[group] = max(known)
    with_retired = any(e.retired is not None for _, e in works)
    completes = {w.group for w, _ in works if w.state == "completed"}
    ok = True
    for n, (w, _) in enumerate(works):
        if n in finished:
            continue
        done = status_done.get(w.group)
        if not (w.p2p or with_retired) and done is not None and w.seq <= done:
            continue
        if not (w.p2p or with_retired) and done is None and w.group not in completes:
            ok = False  # no way to tell: e.g. gloo entries stay "scheduled" forever
        pending.append(w)
    return ok


def _status_done(d: flightrec.Dump, works: list[tuple[Collective, flightrec.Entry]],
                 members: dict[str, tuple[int, ...]]) -> dict[str, int | None]:
    """Per group of the dump, pg_status' last completed collective (None: not given); the
    groups' ranks, where pg_config lists them, go into ``members``."""
    status, config = dict(d.last_completed), dict(d.ranks)
    done: dict[str, int | None] = {}
    for w, e in works:
        done[w.group] = status.get(e.pg)
        if e.pg and e.pg in config:
            members.setdefault(w.group, config[e.pg])
    backends = {e.backend for _, e in works}
    if len(backends) == 1:  # groups the recorder knows without an entry in the buffer
        (backend,) = backends
        for pg, last in d.last_completed:
            done.setdefault(f"{backend}:{pg}", last)
    return done


def _collective(e: flightrec.Entry) -> Collective:
    return Collective(group=f"{e.backend}:{e.pg}", seq=e.seq, op=e.op if e.op.isupper() else e.op.upper(),
                      numel_in=e.numel_in, numel_out=e.numel_out, state=e.state, p2p=e.p2p, desc=e.desc)


def _frame_text(frame: object) -> str:
    if isinstance(frame, (list, tuple)):
        return ":".join(str(x) for x in frame)
    return str(frame)
