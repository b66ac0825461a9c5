"""What a ``--confidence P`` search says of its answer: the figure, the runs, the failure rate.

Pure: the bisection builds it from ``bayes.Estimate`` and the labels of the points searched;
the report prints ``describe()`` and the JSON carries ``as_json()`` under the result's
``confidence`` key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from dsbisect.search.bayes import Estimate, Status
from dsbisect.core.mode import Mode, Side
from dsbisect.core.model import Answer, Outcome, Stage


@dataclass(frozen=True)
class Confidence:
    asked: float  # P
    stage: Stage  # release | commit
    status: Status
    probability: float  # of the answer's boundary (the rate taken low: see bayes.Belief.sure)
    runs: int  # every run the search counted, recorded ones included
    rate: float  # how often runs at the points on the failing side failed
    last_good: str  # labels (of the last old and first new point: last broken / first fixed looking for a fix)
    first_bad: str
    maybe: tuple[str, ...]
    mode: Mode = Mode.REGRESSION

    @classmethod
    def of(cls, est: Estimate, labels: list[str], asked: float, stage: Stage, mode: Mode) -> Confidence:
        return cls(asked, stage, est.status, est.probability, est.runs, est.rate, labels[est.last_old],
                   labels[est.first_new], tuple(labels[i] for i in est.maybe), mode)

    @property
    def sure(self) -> bool:
        return self.status is Status.SURE

    def describe(self) -> str:
        """``first bad 1.4.0 with probability 0.97 (17 runs; bad points failed 68 % of the time,
        good points never)``; at the cap: ``most likely ...; not sure (...)``."""
        word = self.mode.first_new
        failing, never = self.mode.end(self.mode.defining), self.mode.end(self.mode.defining.other)
        what = f"{word} {self.first_bad}" if len(self.maybe) == 1 else \
            f"{word} one of {', '.join(self.maybe)} (untestable points between {self.last_good} and {self.first_bad})"
        figure = f"with probability {_figure(self.probability)}"
        cap = ", the cap" if self.status is Status.CAPPED else ""
        runs = (f"{self.runs} run{'s' if self.runs != 1 else ''}{cap}; {failing} points failed "
                f"{round(100 * self.rate)} % of the time, {never} points never")
        if self.status is Status.CAPPED:
            return f"most likely {what} {figure}; not sure ({runs}; asked for {self.asked:g})"
        return f"{what} {figure} ({runs})"

    def as_json(self) -> dict:
        return {"stage": self.stage.value, "status": self.status.value, "sure": self.sure,
                "probability": round(self.probability, 4), "runs": self.runs, "failure_rate": round(self.rate, 4),
                "last_good": self.last_good, "first_bad": self.first_bad, "maybe": list(self.maybe),
                "sentence": self.describe()}


    @classmethod
    def from_json(cls, d: Mapping, asked: float, mode: Mode) -> Confidence | None:
        """One stage's figure as ``as_json`` wrote it; None for a record too odd to read."""
        try:
            return cls(asked, Stage(d["stage"]), Status(d["status"]), float(d["probability"]), int(d["runs"]),
                       float(d["failure_rate"]), str(d["last_good"]), str(d["first_bad"]),
                       tuple(str(m) for m in d.get("maybe") or ()), mode)
        except (KeyError, TypeError, ValueError):
            return None


def confidence_from_json(d: object, mode: Mode) -> tuple[float | None, tuple[Confidence, ...]]:
    """A result's ``confidence`` key read back: (P asked, the stages' figures); (None, ()) without it."""
    if not isinstance(d, Mapping) or not isinstance(d.get("asked"), (int, float)):
        return None, ()
    asked = float(d["asked"])
    found = (Confidence.from_json(d[k], asked, mode) for k in ("release", "commit") if isinstance(d.get(k), Mapping))
    return asked, tuple(c for c in found if c is not None)


def _figure(p: float) -> str:
    """Two decimals, never rounded up to a certainty the search does not have."""
    shown = f"{p:.2f}"
    return "0.99" if shown == "1.00" and p < 1 else shown


def confidence_json(asked: float | None, found: tuple[Confidence, ...]) -> dict | None:
    """The result's ``confidence`` key: None without --confidence."""
    if asked is None:
        return None
    by = {c.stage: c for c in found}
    return {"asked": asked, "release": by[Stage.RELEASE].as_json() if Stage.RELEASE in by else None,
            "commit": by[Stage.COMMIT].as_json() if Stage.COMMIT in by else None}


def ends_problem(status: Status, mode: Mode, labels: tuple[str, str], steps: tuple[tuple[str, Outcome], ...],
                 different: dict[str, str], end_runs: int) -> tuple[Answer, str] | None:
    """The verdict when an end of a --confidence search did not behave as declared (None: both
    did).  ``labels`` and ``steps`` (detail, outcome of its last step): the defining end (the bad
    one; looking for a fix, the broken one) first, then the other; as the plain search's ends check says."""
    ends = (mode.defining, mode.defining.other)
    names = tuple(mode.end(e) for e in ends)
    if status in (Status.FLAKY_END_SKIP, Status.OTHER_END_SKIP):
        k = 0 if status is Status.FLAKY_END_SKIP else 1
        if labels[k] in different:
            return Answer.UNTESTABLE, f"the {names[k]} end: {different[labels[k]]}"
        return Answer.UNTESTABLE, f"{labels[k]} (the {names[k]} end) could not be tested: {steps[k][0]}"
    if status is Status.NOT_REPRODUCED:
        return Answer.NOT_REPRODUCED, mode.misbehaved(ends[0], labels[0], f"passed {end_runs} of {end_runs} runs")
    if status is Status.OTHER_END_FAILS:
        shown = "hung" if steps[1][1] is Outcome.HANG else "failed"
        answer = Answer.NOT_REPRODUCED if ends[1] is Side.NEW else Answer.GOOD_END_BAD
        return answer, mode.misbehaved(ends[1], labels[1], shown)
    return None


def proof_runs(found: tuple[Confidence, ...]) -> int:
    """Runs of the revert proof's tree under --confidence: enough that a tree still failing at the
    rate seen would have failed at least once with probability P (a flaky "PASS" proves nothing)."""
    conf = found[-1] if found else None
    if conf is None or conf.rate <= 0:
        return 0
    if conf.rate >= 1:
        return 1
    return min(50, math.ceil(math.log(1 - conf.asked) / math.log(1 - conf.rate)))
