"""The search for where a number got worse, over candidates ``0..n-1`` with noisy probes: 0 is
the good end, ``n - 1`` the bad end.  Pure: ``probe(i)`` does the run and answers its number
(None: the point cannot be measured), ``judge`` (``verdict.numbers.Judge``) says what two samples
of runs show.

1. The ends run interleaved (the one with fewer runs; the good end on a tie), so that a drifting
   machine moves both alike, until the bad end is worse by the threshold beyond the noise, or
   surely not (not reproduced).  They become the first two *levels*.
2. A level is a run of neighbouring tested points that measure alike; its runs are pooled, so a
   new point is compared with many runs, not with one other point's few.  Between two levels
   ``A`` and ``B`` that still have untested points between them, the one nearest the middle is
   run until it is placed: like ``A`` or like ``B`` (surely within half their difference, and
   within the threshold), or a level of its own (worse than ``A`` and better than ``B`` beyond
   the noise, each by at least the resolution: a plateau between two steps, called at an
   error rate ``MIDDLE_STRICTER`` times smaller, since it adds a step).  Each run goes to whichever
   of the point and its two levels has the fewest runs.  The largest difference goes first.
3. When no untested point is left between two levels, the step between them is located; while
   the runs cannot say whether it is over the threshold, the level's point next to it with fewer
   runs runs again.

A point runs at most ``point_runs`` times (the ends ``end_runs``): one that could not be placed
is left out of the levels (``undecided``), unless it is surely worse than the level before it by
the threshold: then a step over the threshold ends there, and it is a level of its own (the
step after it may stay unsized).  A step that could not be sized is ``unresolved``.
The search stops when nothing is left, or at ``max_runs``.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from dsbisect.core.metric import Call, Comparison

POINT_RUNS = 15  # the most runs of one inner point (10 left a tenth of the 10 %-in-5 %-noise cases unplaced)
END_RUNS = 20  # the most runs of an end
MIDDLE_STRICTER = 5  # a plateau (a new step) is called at an error rate this many times smaller


class Judge(Protocol):
    confidence: float

    def __call__(self, before: Sequence[float], after: Sequence[float], threshold: float,
                 reference: Sequence[float]) -> Comparison: ...

    def at(self, confidence: float) -> Judge:
        """The same rule at another confidence."""


class Status(enum.Enum):
    DONE = "done"  # nothing left to run
    NOT_REPRODUCED = "not-reproduced"  # the bad end is surely not worse by the threshold
    ENDS_UNDECIDED = "ends-undecided"  # the ends reached their caps, or the run cap came first
    CAPPED = "capped"  # the run cap came before every step was located and sized
    GOOD_END_UNTESTABLE = "good-end-untestable"
    BAD_END_UNTESTABLE = "bad-end-untestable"


class Place(enum.Enum):
    """Where a point between two levels belongs."""

    LEFT = "left"
    RIGHT = "right"
    MIDDLE = "middle"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Runs:
    """Every run so far: the values of each index, the indices that could not be measured, and
    the order in which indices were run."""

    values: tuple[tuple[float, ...], ...]
    untestable: frozenset[int] = frozenset()
    order: tuple[int, ...] = ()

    @classmethod
    def start(cls, n: int) -> Runs:
        if n < 2:
            raise ValueError("need at least the two ends")
        return cls(tuple(() for _ in range(n)))

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def total(self) -> int:
        return len(self.order)

    def add(self, i: int, value: float | None) -> Runs:
        order = self.order + (i,)
        if value is None:
            return replace(self, untestable=self.untestable | {i}, order=order)
        values = self.values[:i] + (self.values[i] + (float(value),),) + self.values[i + 1:]
        return replace(self, values=values, order=order)

    def pool(self, level: Sequence[int]) -> tuple[float, ...]:
        return tuple(v for i in level for v in self.values[i])


@dataclass(frozen=True)
class Plan:
    threshold: float  # in the judge's terms (a fraction, or an amount in the spec's unit)
    resolution: float  # the smallest step a plateau is told apart by
    max_runs: int
    point_runs: int = POINT_RUNS
    end_runs: int = END_RUNS

    def cap(self, i: int, n: int) -> int:
        return self.end_runs if i in (0, n - 1) else self.point_runs


@dataclass(frozen=True)
class State:
    """The search so far: the runs, the levels (empty until the ends are decided), the point being
    placed, and the points that reached their cap unplaced."""

    runs: Runs
    levels: tuple[tuple[int, ...], ...] = ()
    pending: int | None = None
    undecided: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Exploration:
    status: Status
    runs: Runs
    levels: tuple[tuple[int, ...], ...]  # the tested points grouped by what they measure, in order
    undecided: frozenset[int]  # points run to their cap without being placed
    unresolved: tuple[int, ...]  # levels k whose step to level k + 1 could not be sized

    def grouped(self) -> tuple[tuple[tuple[int, tuple[float, ...]], ...], ...]:
        """The levels with each point's runs: what ``verdict.numbers.find_steps`` reads."""
        return tuple(tuple((i, self.runs.values[i]) for i in level) for level in self.levels)


def default_cap(n: int) -> int:
    """Runs a search may use: the ends' and about eight runs for each bisection step, twice over
    (what that takes: benchmarks/metric_search.py, docs/benchmarks.md)."""
    return 30 + 16 * max(1, math.ceil(math.log2(max(2, n - 1))))


def search(n: int, probe: Callable[[int], float | None], judge: Judge, threshold: float, *,
           resolution: float | None = None, max_runs: int | None = None, point_runs: int = POINT_RUNS,
           end_runs: int = END_RUNS) -> Exploration:
    """Run ``probe`` where ``advance`` says until it says stop."""
    plan = Plan(threshold, threshold / 2 if resolution is None else resolution,
                default_cap(n) if max_runs is None else max_runs, point_runs, end_runs)
    state = State(Runs.start(n))
    while True:
        state, index, status = advance(state, judge, plan)
        if index is None:
            break
        state = replace(state, runs=state.runs.add(index, probe(index)))
    levels = state.levels or ((0,), (n - 1,))
    return Exploration(status, state.runs, levels, state.undecided, _unsized(state, judge, plan))


def advance(state: State, judge: Judge, plan: Plan) -> tuple[State, int | None, Status]:
    """The state with the pending point placed where the runs place it, and the index to run
    next (None: stop, and the status says why)."""
    runs, good, bad = state.runs, 0, state.runs.n - 1
    if good in runs.untestable or bad in runs.untestable:
        return state, None, Status.GOOD_END_UNTESTABLE if good in runs.untestable else Status.BAD_END_UNTESTABLE
    if not state.levels:
        ends = _judged(judge, runs.values[good], runs.values[bad], plan.threshold, runs.values[good])
        if ends.call is Call.GOOD:
            return state, None, Status.NOT_REPRODUCED
        if ends.call is Call.UNKNOWN:
            side = _fewer(runs, plan, (good, bad))
            if side is None or runs.total >= plan.max_runs:
                return state, None, Status.ENDS_UNDECIDED
            return state, side, Status.DONE
        state = replace(state, levels=((good,), (bad,)))
    state = _settle(state, judge, plan)
    index = _next_index(state, judge, plan)
    if index is None:
        return state, None, Status.DONE
    if runs.total >= plan.max_runs:
        return state, None, Status.CAPPED
    if state.pending is None and not runs.values[index]:
        state = replace(state, pending=index)  # a new point: placed once its runs allow
    return state, index, Status.DONE


def _settle(state: State, judge: Judge, plan: Plan) -> State:
    """The pending point placed (or given up at its cap, or dropped as untestable), if it can be."""
    m = state.pending
    if m is None:
        return state
    if m in state.runs.untestable:
        return replace(state, pending=None)
    k = max(j for j, level in enumerate(state.levels) if level[-1] < m)
    place = placement(state.runs, state.levels[k], state.levels[k + 1], m, judge, plan)
    levels = list(state.levels)
    if place is Place.LEFT:
        levels[k] = levels[k] + (m,)
    elif place is Place.RIGHT:
        levels[k + 1] = (m,) + levels[k + 1]
    elif place is Place.MIDDLE:
        levels.insert(k + 1, (m,))
    elif len(state.runs.values[m]) >= plan.point_runs and _past_a_step(state.runs, state.levels[k], m, judge, plan):
        # at its own cap and surely worse than the level before by the threshold: a step ends at
        # m, whatever more runs of the levels around it would say of the step after it
        levels.insert(k + 1, (m,))
    elif _placing(state, plan) is None:
        return replace(state, pending=None, undecided=state.undecided | {m})
    else:
        return state
    return replace(state, levels=tuple(levels), pending=None)


def placement(runs: Runs, left: Sequence[int], right: Sequence[int], m: int, judge: Judge, plan: Plan) -> Place:
    """Where the runs of ``m`` put it between the levels ``left`` and ``right``."""
    a, b, mine, ref = runs.pool(left), runs.pool(right), runs.values[m], runs.values[0]
    if not mine:
        return Place.UNKNOWN
    gap = abs(_judged(judge, a, b, plan.resolution, ref).effect)
    near = min(gap / 2, plan.threshold)
    if _judged(judge, a, mine, near, ref).call is Call.GOOD:
        return Place.LEFT
    if _judged(judge, mine, b, near, ref).call is Call.GOOD:
        return Place.RIGHT
    strict = judge.at(1 - (1 - judge.confidence) / MIDDLE_STRICTER)
    if (_judged(strict, a, mine, plan.resolution, ref).call is Call.BAD
            and _judged(strict, mine, b, plan.resolution, ref).call is Call.BAD):
        return Place.MIDDLE
    return Place.UNKNOWN


def _past_a_step(runs: Runs, left: Sequence[int], m: int, judge: Judge, plan: Plan) -> bool:
    """Whether ``m``, at its cap and not placed, is surely worse than the level ``left`` by the
    threshold: whatever lies between ``m`` and the next level (the runs could not tell it from
    that level, nor tell it apart by a plateau's margin), a step over the threshold ends at ``m``.
    A relative threshold is a share of the good end: after a step of many times the good end,
    two bad points can seldom be told within it (a speed 500 times slower, in noise of 50 %)."""
    return _judged(judge, runs.pool(left), runs.values[m], plan.threshold, runs.values[0]).call is Call.BAD


def _next_index(state: State, judge: Judge, plan: Plan) -> int | None:
    """The pending point; else the middle of the widest-apart levels with points between them;
    else a run for a located step not yet sized; None: nothing left."""
    runs, ref = state.runs, state.runs.values[0]
    if state.pending is not None:
        return _placing(state, plan)
    gaps = []
    for k, (left, right) in enumerate(zip(state.levels, state.levels[1:])):
        free = [i for i in range(left[-1] + 1, right[0]) if i not in runs.untestable and i not in state.undecided]
        size = abs(_judged(judge, runs.pool(left), runs.pool(right), plan.threshold, ref).effect)
        gaps.append((size, k, free))
    for size, k, free in sorted(gaps, key=lambda g: (-g[0], g[1])):
        if free:
            left, right = state.levels[k][-1], state.levels[k + 1][0]
            return min(free, key=lambda i: (abs(i - (left + right) / 2), i))
    for size, k, _ in sorted(gaps, key=lambda g: (-g[0], g[1])):
        if _sized(state, judge, plan, k) is Call.UNKNOWN:
            side = _fewer(runs, plan, (state.levels[k][-1], state.levels[k + 1][0]))
            if side is not None:
                return side
    return None


def _placing(state: State, plan: Plan) -> int | None:
    """A run to place the pending point: of the point itself and the two levels around it, the
    one with the fewest runs (the point on a tie), since one more run narrows that comparison
    most; a level runs its point nearest the pending one that is below its cap."""
    runs, m = state.runs, state.pending
    k = max(j for j, level in enumerate(state.levels) if level[-1] < m)
    choices = [(len(runs.values[m]), 0, m)] if len(runs.values[m]) < plan.point_runs else []
    for rank, level in ((1, state.levels[k]), (2, state.levels[k + 1])):
        below = [i for i in level if len(runs.values[i]) < plan.cap(i, runs.n)]
        if below:
            choices.append((len(runs.pool(level)), rank, min(below, key=lambda i: (abs(i - m), i))))
    return min(choices)[2] if choices else None


def _sized(state: State, judge: Judge, plan: Plan, k: int) -> Call:
    runs = state.runs
    return _judged(judge, runs.pool(state.levels[k]), runs.pool(state.levels[k + 1]), plan.threshold,
                   runs.values[0]).call


def _unsized(state: State, judge: Judge, plan: Plan) -> tuple[int, ...]:
    return tuple(k for k in range(len(state.levels) - 1) if _sized(state, judge, plan, k) is Call.UNKNOWN)


def _fewer(runs: Runs, plan: Plan, indices: Sequence[int]) -> int | None:
    """Of ``indices``, the one below its cap with the fewest runs (the first on a tie); None: none."""
    open_ = [i for i in indices if len(runs.values[i]) < plan.cap(i, runs.n)]
    return min(open_, key=lambda i: (len(runs.values[i]), indices.index(i))) if open_ else None


@functools.lru_cache(maxsize=8192)
def _judged(judge: Judge, before: tuple[float, ...], after: tuple[float, ...], threshold: float,
            reference: tuple[float, ...]) -> Comparison:
    """``judge``, remembered: a search asks again about samples whose runs did not change."""
    return judge(before, after, threshold, reference)
