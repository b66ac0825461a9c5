"""A hang's signature in one typed form, whichever rule proved the hang (``HangSignature``),
and torch.distributed's op names in one form (``canonical_op``).

Pure, standard library only: ``forensics`` makes a signature from a run folder on machines
without torch, ``identity`` compares two.  The early proof's "rank 0 waits in ALLREDUCE #2
(1024), rank 1 in BARRIER #2" and the collective timeout's "rank 0 in all_reduce, rank 1 in
barrier" are both the waits ((0, "ALLREDUCE"), (1, "BARRIER")); ``from_text`` reads them from
the text (``records.migrate`` does, for a record that holds only the text).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

# torch.distributed's function names -> the OpType names of the flight recorder and watchdog
C10D_OPS = {
    "all_reduce": "ALLREDUCE", "allreduce": "ALLREDUCE", "all_reduce_coalesced": "ALLREDUCE_COALESCED",
    "broadcast": "BROADCAST", "reduce": "REDUCE", "all_gather": "ALLGATHER",
    "all_gather_into_tensor": "_ALLGATHER_BASE", "_all_gather_base": "_ALLGATHER_BASE",
    "all_gather_object": "ALLGATHER", "gather": "GATHER", "gather_object": "GATHER",
    "reduce_scatter": "REDUCE_SCATTER", "reduce_scatter_tensor": "_REDUCE_SCATTER_BASE",
    "_reduce_scatter_base": "_REDUCE_SCATTER_BASE", "scatter": "SCATTER", "scatter_object_list": "SCATTER",
    "broadcast_object_list": "BROADCAST", "all_to_all": "ALLTOALL", "all_to_all_single": "ALLTOALL_BASE",
    "barrier": "BARRIER", "monitored_barrier": "BARRIER", "send": "SEND", "recv": "RECV",
    "isend": "SEND", "irecv": "RECV", "new_group": "NEW_GROUP", "new_subgroups": "NEW_GROUP",
}
_OP_TYPES = frozenset(C10D_OPS.values()) | {"ALLTOALL_BASE", "COALESCED", "_ALLREDUCE_SPARSE"}


def canonical_op(name: str) -> str:
    """'all_reduce' -> 'ALLREDUCE', 'ALLREDUCE' -> 'ALLREDUCE'; an unknown name as given."""
    if name in _OP_TYPES:
        return name
    return C10D_OPS.get(name.lower(), C10D_OPS.get(name, name))


_WAITS = re.compile(r"\branks? ([\d][\d,\-]*) (?:waits |wait )?in (?:the )?([A-Za-z_][\w]*)")
_LINE_NO = re.compile(r":\d+\b")


def _hang_frames(text: str) -> tuple[str, ...]:
    if " — " not in text:
        return ()
    tail = text.split(" — ", 1)[1].split(" (", 1)[0]
    return tuple(_LINE_NO.sub("", f.strip()) for f in tail.split(" ← ") if f.strip())


@dataclass(frozen=True)
class HangSignature:
    """Where the ranks of a hung run wait, typed, whichever rule proved the hang: the early proof
    (``forensics.hang_record`` from a ``deadlock.Proof``) and the collective timeout (from the
    stacks and recorders) give the same ``waits`` for one deadlock.  Stored with the run
    (``evidence.hang``); the text form is read by ``from_text`` (``records.migrate`` reads a
    record that holds only the text with it)."""

    waits: tuple[tuple[int, str], ...] = ()  # (rank, canonical op: "ALLREDUCE", "NEW_GROUP"), by rank
    frames: tuple[str, ...] = ()  # the code the ranks wait from: "file.py:function", innermost first
    text: str = ""  # the one line the run shows

    @property
    def form(self) -> str:
        """'rank 0 in NEW_GROUP, rank 1 in BROADCAST'; ranks in the same op are one clause
        ('ranks 0-2 in ALLREDUCE'); "" when no rank names a collective."""
        by_op: dict[str, list[int]] = {}
        for r, op in sorted(set(self.waits)):
            by_op.setdefault(op, []).append(r)
        clauses = sorted(by_op.items(), key=lambda kv: kv[1][0])
        return ", ".join(f"rank {rs[0]} in {op}" if len(rs) == 1 else f"ranks {span(rs)} in {op}"
                         for op, rs in clauses)

    def to_json(self) -> dict:
        return {"waits": [[r, op] for r, op in self.waits], "frames": list(self.frames), "text": self.text}

    @classmethod
    def from_json(cls, d: object) -> HangSignature | None:
        """From ``to_json``'s dict; None for anything else."""
        if not isinstance(d, Mapping) or not isinstance(d.get("waits", []), (list, tuple)):
            return None
        waits = []
        for w in d.get("waits", []):
            if not (isinstance(w, (list, tuple)) and len(w) == 2 and isinstance(w[0], int)
                    and not isinstance(w[0], bool) and isinstance(w[1], str)):
                return None
            waits.append((w[0], canonical_op(w[1])))
        frames = d.get("frames", [])
        if not isinstance(frames, (list, tuple)):
            return None
        return cls(tuple(sorted(set(waits))), tuple(str(f) for f in frames), str(d.get("text", "")))

    @classmethod
    def from_text(cls, text: str) -> HangSignature:
        """A signature from its text (either rule's: 'rank 0 waits in ALLREDUCE #2 (4), rank 1 in
        BARRIER #2 — ...' or 'rank 0 in all_reduce, ... — toy.py:step'), as a run shows it."""
        head = text.split(" — ", 1)[0]
        waits = set()
        for ranks, op in _WAITS.findall(head):
            op = canonical_op(op)
            if op in _OP_TYPES:
                waits |= {(r, op) for r in _unspan(ranks)}
        return cls(tuple(sorted(waits)), _hang_frames(text), text)


def span(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (the one way ranks are written as ranges)."""
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    return ",".join(str(g[0]) if len(g) == 1 else f"{g[0]}-{g[-1]}" for g in runs)


def _unspan(text: str) -> set[int]:
    """'0-2,5' -> {0, 1, 2, 5}."""
    out: set[int] = set()
    for part in text.strip(",-").split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out |= set(range(int(lo), int(hi or lo) + 1))
    return out
