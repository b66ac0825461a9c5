"""A case's number in the run grid (issue 38): a matrix case that declares ``metric: NAME[@stepN][@AGG]``
shows, in each cell beside PASS/FAIL, the median of the runs' values of that metric (and their
spread when more than one run gave it); the JSON cell carries every value.  A run that did not
pass, or gave no such reading, adds none.  Pure: the values come from the runs' records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from dsbisect.core.errors import InputError
from dsbisect.core.metric import MetricSpec, parse_metric, run_value
from dsbisect.core.model import Outcome
from dsbisect.render.grid import Cell, Grid
from dsbisect.verdict.numbers import Summary

__all__ = ["cell_json", "with_metrics"]


def with_metrics(g: Grid, metrics: Mapping[str, str]) -> Grid:
    """``g`` with each cell of a case named in ``metrics`` (case name -> ``NAME[@stepN][@AGG]``)
    showing that metric's value."""
    if not metrics:
        return g
    name_of = {v.label: v.name for v in g.variants}
    specs = {name: parse_metric(text, "differs by 1%") for name, text in metrics.items()}
    rows = tuple((label, {case: _numbered(c, specs.get(name_of.get(case, case))) for case, c in row.items()})
                 for label, row in g.rows)
    return replace(g, rows=rows)


def _numbered(c: Cell, spec: MetricSpec | None) -> Cell:
    if spec is None:
        return c
    values, unit = [], ""
    for r in c.runs:
        if r.outcome is not Outcome.PASS:
            continue
        try:
            got = run_value(r.evidence.numbers, spec)
        except InputError:  # units that do not convert: not a value
            got = None
        if got is not None:
            values.append(got.value)
            unit = unit or got.unit
    if not values:
        return replace(c, number=f"{spec.label}: no reading")
    s = Summary.of(values)
    runs = f" ({len(values)} runs)" if len(values) > 1 else ""
    return replace(c, number=f"{spec.label} {s.describe(unit)}{runs}", values=tuple(values), unit=unit)


def cell_json(c: Cell) -> dict:
    """The cell's ``metric`` key (nothing for a case without one)."""
    if not c.number:
        return {}
    s = Summary.of(c.values) if c.values else None
    return {"metric": {"shown": c.number, "values": list(c.values), "unit": c.unit,
                       "median": s.median if s else None, "spread": s.spread if s else None}}
