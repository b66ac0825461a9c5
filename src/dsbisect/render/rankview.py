"""The rank × collective view of a hang: ranks as rows, collectives by sequence number as
columns, the first mismatch, and the ranks that behave alike folded into one row.

Pure: frozen dataclasses in (one ``Look`` per snapshot of every rank: its flight-recorder
entries, where its main thread is, its stack), a ``RankView`` out, and the words said above
the picture ("rank 1 never entered ALLREDUCE #7; it waits in barrier at train.py:12").
``htmlreport`` draws a view as HTML, ``rank_table`` as a rich table for ``dsbisect show``.
Nothing here reads a file: ``htmlsource`` builds the looks from a run folder.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from rich.console import Group
from rich.table import Table
from rich.text import Text

from dsbisect.core.outside import safe

MAX_COLUMNS = 7
MAX_ROWS = 48  # groups drawn; the rest are counted
_UNEVEN = frozenset({"GATHER", "SCATTER", "ALLTOALL", "ALLTOALL_BASE", "SEND", "RECV"})  # sizes may differ by rank
_DEFAULT_GROUPS = ("default_pg", "0")


class State(enum.Enum):
    COMPLETED = "completed"
    STARTED = "started"
    PENDING = "pending"  # recorded (scheduled), not started

    @classmethod
    def of(cls, state: str) -> State:
        return {"completed": cls.COMPLETED, "started": cls.STARTED}.get(state, cls.PENDING)


@dataclass(frozen=True)
class Coll:
    """One flight-recorder entry of one rank."""

    group: str  # the process group's description, e.g. "default_pg"
    seq: int
    op: str  # e.g. "_ALLGATHER_BASE", "BARRIER"
    numel_in: int | None = None
    numel_out: int | None = None
    state: State = State.PENDING

    @property
    def size(self) -> str:
        return "" if self.numel_in is None else f"{self.numel_in} elements"

    @property
    def label(self) -> str:
        """'_ALLGATHER_BASE #120 (2048 elements)', with the group when it is not the default one."""
        on = "" if self.group in _DEFAULT_GROUPS else f" on {self.group}"
        return f"{self.op} #{self.seq}{on}" + (f" ({self.size})" if self.size else "")

    def agrees(self, other: Coll) -> bool:
        if self.op != other.op:
            return False
        return self.op in _UNEVEN or self.numel_in == other.numel_in


@dataclass(frozen=True)
class RankLook:
    """One rank at one moment."""

    rank: int
    colls: tuple[Coll, ...] = ()
    where: str = ""  # "barrier at engine.py:1234": the call it is in and the innermost own frame
    stack: tuple[str, ...] = ()  # innermost first, one frame a line
    absent: str = ""  # why there is nothing of this rank ("exited", "no answer")

    def head(self, group: str | None = None) -> Coll | None:
        """The oldest entry not completed (of ``group``, else of any group, default first)."""
        waiting = [c for c in self.colls if c.state is not State.COMPLETED and group in (None, c.group)]
        return min(waiting, key=lambda c: (c.group not in _DEFAULT_GROUPS, c.group, c.seq), default=None)

    def entry(self, group: str, seq: int) -> Coll | None:
        return self._index.get((group, seq))

    def span(self, group: str) -> tuple[int, int] | None:
        return self._spans.get(group)

    @cached_property
    def _index(self) -> dict[tuple[str, int], Coll]:
        out: dict[tuple[str, int], Coll] = {}
        for c in self.colls:
            out.setdefault((c.group, c.seq), c)
        return out

    @cached_property
    def _spans(self) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for c in self.colls:
            lo, hi = out.get(c.group, (c.seq, c.seq))
            out[c.group] = (min(lo, c.seq), max(hi, c.seq))
        return out


@dataclass(frozen=True)
class Look:
    title: str  # "flight-recorder dumps at the watchdog timeout", "first look, 11.9 s"
    ranks: tuple[RankLook, ...]


@dataclass(frozen=True)
class Mismatch:
    group: str
    seq: int
    kind: str  # "missing" (a rank never entered it), "op", "size"
    words: str


class Cell(enum.Enum):
    """What a rank shows at one (group, seq) without an entry."""

    NOT_ENTERED = "not entered"  # its newest entry of the group is older
    UNKNOWN = "not recorded"  # dropped from its ring buffer, or no record at all


@dataclass(frozen=True)
class Row:
    """Ranks that behave alike: same entries in every column, same wait, same place."""

    ranks: tuple[int, ...]
    cells: tuple[Coll | Cell, ...]
    head: Coll | None
    where: str
    stack: tuple[str, ...]
    absent: str

    @property
    def label(self) -> str:
        return ranks_label(self.ranks)


@dataclass(frozen=True)
class RankView:
    title: str
    columns: tuple[tuple[str, int], ...]  # (group, seq)
    rows: tuple[Row, ...]
    hidden: int  # groups of ranks not drawn (beyond MAX_ROWS)
    mismatch: Mismatch | None
    words: tuple[str, ...]  # said above the picture
    world: int


# ------------------------------------------------------------------ building


def build(look: Look, highlight: bool = True, max_columns: int = MAX_COLUMNS) -> RankView:
    """The view of one look; ``highlight``: name the first mismatch (a hang's look; a run that
    went on gets none: what differs in a moving run is only where each rank was that moment)."""
    mismatch = first_mismatch(look.ranks) if highlight else None
    columns = _columns(look.ranks, mismatch, max_columns)
    rows = group_rows(look.ranks, columns)
    words = ([mismatch.words] if mismatch else []) + [wait_summary(rows)]
    return RankView(title=look.title, columns=columns, rows=tuple(rows[:MAX_ROWS]),
                    hidden=max(0, len(rows) - MAX_ROWS), mismatch=mismatch,
                    words=tuple(w for w in words if w), world=len(look.ranks))


def first_mismatch(ranks: Sequence[RankLook]) -> Mismatch | None:
    """The lowest sequence number (default group first) where the ranks disagree: one never
    entered it while another did, or they are in different ops or sizes there."""
    for group in _groups(ranks):
        members = [r for r in ranks if r.span(group)]
        floor = max(r.span(group)[0] for r in members)  # older entries may have left a ring buffer
        top = max(r.span(group)[1] for r in members)
        for seq in range(floor, top + 1):
            found = _mismatch_at(members, group, seq)
            if found:
                return found
    return None


def _mismatch_at(members: Sequence[RankLook], group: str, seq: int) -> Mismatch | None:
    entries = {r.rank: r.entry(group, seq) for r in members}
    there = {k: c for k, c in entries.items() if c is not None}
    behind = [r for r in members if entries[r.rank] is None and r.span(group)[1] < seq]
    if not there:
        return None
    waiting = [c for c in there.values() if c.state is not State.COMPLETED]
    if behind and waiting:
        first = next(iter(there.values()))
        by_place = _by_key(behind, lambda r: (_waits(r), r.where))
        said = "; ".join(f"{ranks_label([r.rank for r in rs])} never entered {first.op} #{seq}; "
                         f"{'it' if len(rs) == 1 else 'they'} {_place(rs[0], len(rs) > 1)}" for rs in by_place)
        return Mismatch(group, seq, "missing", said)
    kinds = _by_key([r for r in members if r.rank in there], lambda r: (there[r.rank].op, there[r.rank].numel_in))
    if len(kinds) > 1 and not all(there[a[0].rank].agrees(there[b[0].rank]) for a in kinds for b in kinds):
        kind = "op" if len({there[k[0].rank].op for k in kinds}) > 1 else "size"
        parts = [_at_mismatch(rs, there[rs[0].rank]) for rs in kinds]
        return Mismatch(group, seq, kind, f"at #{seq} the ranks disagree ({'ops' if kind == 'op' else 'sizes'}): "
                        + "; ".join(parts))
    return None


def _at_mismatch(ranks: list[RankLook], c: Coll) -> str:
    who = ranks_label([r.rank for r in ranks])
    size = f" with {c.size}" if c.size else ""
    if c.state is State.COMPLETED:
        head = ranks[0].head()
        then = f" and waits in {head.label}" if head else ""
        return f"{who} passed {c.op} #{c.seq}{size}{then}"
    return f"{who} {'waits' if len(ranks) == 1 else 'wait'} in {c.op} #{c.seq}{size}" + _at_file(ranks[0].where)


def _at_file(where: str) -> str:
    """' at engine.py:1234' of 'barrier at engine.py:1234'."""
    return f" at {where.split(' at ', 1)[1]}" if " at " in where else ""


def _waits(r: RankLook) -> str:
    h = r.head()
    return h.label if h else ""


def _place(r: RankLook, plural: bool) -> str:
    """Where a rank is instead: 'waits in barrier at engine.py:1234', 'waits in BARRIER #1 (...)'."""
    if r.absent:
        return r.absent
    verb = "wait" if plural else "waits"
    head = r.head()
    if head is not None:
        return f"{verb} in {head.label}" + _at_file(r.where)
    return f"{verb} in {r.where}" if r.where else ("are" if plural else "is") + " outside any collective"


def _groups(ranks: Sequence[RankLook]) -> list[str]:
    names = {c.group for r in ranks for c in r.colls}
    return sorted(names, key=lambda g: (g not in _DEFAULT_GROUPS, g))


def _columns(ranks: Sequence[RankLook], mismatch: Mismatch | None, n: int) -> tuple[tuple[str, int], ...]:
    """A window of sequence numbers around the mismatch (else the lowest wait), newest kept."""
    heads = [h for h in (r.head() for r in ranks) if h is not None]
    if mismatch is not None:
        group, anchor = mismatch.group, mismatch.seq
    elif heads:
        first = min(heads, key=lambda c: (c.group not in _DEFAULT_GROUPS, c.group, c.seq))
        group, anchor = first.group, first.seq
    else:
        groups = _groups(ranks)
        if not groups:
            return ()
        group = groups[0]
        anchor = max(c.seq for r in ranks for c in r.colls if c.group == group)
    seqs = sorted({c.seq for r in ranks for c in r.colls if c.group == group})
    before = [s for s in seqs if s < anchor][-(n // 2):]
    after = [s for s in seqs if s >= anchor][: n - len(before)]
    keys = [(group, s) for s in before + after]
    keys += [(h.group, h.seq) for h in heads if h.group != group and (h.group, h.seq) not in keys]
    return tuple(keys[: n + 2])


def group_rows(ranks: Sequence[RankLook], columns: Sequence[tuple[str, int]]) -> list[Row]:
    """One row per set of ranks alike in every shown column, in their wait and their place."""
    rows: dict[tuple, Row] = {}
    for r in sorted(ranks, key=lambda x: x.rank):
        cells = tuple(_cell(r, g, s) for g, s in columns)
        key = (tuple(_cell_key(c) for c in cells), _waits(r), r.where, r.absent)
        old = rows.get(key)
        rows[key] = Row(ranks=(*old.ranks, r.rank), cells=old.cells, head=old.head, where=old.where,
                        stack=old.stack, absent=old.absent) if old else \
            Row(ranks=(r.rank,), cells=cells, head=r.head(), where=r.where, stack=r.stack, absent=r.absent)
    return sorted(rows.values(), key=lambda row: row.ranks[0])


def _cell(r: RankLook, group: str, seq: int) -> Coll | Cell:
    c = r.entry(group, seq)
    if c is not None:
        return c
    span = r.span(group)
    return Cell.NOT_ENTERED if span and span[1] < seq else Cell.UNKNOWN


def _cell_key(c: Coll | Cell) -> tuple:
    return (c.value,) if isinstance(c, Cell) else (c.op, c.numel_in, c.numel_out, c.state.value)


def wait_summary(rows: Sequence[Row]) -> str:
    """'ranks 0–255 wait in _ALLGATHER_BASE #120 (2048 elements), ranks 256–511 in … #119 (…)'."""
    parts = []
    for row in rows:
        if row.head is not None:
            verb = "waits" if len(row.ranks) == 1 else "wait"
            parts.append(f"{row.label} {verb} in {row.head.label}" if not parts else f"{row.label} in {row.head.label}")
        elif row.absent:
            parts.append(f"{row.label}: {row.absent}")
        elif row.where:
            parts.append(f"{row.label}: no collective pending, in {row.where}")
    if len(parts) > 8:
        parts = parts[:8] + [f"… and {len(parts) - 8} more groups of ranks"]
    return ", ".join(parts)


def _by_key(ranks: Sequence[RankLook], key) -> list[list[RankLook]]:
    out: dict[object, list[RankLook]] = {}
    for r in ranks:
        out.setdefault(key(r), []).append(r)
    return sorted(out.values(), key=lambda rs: rs[0].rank)


def ranks_label(ranks: Sequence[int]) -> str:
    """'rank 3', 'ranks 0–255', 'ranks 0, 2, 4–7'."""
    rs = sorted(set(ranks))
    if len(rs) == 1:
        return f"rank {rs[0]}"
    spans, start = [], rs[0]
    for a, b in zip(rs, rs[1:] + [None]):
        if b != a + 1:
            spans.append(str(start) if start == a else f"{start}–{a}")
            start = b
    text = ", ".join(spans[:6]) + (f", … ({len(rs)} ranks)" if len(spans) > 6 else "")
    return f"ranks {text}"


# ------------------------------------------------------------------ terminal


_CELL_STYLE = {State.COMPLETED: "green", State.STARTED: "bold yellow", State.PENDING: "yellow"}


def rank_text(view: RankView) -> Group:
    """The words (the mismatch in red), then the table."""
    lines = [Text(safe(w), style="bold red" if view.mismatch and w == view.mismatch.words else "")
             for w in view.words]
    return Group(*lines, rank_table(view))


def same_rows(a: RankView, b: RankView) -> bool:
    """Whether two looks saw the ranks alike (nothing moved between them)."""
    return (a.columns, a.rows) == (b.columns, b.rows)


def rank_table(view: RankView) -> Table:
    """The compact rank × sequence-number table for ``dsbisect show`` (rich, never markup)."""
    table = Table(title=Text(safe(view.title)), header_style="bold", title_justify="left")
    table.add_column("ranks")
    for group, seq in view.columns:
        mark = "!" if view.mismatch and (view.mismatch.group, view.mismatch.seq) == (group, seq) else ""
        on = "" if group in _DEFAULT_GROUPS else f" {group}"
        table.add_column(Text(f"#{seq}{on}{mark}", style="bold red" if mark else ""), overflow="fold")
    table.add_column("where", overflow="fold")
    for row in view.rows:
        cells = [_text_cell(c, row.head) for c in row.cells]
        table.add_row(Text(row.label), *cells, Text(safe(row.absent or row.where or "—")))
    if view.hidden:
        table.add_row(Text(f"… {view.hidden} more groups"), *[Text("") for _ in view.columns], Text(""))
    return table


def _text_cell(c: Coll | Cell, head: Coll | None) -> Text:
    if isinstance(c, Cell):
        return Text("·" if c is Cell.NOT_ENTERED else "?", style="dim")
    word = {State.COMPLETED: "done", State.STARTED: "started", State.PENDING: "pending"}[c.state]
    size = "" if c.numel_in is None else f" {c.numel_in}"
    style = "bold " + _CELL_STYLE[c.state] if head is not None and c == head else _CELL_STYLE[c.state]
    return Text(safe(f"{_short(c.op)}{size} {word}"), style=style)


def _short(op: str) -> str:
    return op.strip("_").replace("ALLGATHER", "AG").replace("ALLREDUCE", "AR").replace("REDUCE_SCATTER", "RS")
