"""A regression as a number: what to measure (``MetricSpec``, from ``--metric`` and
``--worse-if``), one number a run reported or dsbisect measured (``Reading``), and what a
comparison of two samples of runs says (``Comparison``).  Pure values; no I/O.

``--metric NAME[@stepN][@AGG]``: the readings called NAME (at step N only, with ``@stepN``),
folded into one number per run by AGG (median, mean, max, min, first, last; by default max for
what dsbisect measures as a peak or a total, median otherwise).
``--worse-if 'lower by 5%'``: the direction (lower, higher, differs) and the smallest change that
counts, relative (``%``, of the good end's median) or absolute in a unit (``higher by 200 MB``).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from dsbisect.core.errors import InputError

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]{0,63}$")


class Direction(enum.Enum):
    """Which way the number moves when it gets worse."""

    LOWER = "lower"  # throughput, accuracy
    HIGHER = "higher"  # time, memory, loss
    DIFFERS = "differs"  # any move: a value that should reproduce (a loss at a fixed step)


class Aggregate(enum.Enum):
    """How a run's readings of one metric (many steps, many ranks) become the run's number."""

    MEDIAN = "median"
    MEAN = "mean"
    MAX = "max"
    MIN = "min"
    FIRST = "first"
    LAST = "last"

    def fold(self, values: list[float]) -> float:
        if self is Aggregate.FIRST:
            return values[0]
        if self is Aggregate.LAST:
            return values[-1]
        if self is Aggregate.MAX:
            return max(values)
        if self is Aggregate.MIN:
            return min(values)
        if self is Aggregate.MEAN:
            return sum(values) / len(values)
        return median(values)


class Source(enum.Enum):
    """Where a reading came from."""

    MEASURED = "measured"  # by dsbisect itself: wall time, peak RSS, peak CUDA memory, step time
    PATTERN = "pattern"  # a line matching the user's pattern
    JSONL = "jsonl"  # the JSON-lines file whose path dsbisect passed in DSBISECT_METRICS
    HF_TRAINER = "hf-trainer"  # the dicts the Hugging Face Trainer prints
    DEEPSPEED = "deepspeed"  # DeepSpeed's throughput, progress and timer lines
    ACCELERATE = "accelerate"  # the ``epoch N: {...}`` lines of accelerate's example scripts


class Call(enum.Enum):
    """What the runs say of a change: BAD, worse by at least the threshold beyond the noise; GOOD,
    surely not that much worse; UNKNOWN, the runs cannot tell yet."""

    GOOD = "good"
    BAD = "bad"
    UNKNOWN = "unknown"


# What dsbisect measures itself (phase 2 of issue 38), with the unit it records and its fold.
MEASURED = {"wall_time": ("s", Aggregate.MAX), "peak_rss": ("B", Aggregate.MAX),
            "peak_gpu_mem": ("B", Aggregate.MAX), "step_time": ("s", Aggregate.MEDIAN)}

# Units dsbisect converts between: the factor to the dimension's base unit.
UNITS = {
    "B": ("bytes", 1.0), "kB": ("bytes", 1e3), "KB": ("bytes", 1e3), "MB": ("bytes", 1e6),
    "GB": ("bytes", 1e9), "TB": ("bytes", 1e12), "KiB": ("bytes", 2.0 ** 10),
    "MiB": ("bytes", 2.0 ** 20), "GiB": ("bytes", 2.0 ** 30), "TiB": ("bytes", 2.0 ** 40),
    "ns": ("seconds", 1e-9), "us": ("seconds", 1e-6), "ms": ("seconds", 1e-3), "s": ("seconds", 1.0),
    "min": ("seconds", 60.0), "h": ("seconds", 3600.0),
}


@dataclass(frozen=True)
class Reading:
    """One number from one run: its name, value and unit ("" when it has none), the rank that
    reported it and the training step it belongs to (None: not known), and where it came from."""

    name: str
    value: float
    unit: str = ""
    rank: int | None = None
    step: int | None = None
    source: Source = Source.PATTERN


@dataclass(frozen=True)
class Threshold:
    """The smallest change that counts: a fraction of the good end's median (``relative``), or an
    amount in ``unit`` ("" for a bare number)."""

    amount: float
    relative: bool
    unit: str = ""

    def describe(self) -> str:
        if self.relative:
            return f"{self.amount * 100:g} %"
        return f"{self.amount:g} {self.unit}".rstrip()


@dataclass(frozen=True)
class MetricSpec:
    name: str
    direction: Direction
    threshold: Threshold
    step: int | None = None
    aggregate: Aggregate | None = None  # None: the default for the name (see ``fold``)

    @property
    def fold(self) -> Aggregate:
        if self.aggregate is not None:
            return self.aggregate
        return MEASURED.get(self.name, ("", Aggregate.MEDIAN))[1]

    @property
    def label(self) -> str:
        """``loss@step50``: the metric as the user named it."""
        at = f"@step{self.step}" if self.step is not None else ""
        return f"{self.name}{at}{'@' + self.aggregate.value if self.aggregate else ''}"

    def describe(self) -> str:
        """``samples_per_sec, worse if lower by 5 %``."""
        return f"{self.label}, worse if {self.direction.value} by {self.threshold.describe()}"


@dataclass(frozen=True)
class Comparison:
    """How much worse the runs of ``after`` are than those of ``before``: the estimate and its
    bounds, in the spec's terms (a fraction of the good end's median, or the threshold's unit);
    positive is worse.  With ``Direction.DIFFERS`` the estimate is the signed change and the call
    looks at its size.  ``exact``: every run of both gave one value (no noise to judge)."""

    effect: float
    low: float
    high: float
    call: Call
    exact: bool = False


def parse_metric(text: str, worse_if: str) -> MetricSpec:
    """The spec from ``--metric`` and ``--worse-if``; an ``InputError`` (one line) for bad input."""
    name, step, aggregate = parse_name(text)
    direction, threshold = parse_worse_if(worse_if)
    return MetricSpec(name, direction, threshold, step, aggregate)


def parse_name(text: str) -> tuple[str, int | None, Aggregate | None]:
    name, *parts = (text or "").strip().split("@")
    if not NAME.match(name):
        raise InputError(f"--metric {text!r}: a metric name is letters, digits and _ . / - "
                         "(e.g. samples_per_sec, loss@step50, peak_gpu_mem@max)")
    step, aggregate = None, None
    for part in parts:
        if (m := re.fullmatch(r"step(\d{1,9})", part)) and step is None:
            step = int(m.group(1))
        elif part in {a.value for a in Aggregate} and aggregate is None:
            aggregate = Aggregate(part)
        else:
            words = ", ".join(a.value for a in Aggregate)
            raise InputError(f"--metric {text!r}: after @ comes stepN or one of {words}, each at most once")
    return name, step, aggregate


_WORSE = re.compile(r"^\s*(lower|higher|differs)\s+by\s+([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)\s*(%|[A-Za-z/_]{1,16})?\s*$")


def parse_worse_if(text: str) -> tuple[Direction, Threshold]:
    m = _WORSE.match(text or "")
    if not m:
        raise InputError(f"--worse-if {text!r}: say 'lower by N%', 'higher by N%' or 'differs by N%' "
                         "(or an amount in a unit: 'higher by 200 MB')")
    direction, amount, unit = Direction(m.group(1)), float(m.group(2)), m.group(3) or ""
    if unit == "%":
        if direction is Direction.LOWER and amount >= 100:
            raise InputError(f"--worse-if {text!r}: a number cannot get lower by 100 % or more")
        return direction, Threshold(amount / 100, True)
    return direction, Threshold(amount, False, unit)


def convert(value: float, unit: str, to: str) -> float:
    """``value`` in ``unit`` expressed in ``to``: between the byte units, between the time units,
    or the same unit; an ``InputError`` when the two do not measure the same thing."""
    if unit == to:
        return value
    a, b = UNITS.get(unit), UNITS.get(to)
    if a is None or b is None or a[0] != b[0]:
        raise InputError(f"cannot compare {unit or 'a bare number'} with {to or 'a bare number'}: "
                         "give the threshold in the metric's unit or as a percentage")
    return value * a[1] / b[1]


@dataclass(frozen=True)
class RunValue:
    """The one number a run gives for a spec, in ``unit``, from ``count`` readings."""

    value: float
    unit: str
    count: int


def run_value(readings: tuple[Reading, ...] | list[Reading], spec: MetricSpec) -> RunValue | None:
    """The run's number for ``spec``: its readings of the metric (at the step, with ``@stepN``),
    in one unit (the threshold's when it has one, else the first reading's), folded by the spec's
    aggregate in the order reported.  None: the run reported no such reading."""
    chosen = [r for r in readings if r.name == spec.name and (spec.step is None or r.step == spec.step)]
    if not chosen:
        return None
    unit = spec.threshold.unit if not spec.threshold.relative and spec.threshold.unit else chosen[0].unit
    values = [convert(r.value, r.unit, unit) for r in chosen]
    return RunValue(spec.fold.fold(values), unit, len(values))


def median(values) -> float:
    s = sorted(values)
    if not s:
        raise ValueError("the median of nothing")
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


# ------------------------------------------------------------------ a change in words

PERCENT_LIMIT = 1e5  # a change over this many times its reference: the reference is ~0 next to it
FACTOR_FROM = 10.0  # a change of this many times its reference or more reads better as a factor


def percent_undefined(reference: float, change: float) -> bool:
    """A percentage of ``reference`` means nothing: it is 0, or ``change`` is over
    ``PERCENT_LIMIT`` times it (the reference is ~0 next to the values compared: 1 KiB of
    CUDA memory against 256 MiB)."""
    return reference == 0 or abs(change) > PERCENT_LIMIT * abs(reference)


def change_text(before: float, after: float, reference: float, unit: str = "") -> str:
    """``+10.0 %`` of ``reference``; ``×1,111`` (after over before) for a change of ``FACTOR_FROM``
    times the reference or more; where a percentage is undefined (``percent_undefined``), the
    amount: ``+256 MiB (% undefined: the good end is ~0)``."""
    change = after - before
    if percent_undefined(reference, change):
        return (f"{change:+.3g}{' ' + unit if unit else ''} (% undefined: the good end is "
                f"{'0' if reference == 0 else '~0'})").replace("-", "−", 1)
    if abs(change) >= FACTOR_FROM * abs(reference) and before and after / before > 0:
        return f"×{after / before:,.3g}" if after / before < 100 else f"×{after / before:,.0f}"
    return f"{100 * change / abs(reference):+.1f} %".replace("-", "−")
