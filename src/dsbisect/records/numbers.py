"""What a bisection of a number found, as its result keeps it (``numbers`` of ``bisect --format
json``, issue 38): the metric, the one-line answer, and each tested point's values.

``PointNumbers`` is one tested candidate: its label, the value of each of its runs (in the
metric's unit; a run that gave none is not among them), their median and spread, how it compares
with the good end (``worse``, ``not-worse``, ``unsure``, or ``untestable``: no run gave the
metric), and what differed in the conditions it was measured under from the ends'.
``Numbers`` is the whole: the metric as the user named it and its rule, the unit, the shape of the
change (``verdict.numbers.Shape``'s value), the one line, and the notes (a loaded machine's weak
timing verdicts, points measured under other conditions).  Pure values; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Numbers", "PointNumbers", "WORSE", "NOT_WORSE", "UNSURE", "UNTESTABLE"]

WORSE, NOT_WORSE, UNSURE, UNTESTABLE = "worse", "not-worse", "unsure", "untestable"


def _floats(value: object) -> tuple[float, ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(float(v) for v in value if isinstance(v, (int, float)) and not isinstance(v, bool))


def _strs(value: object) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, (list, tuple)) else ()


def _num(d: Mapping, key: str) -> float:
    v = d.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


@dataclass(frozen=True)
class PointNumbers:
    """One tested candidate's values and its call against the good end."""

    label: str
    values: tuple[float, ...]
    median: float
    spread: float
    call: str  # WORSE, NOT_WORSE, UNSURE or UNTESTABLE
    effect: float = 0.0  # how much worse than the good end (a fraction, or in the threshold's unit)
    conditions: tuple[str, ...] = ()  # what differed from the ends' conditions

    def describe(self, unit: str) -> str:
        """``412 ± 6 samples/s (3 runs)``, or ``no reading``."""
        if not self.values:
            return "no reading"
        spread = f" ± {self.spread:.3g}" if self.spread else ""
        return f"{self.median:.4g}{spread} {unit}".rstrip() + f" ({len(self.values)} run{'s' * (len(self.values) != 1)})"

    def to_json(self) -> dict:
        return {"label": self.label, "values": list(self.values), "median": self.median, "spread": self.spread,
                "call": self.call, "effect": self.effect, "conditions": list(self.conditions)}

    @classmethod
    def from_json(cls, d: Mapping) -> PointNumbers:
        call = d.get("call") if d.get("call") in (WORSE, NOT_WORSE, UNSURE, UNTESTABLE) else UNSURE
        return cls(str(d.get("label", "")), _floats(d.get("values")), _num(d, "median"), _num(d, "spread"),
                   call, _num(d, "effect"), _strs(d.get("conditions")))


@dataclass(frozen=True)
class Numbers:
    """A bisection of a number: the metric (``loss@step50``), its rule (``worse if lower by 5 %``),
    the unit, the shape of the change, the one-line answer, each tested point, and the notes."""

    metric: str
    rule: str
    unit: str
    shape: str
    answer: str
    points: tuple[PointNumbers, ...]
    notes: tuple[str, ...] = ()
    runs: int = 0  # runs the search used
    commit: Numbers | None = None  # the commit step's own search (``--git-repo``), its points commits

    def to_json(self) -> dict:
        return {"metric": self.metric, "rule": self.rule, "unit": self.unit, "shape": self.shape,
                "answer": self.answer, "runs": self.runs, "points": [p.to_json() for p in self.points],
                "notes": list(self.notes), **({"commit": self.commit.to_json()} if self.commit else {})}

    @classmethod
    def from_json(cls, d: object) -> Numbers | None:
        if not isinstance(d, Mapping):
            return None
        points = d.get("points") if isinstance(d.get("points"), list) else []
        runs = d.get("runs")
        return cls(str(d.get("metric", "")), str(d.get("rule", "")), str(d.get("unit", "")),
                   str(d.get("shape", "")), str(d.get("answer", "")),
                   tuple(PointNumbers.from_json(p) for p in points if isinstance(p, Mapping)),
                   _strs(d.get("notes")), runs if isinstance(runs, int) and not isinstance(runs, bool) else 0,
                   cls.from_json(d.get("commit")))

    def table(self) -> list[tuple[str, str, str]]:
        """(label, values, call) per tested point: the lines every report format shows."""
        return [(p.label, p.describe(self.unit), p.call) for p in self.points]
