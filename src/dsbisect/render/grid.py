"""The grid of a ``run``: one table per case, readable at 80 columns.

Each case gets its own table: its two largest moving axes as rows and columns (seed 2:
deepspeed × transformers), a one-axis case one column of outcomes, further axes in the row
label; rows and columns in PEP 440 order, whatever order the points ran in; each cell names
its run (``HANG 62 s #2``); what every point held fixed is said once under the table.  A
case that skipped everywhere for one reason is a line, shared with the other cases that
skipped for it.  Piped output (not a terminal) keeps every signature and reason whole on a
line of its own.

Pure: records in, rich renderables and Markdown out; ``report`` adds the environment.  The
cells, the grid and its order are ``gridmodel``'s; this module lays them out.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass, replace

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from rich.console import Console, ConsoleOptions, RenderResult
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from dsbisect.core.model import Outcome, Point
from dsbisect.core.outside import safe, safe_text
from dsbisect.render import pointaxes
from dsbisect.records.run import SkipCause
from dsbisect.render.gridmodel import (ICON, MAX_COLUMNS, RANK, STYLE, Cell, Grid, Variant, cell, displayable, grid,
                                       named, point_values, variants, version_key)

# this module's own, and the model's names callers import from here (their home is gridmodel)
__all__ = ["FOLD", "CaseView", "GridView", "case_views", "details", "line", "markdown", "md", "skip_lines", "tables",
           "ICON", "RANK", "STYLE", "Cell", "Grid", "Variant", "cell", "displayable", "grid", "named", "variants"]


# ------------------------------------------------------------------ one case


@dataclass(frozen=True)
class CaseView:
    """One case laid out as a table: ``cells[(row, column)]``; ``column`` is "" for a one-axis case."""

    case: str
    row_axis: str  # the rows' header: an axis name, with the extra axes in the labels
    col_axis: str | None  # None: one column of outcomes
    rows: tuple[str, ...]
    cols: tuple[str, ...]
    cells: dict[tuple[str, str], Cell]
    held: tuple[str, ...]  # axes with one value, and the pins every point held
    commands: tuple[str, ...]
    same_as: tuple[str, ...] = ()  # Variant.same_as
    common: tuple[str, ...] = ()  # rows labelled by how they differ from the reference point's versions ("a 1.0")

    @property
    def all_cells(self) -> list[Cell]:
        return list(self.cells.values())

    def skipped(self) -> str | None:
        """The reason, when every point of the case skipped for that one reason."""
        whys = {c.why for c in self.all_cells if c.outcome is Outcome.SKIP}
        if len(whys) == 1 and all(c.outcome is Outcome.SKIP for c in self.all_cells):
            return whys.pop()
        return None

    def skip_cause(self) -> SkipCause | None:
        """The cause the runs record, when every point of the case skipped for one reason."""
        causes = {c.shown.skip_cause for c in self.all_cells}
        return causes.pop() if self.skipped() is not None and len(causes) == 1 else None

    def coordinate(self, key: tuple[str, str]) -> str:
        return f"{key[0]} × {key[1]}" if self.col_axis else key[0]


def case_views(g: Grid) -> list[CaseView]:
    same = {v.label: v.same_as for v in g.variants}
    return [replace(_case_view(g, case), same_as=same.get(case, ())) for case in g.cases]


def _case_view(g: Grid, case: str) -> CaseView:
    found = [(label, row[case]) for label, row in g.rows if case in row]
    points = [c.runs[0].point for _, c in found]
    named_axes = pointaxes.axis_names(points)  # a package moved somewhere: its pinned version is its value elsewhere
    values = [pointaxes.from_pins(point_values(p), p, named_axes) for p in points]
    held_of = [[x for x in _held_pins(p) if not pointaxes.on_an_axis(x, named_axes)] for p in points]
    common_pins = set.intersection(*(set(h) for h in held_of)) if points else set()
    extra_pins = [", ".join(x for x in h if x not in common_pins) for h in held_of]
    if any(extra_pins):  # points of one case that held different pins: the pins are an axis too
        for v, pins in zip(values, extra_pins):
            v["pins"] = pins or "—"
    axes = list(dict.fromkeys(name for v in values for name in v))
    distinct = {a: list(dict.fromkeys(v.get(a, "—") for v in values)) for a in axes}
    moving = [a for a in axes if len(distinct[a]) > 1] or axes[:1]
    if len(moving) > pointaxes.MANY:  # more than a table has room for: each row says how it differs
        return _apart_view(case, found, values, moving, axes, distinct, held_of[0] if points else [], common_pins)
    largest = sorted(moving, key=lambda a: (-len(distinct[a]), moving.index(a)))[:2]
    pair = [a for a in moving if a in largest]  # the two largest, in the order the case declares them
    if len(pair) == 2 and len(distinct[pair[1]]) > max(MAX_COLUMNS, len(distinct[pair[0]])):
        pair.reverse()
    row_axis = pair[0] if pair else None
    col_axis = pair[1] if len(pair) > 1 else None
    extras = [a for a in moving if a not in pair]

    cells: dict[tuple[str, str], Cell] = {}
    row_keys: dict[str, tuple] = {}
    col_keys: dict[str, tuple] = {}
    for (label, c), v in zip(found, values):
        row = v.get(row_axis, "—") if row_axis else label
        row_key = [version_key(row)]
        for a in extras:
            row += f", {a} {v.get(a, '—')}"
            row_key.append(version_key(v.get(a, "—")))
        col = v.get(col_axis, "—") if col_axis else ""
        row_keys[row] = tuple(row_key)
        col_keys[col] = version_key(col)
        cells[(row, col)] = c
    held = [f"{a} {distinct[a][0]}" for a in axes if a not in moving and "—" not in distinct[a]]
    held += [pin for pin in _held_pins(points[0]) if pin in common_pins] if points else []
    commands = [shlex.join(str(a) for a in c.shown.facts.command) for _, c in found
                if c.shown.facts.command is not None]
    return CaseView(
        case=case,
        row_axis=", ".join([row_axis or "point", *extras]),
        col_axis=col_axis,
        rows=tuple(sorted(row_keys, key=lambda r: row_keys[r])),
        cols=tuple(sorted(col_keys, key=lambda c: col_keys[c])),
        cells=cells, held=tuple(held), commands=tuple(dict.fromkeys(commands)))


def _apart_view(case: str, found, values, moving, axes, distinct, pins, common_pins) -> CaseView:
    """A case whose points differ in many packages: one column of outcomes, each row labelled
    by how its point differs from the point that ran first (its versions said once, as ``common``)."""
    first = min(range(len(found)), key=lambda i: min(r.id for r in found[i][1].runs))
    apart = pointaxes.apart(values, moving, first)
    cells = {(label, ""): c for label, (_, c) in zip(apart.labels, found)}
    order = sorted(range(len(found)), key=lambda i: (apart.labels[i] != pointaxes.REFERENCE, i))
    held = [f"{a} {distinct[a][0]}" for a in axes if a not in moving and "—" not in distinct[a]]
    held += [pin for pin in pins if pin in common_pins]
    commands = [shlex.join(str(a) for a in c.shown.facts.command) for _, c in found
                if c.shown.facts.command is not None]
    return CaseView(case=case, row_axis="point", col_axis=None, rows=tuple(apart.labels[i] for i in order),
                    cols=("",), cells=cells, held=tuple(held), commands=tuple(dict.fromkeys(commands)),
                    common=apart.reference)


def _held_pins(p: Point) -> list[str]:
    """The pins the point holds that are not one of its axes."""
    moved = {canonicalize_name(n) for n, _ in p.versions}
    out = []
    for pin in p.pins:
        try:
            name = canonicalize_name(Requirement(pin).name)
        except InvalidRequirement:
            name = ""
        if name not in moved:
            out.append(pin)
    return out


# ---------------------------------------------------------- skipped everywhere


def skip_lines(views: list[CaseView]) -> list[tuple[str, str]]:
    """(text, hint) for the cases that skipped everywhere, one per reason: ``12 points of 3
    cases (…) need 2 CUDA GPUs; this machine has 0`` and ``try --case cpu_smoke`` when the
    reason is the machine's and another case did run."""
    by_reason: dict[tuple[str, SkipCause | None], list[CaseView]] = {}
    for v in views:
        why = v.skipped()
        if why is not None:
            by_reason.setdefault((why, v.skip_cause()), []).append(v)
    ran = next((v.case for v in views if v.skipped() is None
                and any(c.outcome is not Outcome.SKIP for c in v.all_cells)), None)
    out = []
    for (why, cause), vs in by_reason.items():
        n = sum(len(v.cells) for v in vs)
        points = f"{n} point{'s' if n != 1 else ''}"
        subject = f"{points} of {vs[0].case}" if len(vs) == 1 else \
            f"{points} of {len(vs)} cases ({', '.join(v.case for v in vs)})"
        if cause is SkipCause.GPUS:  # the runner's "needs N CUDA GPUs; ..." as the subject's verb
            text = f"{subject} {'need' if n != 1 else 'needs'} {why.removeprefix('needs ')}"
        else:
            text = f"{subject}: {why or 'no reason recorded'}"
        hint = f"try --case {ran}" if ran and cause is not None and cause.machine else ""
        out.append((text, hint))
    return out


# ------------------------------------------------------------------- terminal


def details(view: CaseView) -> list[tuple[Outcome, str, str]]:
    """(outcome, where, why) for the cells that did not pass, one per distinct reason:
    ``where`` lists the cells' run ids and coordinates, e.g. ``#2 (0.9.5 × 4.37.0), #6 (…)``
    (the first two and a count beyond three)."""
    groups: dict[tuple[Outcome, str], list[str]] = {}
    for row in view.rows:
        for col in view.cols:
            c = view.cells.get((row, col))
            if c is not None and c.outcome is not Outcome.PASS and c.why:
                groups.setdefault((c.outcome, c.why), []).append(f"#{c.shown.id} ({view.coordinate((row, col))})")
    out = []
    for (o, why), where in sorted(groups.items(), key=lambda kv: RANK[kv[0][0]]):
        listed = ", ".join(where) if len(where) <= 3 else f"{', '.join(where[:2])} and {len(where) - 2} more"
        out.append((o, listed, why))
    return out


class GridView:
    """The grid as a rich renderable; ``piped`` None: decided by the console (not a terminal: piped)."""

    def __init__(self, g: Grid, title: str = "", piped: bool | None = None):
        self.grid = g
        self.title = title
        self.piped = piped

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        piped = self.piped if self.piped is not None else not console.is_terminal
        width = options.max_width
        views = case_views(self.grid)
        if self.title:
            yield safe_text(self.title, style="bold")
        for view in views:
            if view.skipped() is not None:
                continue
            yield Text("")
            yield line(view.case, piped, style="bold")
            yield from tables(view, width)
            if view.same_as:
                yield line(f"the same runs as {', '.join(view.same_as)} (one script and settings: one case key)",
                           piped, style="dim")
            if view.common:
                yield line(f"{pointaxes.REFERENCE} (each other row says how it differs): " + ", ".join(view.common),
                       piped, style="dim")
            if view.held:
                yield line("held fixed: " + ", ".join(view.held), piped, style="dim")
            for cmd in view.commands[:2]:
                yield line(f"command: {cmd}", piped, style="dim")
            for outcome, where, why in details(view):
                yield line(f"{outcome.value.upper()} {where}:", piped, style=STYLE[outcome])
                yield line(why, piped, indent=2)
        skips = skip_lines(views)
        if skips:
            yield Text("")
        for text, hint in skips:
            yield line(f"SKIP {text}" + (f" — {hint}" if hint else ""), piped, style=STYLE[Outcome.SKIP])


def line(text: str, piped: bool, style: str = "", indent: int = 0):
    """One logical line: whole on one line when piped, wrapped under its indent on a terminal
    (outside text: redacted, inert, never markup)."""
    text = safe(text)
    if piped:
        return Text(" " * indent + text, style=style, no_wrap=True, overflow="ignore")
    t = Text(text, style=style, no_wrap=False, overflow="fold")
    return Padding(t, (0, 0, 0, indent), expand=False) if indent else t


def tables(view: CaseView, width: int) -> Iterable[Table]:
    """The case's table; split into several (the same rows, fewer columns) where it would not fit."""
    heads = {col: _col_header(view, col) for col in view.cols}
    lines = {k: _cell_lines(c) for k, c in view.cells.items()}
    label_w = max([len(view.row_axis), *(len(r) for r in view.rows)]) + 3
    col_w = {col: max([*(len(h) for h in heads[col].split("\n")),
                       *(len(x) for r in view.rows for x in lines.get((r, col), ["—"]))]) + 3 for col in view.cols}
    chunks: list[list[str]] = [[]]
    used = 1 + label_w
    for col in view.cols:
        if chunks[-1] and used + col_w[col] > width:
            chunks.append([])
            used = 1 + label_w
        chunks[-1].append(col)
        used += col_w[col]
    for cols in chunks:
        table = Table(header_style="bold", show_lines=any(len(lines[k]) > 1 for k in lines))
        table.add_column(safe_text(view.row_axis), overflow="fold")
        for col in cols:
            table.add_column(safe_text(heads[col]), no_wrap=True)
        for row in view.rows:
            cells = []
            for col in cols:
                c = view.cells.get((row, col))
                cells.append(safe_text("\n".join(lines[(row, col)]), style=STYLE[c.outcome]) if c
                             else Text("—", style="dim"))
            table.add_row(safe_text(row), *cells)
        yield table


def _col_header(view: CaseView, col: str) -> str:
    return f"{view.col_axis}\n{col}" if view.col_axis else "outcome"


def _cell_lines(c: Cell) -> list[str]:
    return [c.head] + [x for x in (c.tally, c.number) if x]


# ------------------------------------------------------------------- markdown


def markdown(g: Grid) -> list[str]:
    """The tables, reasons and skip lines as Markdown lines (no title, no environment)."""
    views = case_views(g)
    out: list[str] = []
    for view in views:
        if view.skipped() is not None:
            continue
        out += [f"#### {md(view.case)}", ""]
        if view.col_axis:
            out.append(f"| {md(view.row_axis)} ↓ {md(view.col_axis)} → | "
                       + " | ".join(f"{md(view.col_axis)} {md(c)}" for c in view.cols) + " |")
        else:
            out.append(f"| {md(view.row_axis)} | outcome |")
        out.append("|---|" + "---|" * len(view.cols))
        for row in view.rows:
            cells = []
            for col in view.cols:
                c = view.cells.get((row, col))
                cells.append(f"{ICON[c.outcome]} {c.text}" if c else "—")
            label = row if view.row_axis == "point" else f"{view.row_axis.split(', ')[0]} {row}"
            out.append(f"| {md(label)} | " + " | ".join(cells) + " |")
        out.append("")
        if view.same_as:
            out += [f"the same runs as {md(', '.join(view.same_as))} (one script and settings: one case key)", ""]
        if view.common:
            out += [_folded(f"{pointaxes.REFERENCE} ({len(view.common)} packages; each other row says how it differs)",
                            ", ".join(f"`{md(h).replace('`', '')}`" for h in view.common)), ""]
        if view.held:
            out += [_folded(f"held fixed ({len(view.held)})", ", ".join(f"`{md(h).replace('`', '')}`" for h in view.held))
                    if len(view.held) > FOLD else "held fixed: " + ", ".join(f"`{md(h).replace('`', '')}`"
                                                                         for h in view.held), ""]
        for outcome, where, why in details(view):
            out.append(f"- {ICON[outcome]} {outcome.value.upper()} {md(where)}: {md(why)}")
        out.append("")
    for text, hint in skip_lines(views):
        out.append(f"- {ICON[Outcome.SKIP]} SKIP {md(text)}" + (f" — {hint.replace('try ', 'try `')}`" if hint else ""))
    return out


FOLD = 6  # held pins beyond which the Markdown folds them


def _folded(summary: str, body: str) -> str:
    """A ``<details>`` block: the summary line shown, the body folded under it."""
    return f"<details><summary>{md(summary)}</summary>\n\n{body}\n\n</details>"


def md(s: str) -> str:
    """Outside text for a Markdown table cell or list item: safe, on one line, no cell break."""
    return safe(s or "").replace("|", "\\|").replace("\n", " ")
