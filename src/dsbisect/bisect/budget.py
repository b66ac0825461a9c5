"""A bisection's budget: ``--max-runs N`` and ``--deadline 5h``, counted against what this
invocation runs.

A CI job has a cap (GitHub's is 6 h); a bisection that would outlive it must stop in time, say
how far it got, and leave the store for the next job to go on from.  ``Meter`` counts the runs
this invocation *makes* (runs reused from the store cost nothing: a second job that walks the
same probes again pays only for the new ones) and the time since it started, on a clock given
to it.  Before each round of the search the engine asks ``Meter.check`` with the runs that round
would make; when they do not fit, ``BudgetSpent`` ends the search (the engine answers
``unfinished`` with the range narrowed so far).  A round starts only while the time left is at
least the slowest run made so far; a run in flight is never stopped by the budget (the case's
``--timeout`` bounds it), so give ``--deadline`` the job's cap less one run's timeout.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from dsbisect.core.errors import InputError
from dsbisect.core.model import Case, Outcome, Point, Stage, Verdict
from dsbisect.records.results import Step
from dsbisect.records.run import RunRecord
from dsbisect.run.runner import Runner
from dsbisect.search.steps import Side

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration(text: str) -> float:
    """Seconds of a duration as a person writes it: ``5h``, ``90m``, ``1h30m``, ``45s``, ``3600``;
    an InputError for anything else (or for nothing)."""
    t = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(?:\.\d+)?", t):
        seconds = float(t)
    elif t and _PART.sub("", t) == "":
        seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(t))
    else:
        raise InputError(f"--deadline {text!r}: give a duration such as 5h, 90m, 1h30m or 3600 (seconds)")
    if seconds <= 0:
        raise InputError(f"--deadline {text!r}: give a duration greater than 0")
    return seconds


def duration_text(seconds: float) -> str:
    """``5h``, ``1h30m``, ``90s``: a duration as ``parse_duration`` reads it."""
    s = round(seconds)
    h, m, sec = s // 3600, s % 3600 // 60, s % 60
    return "".join(f"{n}{u}" for n, u in ((h, "h"), (m, "m"), (sec, "s")) if n) or "0s"


@dataclass(frozen=True)
class Budget:
    """What one invocation may spend: new runs (None: no cap) and wall seconds (None: no cap)."""

    max_runs: int | None = None
    deadline: float | None = None

    @property
    def given(self) -> bool:
        return self.max_runs is not None or self.deadline is not None

    def describe(self) -> str:
        """``--max-runs 4``, ``--deadline 5h``, or both, as the command line gives them."""
        parts = ([f"--max-runs {self.max_runs}"] if self.max_runs is not None else []) + (
            [f"--deadline {duration_text(self.deadline)}"] if self.deadline is not None else [])
        return ", ".join(parts)


class BudgetSpent(Exception):
    """The next round does not fit the budget: the search stops here (``reason`` says why)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Meter:
    """The budget of one invocation, counted: runs made since it started (``since``, on the
    records' wall clock) and seconds on ``clock`` (a monotonic clock; tests drive their own)."""

    def __init__(self, budget: Budget, clock: Callable[[], float] = time.monotonic,
                 since: float | None = None):
        self.budget, self.clock = budget, clock
        self.t0 = clock()
        self.since = time.time() if since is None else since
        self._made: dict[int, float] = {}  # run id -> seconds, of the runs this invocation made

    def count(self, runs: Iterable[RunRecord]) -> None:
        """Note the runs among ``runs`` that this invocation made (not reused, not marks)."""
        for r in runs:
            if r.started >= self.since and r.manual is None and r.outcome is not None:
                self._made[r.id] = r.seconds or 0.0

    @property
    def made(self) -> int:
        return len(self._made)

    @property
    def elapsed(self) -> float:
        return self.clock() - self.t0

    def check(self, wanted: int) -> None:
        """Raise ``BudgetSpent`` unless a round that makes ``wanted`` new runs fits what is left."""
        b = self.budget
        if wanted <= 0:
            return
        if b.max_runs is not None and self.made + wanted > b.max_runs:
            raise BudgetSpent(f"the budget ran out (--max-runs {b.max_runs}: {self.made} run"
                              f"{'s' if self.made != 1 else ''} made, the next step needs {wanted})")
        if b.deadline is not None:
            slowest = max(self._made.values(), default=0.0)
            if self.elapsed + slowest > b.deadline:
                raise BudgetSpent(f"the budget ran out (--deadline {duration_text(b.deadline)}: "
                                  f"{duration_text(self.elapsed)} spent, the slowest run took "
                                  f"{duration_text(slowest)})")


def new_runs(runner: Runner, case: Case, points: Sequence[Point], want: int) -> int:
    """How many runs testing ``points`` (``want`` each) would make at most: what the store
    already holds for them is reused (a recorded run that turns out stale runs again: a round
    may then make more than this says, never a second round)."""
    key = runner.executor.case_for(case).key
    total = 0
    for p in points:
        held = [r for r in runner.store.done_runs(key, p.key) if r.outcome is not Outcome.SKIP or r.manual]
        total += max(0, want - len(held))
    return total


def narrowed(sides: Mapping[int, Side], n: int) -> tuple[int, tuple[int, ...]]:
    """Where the first bad point of ``range(n)`` may still be, from the sides known so far:
    (the last good index before the first bad one, every index after it up to that bad one).
    With nothing known the whole range is open (index 0 taken as good, ``n - 1`` as bad)."""
    news = sorted(i for i, s in sides.items() if s is Side.NEW)
    hi = news[0] if news else n - 1
    olds = [i for i, s in sides.items() if s is Side.OLD and i < hi]
    lo = max(olds, default=0)
    return lo, tuple(range(lo + 1, hi + 1))


def sides_of(steps: Iterable[Step], stage: Stage, at: Mapping[str, int],
             side: Callable[[Verdict], Side]) -> dict[int, Side]:
    """Each point of ``stage`` tested so far, by its index (``at``: a commit's hash, or a
    release's version, to its index): the side its last step put it on."""
    out: dict[int, Side] = {}
    for s in steps:
        key = s.commit if stage is Stage.COMMIT else s.version
        if s.stage is stage and key in at:
            out[at[key]] = side(s.verdict)
    return out


def unfinished_message(reason: str, word: str, what: str, labels: Sequence[str], made: int) -> str:
    """What an unfinished search says: why it stopped, where the first ``word`` ``what`` (bad
    commit, fixed release) may still be (``labels``, oldest first), and how to go on."""
    if len(labels) == 1:
        where = f"the first {word} {what} is {labels[0]} (the {what} before it not yet tested)"
    else:
        where = (f"the first {word} {what} is one of these {len(labels)}: "
                 f"{', '.join(labels[:12])}{' …' if len(labels) > 12 else ''}")
    return (f"{reason}: {where}; the same command with the same store goes on from here "
            f"({made} new run{'s' if made != 1 else ''} this time)")
