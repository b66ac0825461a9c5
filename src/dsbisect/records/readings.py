"""A run's numbers as its record keeps them: ``evidence.readings`` of run.json (issue 38).

Each reading is one object, ``{"name", "value", "source"}`` and, where known, ``"unit"``,
``"rank"`` and ``"step"`` (a key that would be empty is left out, to keep a run's record small).
A value that JSON cannot hold (NaN, an infinity) is written as the string ``"nan"``, ``"inf"`` or
``"-inf"``, and read back as the float.  A record keeps at most ``MAX_KEPT`` readings: what
dsbisect measured and what the script wrote to its ``DSBISECT_METRICS`` file first, then what
was read from its output, in the order found; ``kept`` says how many were left out.

Reading back is lenient, as every reader of a record is: an entry that is not a reading (a
hand-edited record, a newer dsbisect's) is passed over.  Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from dsbisect.core.metric import NAME, Reading, Source

__all__ = ["MAX_KEPT", "Kept", "from_json", "kept", "to_json"]

MAX_KEPT = 10_000
_FIRST = (Source.MEASURED, Source.JSONL)  # kept before the readings of the run's output


@dataclass(frozen=True)
class Kept:
    """The readings a record keeps, and how many of the run's were left out."""

    readings: tuple[Reading, ...]
    dropped: int = 0


def kept(readings: Iterable[Reading], limit: int = MAX_KEPT) -> Kept:
    """At most ``limit`` of ``readings``: the measured and the script's own file's first."""
    every = list(readings)
    first = [r for r in every if r.source in _FIRST]
    rest = [r for r in every if r.source not in _FIRST]
    chosen = (first + rest)[:limit]
    return Kept(tuple(chosen), len(every) - len(chosen))


def _value(v: float) -> float | str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def to_json(readings: Sequence[Reading]) -> list[dict]:
    """The readings as run.json keeps them."""
    out = []
    for r in readings:
        d: dict = {"name": r.name, "value": _value(r.value)}
        if r.unit:
            d["unit"] = r.unit
        if r.rank is not None:
            d["rank"] = r.rank
        if r.step is not None:
            d["step"] = r.step
        d["source"] = r.source.value
        out.append(d)
    return out


def _number(raw: object) -> float | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, (int, float)):
        return float(raw)
    if raw in ("nan", "inf", "-inf"):
        return float(raw)
    return None


def _count(raw: object) -> int | None:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 else None


def from_json(value: object) -> tuple[Reading, ...]:
    """The readings of a record's ``evidence.readings`` (what is not one is passed over)."""
    if not isinstance(value, (list, tuple)):
        return ()
    out = []
    for d in value:
        if not isinstance(d, Mapping):
            continue
        name, number = d.get("name"), _number(d.get("value"))
        if not isinstance(name, str) or not NAME.match(name) or number is None:
            continue
        unit = d.get("unit") if isinstance(d.get("unit"), str) else ""
        try:
            source = Source(d.get("source"))
        except ValueError:
            source = Source.PATTERN
        out.append(Reading(name, number, unit, _count(d.get("rank")), _count(d.get("step")), source))
    return tuple(out)
