"""A probabilistic bisection for flaky regressions (``--confidence P``). Pure: the probe does all I/O.

Points ``0..n-1``; ``points[0]`` behaves like the old end, ``points[-1]`` like the new end, and
one side of the boundary is *flaky*: a point there fails a run at the regression's signature with
one unknown rate ``q`` (a regression: the new side; a fix: the old side), while a point on the
other side never fails at it.  So a run that fails proves its point flaky-side ("no false good
from luck"); a pass only makes the other side likelier.

Below, in the flaky-side-high orientation (a fix search is mirrored): the hypothesis is ``B``, the
first flaky index (``1..n-1``, uniform prior), and ``q`` has a Beta(a, b) prior that is integrated
out exactly, so with ``F`` failing runs in all and ``S_B`` passes at counted indices ``>= B``:

    P(B | runs)  ∝  [no failing run before B] · Beta(a + F, b + S_B) / Beta(a, b)

Each next probe is the index whose one run carries the most expected information about ``B``
(the mutual information ``h(P(fail at i)) - Σ_B P(B) h(P(fail at i | B))``, ``h`` the binary
entropy); the search stops when one boundary holds probability ``>= P``, or at a cap of runs.
That probability is taken with ``q`` fixed at a low quantile (``TAIL``) of what the flaky end's
own runs say of it (``Belief.sure``): a few lucky early failures would otherwise make every pass
look like strong evidence of a good point, and the figure would flatter (docs/benchmarks.md, "A
flaky regression", has how often each is right).

First the flaky end is run until it has failed ``end_fails`` times in at least ``end_min`` runs
(at most ``end_runs`` runs), so that the rate has an estimate; then the other end once (it is
assumed never to fail).  An index
that answers SKIP (untestable, or failed differently) is stepped around: it is not probed again and
its passes are not counted, so ``B`` at it and ``B`` at the next counted index cannot be told apart;
they are one boundary, whose answer is a range (``maybe``), as ``search.search`` gives.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from dsbisect.search.steps import Side

PRIOR = (1.0, 1.0)  # Beta(a, b) on the failure rate of a flaky-side point: uniform
TAIL = 0.2  # the stop takes the rate at this quantile of its estimate (see Belief.sure)


class Status(enum.Enum):
    SURE = "sure"  # one boundary holds probability >= P
    CAPPED = "capped"  # the run cap came first: the most likely boundary, not sure
    NOT_REPRODUCED = "not-reproduced"  # the flaky end never failed in its runs
    FLAKY_END_SKIP = "flaky-end-skip"  # the flaky end could not be tested
    OTHER_END_SKIP = "other-end-skip"  # the other end could not be tested
    OTHER_END_FAILS = "other-end-fails"  # the end that must never fail failed


@dataclass(frozen=True)
class Tally:
    """The counted runs of one index."""
    fails: int = 0
    passes: int = 0
    skipped: bool = False  # a run answered SKIP: stepped around (unless a run failed: then flaky-side)

    @property
    def counted(self) -> bool:
        return self.fails > 0 or not self.skipped


@dataclass(frozen=True)
class Boundary:
    """One boundary the posterior can tell apart: the first flaky index ``first`` (counted), the
    counted index before it, and the skipped ones between, any of which may be the first."""
    last: int  # last index on the never-failing side (flaky-side-high orientation)
    first: int
    maybe: tuple[int, ...]  # the skipped indices between, and ``first``
    probability: float


@dataclass(frozen=True)
class Belief:
    """The evidence so far, in the flaky-side-high orientation, and what follows from it."""
    tallies: tuple[Tally, ...]
    prior: tuple[float, float] = PRIOR

    @classmethod
    def start(cls, n: int, prior: tuple[float, float] = PRIOR) -> Belief:
        if n < 2:
            raise ValueError("need at least the two ends")
        return cls(tuple(Tally() for _ in range(n)), prior)

    @property
    def n(self) -> int:
        return len(self.tallies)

    @property
    def runs(self) -> int:
        return sum(t.fails + t.passes for t in self.tallies) + sum(1 for t in self.tallies if t.skipped)

    def add(self, i: int, side: Side) -> Belief:
        """One run at ``i``: NEW = failed at the signature (flaky side), OLD = passed, SKIP."""
        t = self.tallies[i]
        t = {Side.NEW: replace(t, fails=t.fails + 1), Side.OLD: replace(t, passes=t.passes + 1),
             Side.SKIP: replace(t, skipped=True)}[side]
        return replace(self, tallies=self.tallies[:i] + (t,) + self.tallies[i + 1:])

    def _rates(self, q: float | None = None) -> tuple[list[float], list[float]]:
        """(P(B) for B in 0..n-1 with P(0) = 0, P(a run at a flaky-side point fails | B, runs)):
        with the rate integrated out, or fixed at ``q``."""
        a, b = self.prior
        fails = sum(t.fails for t in self.tallies)
        first_fail = next((i for i, t in enumerate(self.tallies) if t.fails), self.n - 1)
        logs, rates, passes = [-math.inf] * self.n, [0.0] * self.n, 0
        for B in range(self.n - 1, 0, -1):  # S_B as a suffix sum
            t = self.tallies[B]
            passes += t.passes if t.counted else 0
            rates[B] = (a + fails) / (a + b + fails + passes) if q is None else q
            if B > first_fail:
                continue
            logs[B] = (math.lgamma(a + fails) + math.lgamma(b + passes) - math.lgamma(a + b + fails + passes)
                       if q is None else passes * math.log1p(-q))
        top = max(logs)
        weights = [math.exp(x - top) if x > -math.inf else 0.0 for x in logs]
        total = sum(weights)
        return [w / total for w in weights], rates

    def rate_low(self, tail: float) -> float:
        """The rate that the flaky end's runs say the true one exceeds with probability
        ``1 - tail``: the ``tail`` quantile of its Beta posterior.  Only that end's: an inner
        point is known flaky-side *because* a run failed, so its runs would flatter the rate."""
        a, b = self.prior
        end = self.tallies[-1]
        return beta_quantile(a + end.fails, b + end.passes, tail)

    def sure(self, tail: float) -> Boundary:
        """The most likely boundary, its probability taken at the low rate ``rate_low(tail)``
        (a low rate makes passes weak evidence: the figure errs on the side of doubt)."""
        post = self._rates(self.rate_low(tail))[0]
        best = self.best()
        return replace(best, probability=min(best.probability, sum(post[j] for j in best.maybe)))

    def posterior(self) -> tuple[float, ...]:
        """P(the first flaky index is B), for B in 0..n-1 (0 for index 0)."""
        return tuple(self._rates()[0])

    def boundaries(self) -> tuple[Boundary, ...]:
        post, out, pending, last = self.posterior(), [], [], 0
        for i in range(1, self.n):
            pending.append(i)
            if self.tallies[i].counted:
                out.append(Boundary(last, i, tuple(pending), sum(post[j] for j in pending)))
                pending, last = [], i
        return tuple(out)

    def best(self) -> Boundary:
        return max(self.boundaries(), key=lambda g: (g.probability, -g.first))

    def gains(self) -> tuple[float, ...]:
        """The expected information (nats) about B of one more run at each index (0 where none:
        the other end, skipped indices)."""
        post, rates = self._rates()
        out, fail, known = [0.0] * self.n, 0.0, 0.0
        for i in range(1, self.n):
            fail += post[i] * rates[i]  # P(a run at i fails): only B <= i make i flaky-side
            known += post[i] * _h(rates[i])
            if self.tallies[i].counted and not (self.tallies[i].fails and i < self.n - 1):
                out[i] = max(0.0, _h(fail) - known)
        return tuple(out)

    def next_probe(self) -> int | None:
        gains = self.gains()
        top = max(gains)
        return None if top <= 1e-12 else next(i for i, g in enumerate(gains) if g >= top - 1e-12)

    def rate_seen(self, boundary: Boundary) -> float:
        """How often the runs at the indices the boundary puts on the flaky side failed."""
        runs = [t for t in self.tallies[boundary.first:] if t.counted]
        fails = sum(t.fails for t in runs)
        total = fails + sum(t.passes for t in runs)
        return fails / total if total else 0.0


@functools.lru_cache(maxsize=1024)
def beta_quantile(a: float, b: float, p: float, steps: int = 2000) -> float:
    """The ``p`` quantile of Beta(a, b), from its density on a grid (the midpoint rule)."""
    xs = [(k + 0.5) / steps for k in range(steps)]
    logs = [(a - 1) * math.log(x) + (b - 1) * math.log1p(-x) for x in xs]
    top = max(logs)
    dens = [math.exp(v - top) for v in logs]
    total, run = sum(dens), 0.0
    for x, d in zip(xs, dens):
        run += d
        if run >= p * total:
            return x
    return xs[-1]


def _h(p: float) -> float:
    return 0.0 if p <= 0.0 or p >= 1.0 else -(p * math.log(p) + (1 - p) * math.log(1 - p))


@dataclass(frozen=True)
class Estimate:
    """The answer in the caller's orientation: the boundary between ``last_old`` and ``first_new``."""
    status: Status
    last_old: int
    first_new: int
    maybe: tuple[int, ...]  # indices that may be the first new one (first_new and untestable ones)
    probability: float
    runs: int
    rate: float  # how often runs at flaky-side points failed
    probed: tuple[tuple[int, Side], ...]  # every run, in the order asked

    @property
    def exact(self) -> bool:
        return self.maybe == (self.first_new,)

    @property
    def sure(self) -> bool:
        return self.status is Status.SURE


def default_cap(n: int) -> int:
    """Runs a search may use: enough for a 30 % rate at P = 0.95 on most lists (benchmarks/confidence.py)."""
    return 30 + 12 * max(1, math.ceil(math.log2(max(2, n - 1))))


def search(n: int, probe: Callable[[int], Side], confidence: float, *, flaky: Side = Side.NEW,
           max_runs: int | None = None, end_fails: int = 2, end_min: int = 4, end_runs: int = 16,
           prior: tuple[float, float] = PRIOR, tail: float = TAIL) -> Estimate:
    """The boundary of ``range(n)``; ``probe(i)`` runs index ``i`` once and answers its Side
    (NEW/OLD/SKIP in the caller's orientation).  ``flaky``: the side whose points fail at random
    (NEW for a regression, OLD for a fix search); the other side never fails."""
    if not 0.5 < confidence < 1:
        raise ValueError("confidence must lie strictly between 0.5 and 1")
    cap = default_cap(n) if max_runs is None else max_runs
    mirror = flaky is Side.OLD
    probed: list[tuple[int, Side]] = []

    def ask(i: int) -> Side:  # i in the flaky-side-high orientation
        j = n - 1 - i if mirror else i
        side = probe(j)
        probed.append((j, side))
        return {Side.OLD: Side.NEW, Side.NEW: Side.OLD}.get(side, side) if mirror else side

    belief, status = _ends(Belief.start(n, prior), ask, min(end_runs, cap), end_fails, end_min)
    while status is None:
        if belief.sure(tail).probability >= confidence:
            status = Status.SURE
        elif belief.runs >= cap or (i := belief.next_probe()) is None:
            status = Status.CAPPED
        else:
            belief = belief.add(i, ask(i))
    return _estimate(belief, status, mirror, tuple(probed), tail)


def _ends(belief: Belief, ask: Callable[[int], Side], end_runs: int, end_fails: int,
          end_min: int) -> tuple[Belief, Status | None]:
    """The flaky end until it failed ``end_fails`` times in at least ``end_min`` runs (at most
    ``end_runs`` runs), then the other end once."""
    top = belief.n - 1
    while (belief.tallies[top].fails < end_fails or belief.runs < end_min) and belief.runs < end_runs:
        side = ask(top)
        if side is Side.SKIP:
            return belief.add(top, side), Status.FLAKY_END_SKIP
        belief = belief.add(top, side)
    if not belief.tallies[top].fails:
        return belief, Status.NOT_REPRODUCED
    side = ask(0)
    if side is Side.NEW:
        return belief, Status.OTHER_END_FAILS
    return belief.add(0, side), Status.OTHER_END_SKIP if side is Side.SKIP else None


def _estimate(belief: Belief, status: Status, mirror: bool, probed, tail: float) -> Estimate:
    n, g = belief.n, belief.sure(tail)
    rate = belief.rate_seen(g)
    if not mirror:
        return Estimate(status, g.last, g.first, g.maybe, g.probability, len(probed), rate, probed)
    # mirrored back: flaky-side-high index k is n-1-k; the never-failing side is now the new one
    skips = [n - 1 - k for k in g.maybe if k != g.first]
    first_new = n - 1 - g.last
    return Estimate(status, n - 1 - g.first, first_new, tuple(sorted([*skips, first_new])), g.probability,
                    len(probed), rate, probed)
