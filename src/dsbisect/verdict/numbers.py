"""The decision rule for a regression as a number: two samples of runs -> worse by the threshold
beyond the noise (BAD), surely not (GOOD), or not yet known (UNKNOWN).  Pure.

The statistic is the Hodges-Lehmann shift (the median of every difference between a run of one
sample and a run of the other) with its distribution-free bounds: order statistics of those
differences taken at the exact Mann-Whitney null distribution.  Being rank-based, one wild run
moves it little; being exact for any sizes, its confidence is honest at 2-5 runs a point, where
a t-test leans on a variance it cannot estimate and a bootstrap of three values has three values.

A change is measured against the good end: a relative threshold is a fraction of the good end's
median, and BAD means the lower bound is above zero (beyond the noise) *and* the estimate reaches
the threshold; GOOD means the upper bound is below the threshold.  With ``Direction.DIFFERS`` the
bounds are two-sided.  When the good end gave one value in every one of at least
``EXACT_REFERENCE_RUNS`` runs, the metric is taken as exact: a sample of equal values is judged
on its value, with no noise to allow for.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist

from dsbisect.core.errors import InputError
from dsbisect.core.metric import Call, Comparison, Direction, MetricSpec, change_text, median

CONFIDENCE = 0.95  # per bound; what --confidence sets
EXACT_REFERENCE_RUNS = 3
EXACT_LIMIT = 2500  # n * m above which the Mann-Whitney distribution is taken as normal
HUGE = 1e300  # what a NaN or an infinity stands for: as bad as a number can be
# A good end of exactly 0 under a relative threshold: a percentage of 0 is undefined, so a change is
# divided by this instead, and any change beyond the noise is over the threshold (the answer shows
# the amount and says the percentage is undefined: ``core.metric.change_text``).
ZERO_SCALE = 1e-12


@dataclass(frozen=True)
class Summary:
    """A sample of runs in three figures: its median, its spread (the median absolute deviation
    scaled to a normal's standard deviation; 0 for one run) and how many runs."""

    median: float
    spread: float
    runs: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        mid = median(values)
        return cls(mid, 1.4826 * median([abs(v - mid) for v in values]) if len(values) > 1 else 0.0, len(values))

    def describe(self, unit: str = "") -> str:
        """``412 ± 6 samples/s`` (``412 samples/s`` for a spread of 0)."""
        spread = f" ± {self.spread:.2g}" if self.spread else ""
        return f"{self.median:.4g}{spread} {unit}".rstrip()


@dataclass(frozen=True)
class Judge:
    """The rule for one spec at one confidence: ``judge(before, after, threshold, reference)``
    compares the runs of ``after`` with those of ``before``; ``reference`` is the good end's runs
    (the scale of a relative threshold, and the test of exactness).  ``threshold`` is in the
    spec's terms: a fraction for a relative spec, an amount in its unit otherwise."""

    spec: MetricSpec
    confidence: float = CONFIDENCE

    def __post_init__(self):
        if not 0.5 < self.confidence < 1:
            raise InputError("--confidence must lie strictly between 0.5 and 1")

    def __call__(self, before: Sequence[float], after: Sequence[float], threshold: float,
                 reference: Sequence[float]) -> Comparison:
        if not before or not after or not reference:
            return Comparison(0.0, -math.inf, math.inf, Call.UNKNOWN)
        before, after = self._clean(before), self._clean(after)
        scale = self.scale(self._clean(reference))
        if exact(reference, before, after):
            return self._exact((after[0] - before[0]) / scale, threshold)
        differs = self.spec.direction is Direction.DIFFERS
        alpha = (1 - self.confidence) / (2 if differs else 1)
        est, low, high = shift(before, after, alpha)
        if self.spec.direction is Direction.LOWER:
            est, low, high = -est, -high, -low
        est, low, high = est / scale, low / scale, high / scale
        return Comparison(est, low, high, call(est, low, high, threshold, differs))

    def at(self, confidence: float) -> Judge:
        """The same rule at another confidence."""
        return replace(self, confidence=confidence)

    def scale(self, reference: Sequence[float]) -> float:
        """What a change is divided by: the good end's median for a relative threshold, else 1."""
        if not self.spec.threshold.relative:
            return 1.0
        mid = abs(median(reference))
        if mid >= HUGE:
            raise InputError(f"{self.spec.name}: the good end's median is {median(reference):g}, so a "
                             "percentage of it means nothing; give --worse-if an amount in a unit")
        return mid or ZERO_SCALE

    def _clean(self, values: Sequence[float]) -> list[float]:
        """Values with a NaN or an infinity made as bad as a number can be (a NaN loss is worse
        than any loss), so that the rule stays arithmetic."""
        worst = -HUGE if self.spec.direction is Direction.LOWER else HUGE
        return [v if math.isfinite(v) else (max(-HUGE, min(HUGE, v)) if math.isinf(v) else worst) for v in values]

    def _exact(self, effect: float, threshold: float) -> Comparison:
        if self.spec.direction is Direction.LOWER:
            effect = -effect
        size = abs(effect) if self.spec.direction is Direction.DIFFERS else effect
        bad = size > 0 and size >= threshold
        return Comparison(effect, effect, effect, Call.BAD if bad else Call.GOOD, exact=True)


def exact(reference: Sequence[float], before: Sequence[float], after: Sequence[float]) -> bool:
    """The good end gave one value in ``EXACT_REFERENCE_RUNS`` runs or more, and each sample one value."""
    return (len(reference) >= EXACT_REFERENCE_RUNS and len(set(reference)) == 1
            and len(set(before)) == 1 and len(set(after)) == 1)


def call(est: float, low: float, high: float, threshold: float, differs: bool) -> Call:
    """The rule on an estimate and its bounds (positive is worse; signed with ``differs``)."""
    if differs:
        if (low > 0 or high < 0) and abs(est) >= threshold:
            return Call.BAD
        return Call.GOOD if -threshold < low and high < threshold else Call.UNKNOWN
    if low > 0 and est >= threshold:
        return Call.BAD
    return Call.GOOD if high < threshold else Call.UNKNOWN


def shift(before: Sequence[float], after: Sequence[float], alpha: float) -> tuple[float, float, float]:
    """(the Hodges-Lehmann estimate of ``after - before``, its lower bound, its upper bound), each
    bound holding with probability ``1 - alpha``; infinite when the samples are too small for it."""
    diffs = sorted(a - b for a in after for b in before)
    k = bound_rank(len(before), len(after), alpha)
    if k == 0:
        return median(diffs), -math.inf, math.inf
    return median(diffs), diffs[k - 1], diffs[len(diffs) - k]


@functools.lru_cache(maxsize=4096)
def bound_rank(n: int, m: int, alpha: float) -> int:
    """The largest k with P(U <= k - 1) <= alpha under the null (U the Mann-Whitney count of
    samples of n and m): the k-th smallest difference is then a lower bound at 1 - alpha.
    0: no bound (too few runs)."""
    if n * m > EXACT_LIMIT:
        sd = math.sqrt(n * m * (n + m + 1) / 12)
        return max(0, math.floor(n * m / 2 - NormalDist().inv_cdf(1 - alpha) * sd + 0.5))
    cdf = u_cdf(min(n, m), max(n, m))
    return sum(1 for p in cdf if p <= alpha)


@functools.lru_cache(maxsize=1024)
def u_cdf(n: int, m: int) -> tuple[float, ...]:
    """P(U <= u) for u = 0..n*m: the coefficients of the Gaussian binomial [n+m choose n]_q (the
    number of arrangements with u inversions) over C(n+m, n)."""
    poly = [1]
    for i in range(1, n + 1):  # poly = [m+i choose i]_q, built by * (1 - q^(m+i)) / (1 - q^i)
        grown = poly + [0] * (m + i)
        for j in range(len(grown) - 1, m + i - 1, -1):
            grown[j] -= grown[j - m - i]
        for j in range(i, len(grown)):
            grown[j] += grown[j - i]
        poly = grown[: i * m + 1]
    total, run, out = math.comb(n + m, n), 0, []
    for c in poly:
        run += c
        out.append(run / total)
    return tuple(out)


# ------------------------------------------------------------------ where the change happened


class Shape(enum.Enum):
    """What the tested points say of the change between the ends."""

    STEP = "step"  # one step surely over the threshold
    STEPS = "steps"  # several steps surely over it
    SPREAD = "spread"  # the ends differ by the threshold, but no single step comes near it
    UNRESOLVED = "unresolved"  # a step may be over the threshold; the runs could not tell
    NOT_REPRODUCED = "not-reproduced"  # the bad end is not worse than the good end beyond the noise
    UNDECIDED = "undecided"  # the runs of the ends could not tell


@dataclass(frozen=True)
class Step:
    """A change between two neighbouring levels (runs of tested points that measure alike, pooled):
    it happened after ``last`` and at or before ``first``; ``change`` is judged at the threshold."""

    last: int
    first: int
    change: Comparison
    before: Summary  # the level before the step, pooled
    after: Summary

    @property
    def over(self) -> bool:
        return self.change.call is Call.BAD

    @property
    def located(self) -> bool:
        """No point lies between: ``first`` is where it happened."""
        return self.first == self.last + 1


@dataclass(frozen=True)
class StepReport:
    shape: Shape
    total: Comparison  # the last level (the bad end's) against the first (the good end's)
    steps: tuple[Step, ...]  # largest first
    points: tuple[tuple[int, Summary], ...]  # every tested index, in order, with its runs summed up

    @property
    def over(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.over)

    @property
    def largest(self) -> Step | None:
        return self.steps[0] if self.steps else None


Level = Sequence[tuple[int, Sequence[float]]]


def find_steps(levels: Sequence[Level], judge: Judge, resolution: float | None = None) -> StepReport:
    """The steps between neighbouring levels (each a run of ``(index, runs)`` of tested points in
    index order; the good end first in the first, the bad end last in the last): a step is a
    change beyond the noise of at least ``resolution`` (half the threshold by default), or one
    surely over the threshold.  ``SPREAD``: none is surely over, and none is even estimated so."""
    good, t = levels[0][0][1], judge.spec.threshold.amount
    res = t / 2 if resolution is None else resolution
    pools = [tuple(x for _, v in level for x in v) for level in levels]
    total = judge(pools[0], pools[-1], t, good)  # UNKNOWN when an end has no runs
    points = tuple(sorted((i, Summary.of(v)) for level in levels for i, v in level if v))
    if total.call is not Call.BAD:
        return StepReport(Shape.NOT_REPRODUCED if total.call is Call.GOOD else Shape.UNDECIDED, total, (), points)
    pairs = []
    for k in range(len(levels) - 1):
        before, after = pools[k], pools[k + 1]
        step = Step(levels[k][-1][0], levels[k + 1][0][0], judge(before, after, t, good),
                    Summary.of(before), Summary.of(after))
        pairs.append((step, judge(before, after, res, good).call is Call.BAD))
    steps = tuple(sorted((s for s, big in pairs if big or s.over), key=lambda s: -abs(s.change.effect)))
    over = sum(1 for s in steps if s.over)
    if over:
        shape = Shape.STEP if over == 1 else Shape.STEPS
    else:
        shape = Shape.SPREAD if all(abs(s.change.effect) < t for s, _ in pairs) else Shape.UNRESOLVED
    return StepReport(shape, total, steps, points)


def describe(report: StepReport, spec: MetricSpec, labels: Sequence[str], unit: str = "") -> str:
    """The one-line answer: ``samples_per_sec 412 → 371 samples/s (−10.0 %) at 0.15.4``, ``... in 2
    steps: ...``, ``... spread out: no single step over 5 %``, ``not reproduced: within noise
    (good 412 ± 6, bad 405 ± 9 samples/s)``."""
    by = dict(report.points)
    if report.shape in (Shape.NOT_REPRODUCED, Shape.UNDECIDED):
        why = "within noise" if report.shape is Shape.NOT_REPRODUCED else "the runs cannot tell"
        ends = [by[i].describe(unit if k else "") if i in by else "not measured"
                for k, i in enumerate((0, len(labels) - 1))]
        return f"not reproduced: {why} (good {ends[0]}, bad {ends[1]})"
    good, bad = by[report.points[0][0]], by[report.points[-1][0]]
    head = f"{spec.label} {good.median:.4g} → {bad.median:.4g}{' ' + unit if unit else ''} ({_pct(good, bad, good, unit)})"

    def where(s: Step, size: bool = True) -> str:
        at = f"at {labels[s.first]}" if s.located else f"after {labels[s.last]}, by {labels[s.first]}"
        return f"{_pct(s.before, s.after, good, unit)} {at}" if size else at
    over = report.over
    if report.shape is Shape.STEP:
        return f"{head} {where(over[0], size=False)}"
    if report.shape is Shape.STEPS:
        ordered = sorted(over, key=lambda s: s.first)
        return f"{head} in {len(over)} steps: " + ", ".join(
            where(s) + (" (the largest)" if s is report.largest else "") for s in ordered)
    largest = f" (largest {where(report.largest)})" if report.largest else ""
    if report.shape is Shape.SPREAD:
        return f"{head} spread out: no single step over {spec.threshold.describe()}{largest}"
    return f"{head}: not sure any single step is over {spec.threshold.describe()}{largest}"


def _pct(before: Summary, after: Summary, good: Summary, unit: str = "") -> str:
    """The change in percent of the good end, or its amount where a percentage is undefined."""
    return change_text(before.median, after.median, good.median, unit)
