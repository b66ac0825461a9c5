"""Level 1 of an environment bisection for a number (``--good-env A --bad-env B --metric NAME
--worse-if ...``, issue 38): which change costs the number.

``NumericTrials`` stands where level 1's ``probe.Probe`` stands (``check_ends``, ``test_all``,
``side``, ``steps``, ``rule``), so the engine's search over the changes is the same.  The two
environments run first, interleaved, as a release bisection's ends do (``search.numeric`` on two
points): a bad environment not worse than the good one beyond the noise is "not reproduced" with
both values.  Then each trial (the good environment with some changes applied) runs until its
number is called against the good environment's: worse by the threshold beyond the noise (the
trial is bad), surely not (good), or, when its runs reach their cap without telling, untestable
(the search steps around it, as around a trial uv cannot install).  While a trial has more runs
than the good environment, the good one runs again, so that both samples grow.  Level 2 is the
release ``Bisection`` of each culprit with the same metric (``bisect.numeric``).
"""

from __future__ import annotations

from collections.abc import Sequence

from dsbisect.bisect.numeric import Measure
from dsbisect.bisect.probe import Probe, Subject
from dsbisect.core.metric import Call
from dsbisect.core.model import Answer, Point, Stage, Verdict
from dsbisect.records.numbers import NOT_WORSE, UNSURE, UNTESTABLE, WORSE, Numbers, PointNumbers
from dsbisect.records.results import Request, Step
from dsbisect.run.runner import Runner
from dsbisect.search import numeric
from dsbisect.search.steps import Side
from dsbisect.verdict.numbers import Judge, Shape, StepReport, Summary, describe, find_steps

__all__ = ["NumericTrials"]

_VERDICT = {Call.BAD: Verdict.BAD, Call.GOOD: Verdict.GOOD, Call.UNKNOWN: Verdict.SKIP}
_CALL = {Call.BAD: WORSE, Call.GOOD: NOT_WORSE, Call.UNKNOWN: UNSURE}


class NumericTrials:
    """Level 1's trials called by their number: index 0 the good environment, 1 the bad one, then
    each trial in the order asked."""

    def __init__(self, runner: Runner, request: Request, subject: Subject):
        self.runner, self.req, self.subject = runner, request, subject
        self.rule = Probe(runner, request, subject).rule  # pass/fail as bisect's (a run that fails gives no number)
        self.judge = Judge(request.metric)
        self.points: list[Point] = []
        self.labels: list[str] = []
        self.calls: dict[int, Call] = {0: Call.GOOD, 1: Call.BAD}
        self.measure = Measure(runner, request, self.points, self.labels)
        self.steps: list[Step] = []
        self.report: StepReport | None = None

    def side(self, v: Verdict) -> Side:
        return self.req.mode.side(v)

    def check_ends(self, labels: list[str], points: list[Point], stage: Stage) -> tuple[Answer, str] | None:
        """Both environments, interleaved until the bad one is worse beyond the noise or surely not."""
        self.runner.progress("note", self.subject.range_note(labels, stage, 1))
        for label, point in zip((labels[0], labels[-1]), (points[0], points[-1])):
            self.points.append(point)
            self.labels.append(label)
        ends = numeric.search(2, self.measure, self.judge, self.judge.spec.threshold.amount)
        self.report = find_steps(ends.grouped(), self.judge)
        self._stepped()
        spec = self.judge.spec
        if ends.status in (numeric.Status.GOOD_END_UNTESTABLE, numeric.Status.BAD_END_UNTESTABLE):
            i = 0 if ends.status is numeric.Status.GOOD_END_UNTESTABLE else 1
            seen = sorted(self.measure.probed.seen.get(i, set()))
            said = f"; its runs reported {', '.join(seen[:12])}" if seen else "; its runs gave no number"
            return Answer.UNTESTABLE, f"{self.labels[i]}: no {spec.label}{said}"
        if self.report.shape in (Shape.NOT_REPRODUCED, Shape.UNDECIDED):
            return Answer.NOT_REPRODUCED, describe(self.report, spec, self.labels[:2], self.measure.probed.unit)
        return None

    def test_all(self, points: Sequence[Point], stage: Stage) -> list[Step]:
        """Each trial in turn (runs side by side would move each other's numbers)."""
        out = []
        for point in points:
            self.points.append(point)
            self.labels.append(self.subject.label(point))
            i = len(self.points) - 1
            self.calls[i] = self.call(i)
            out.append(self._stepped()[i])
        return out

    def call(self, i: int) -> Call:
        """Run trial ``i`` (and the good environment, while it has fewer runs) until its number is
        called against the good environment's, or its cap."""
        runs, t = self.measure.probed.runs, self.judge.spec.threshold.amount
        while True:
            good, mine = self.values(0), self.values(i)
            if mine and good:
                c = self.judge(good, mine, t, good)
                if c.call is not Call.UNKNOWN:
                    return c.call
            if len(runs.get(i, [])) >= numeric.POINT_RUNS:
                return Call.UNKNOWN
            if mine and len(mine) > len(good) and len(runs.get(0, [])) < numeric.END_RUNS:
                self.measure(0)
            elif self.measure(i) is None:
                return Call.UNKNOWN

    def values(self, i: int) -> tuple[float, ...]:
        """The numbers of index ``i``'s runs so far (a run that gave none left out)."""
        found = (self.measure.value_of(i, r) for r in self.measure.probed.runs.get(i, []))
        return tuple(v for v in found if v is not None)

    def _stepped(self) -> list[Step]:
        """A step per index (the good environment good, the bad one bad, a trial by its call), kept
        and saved as progress; rebuilt whole, since the good environment's runs grow."""
        out = []
        for i, point in enumerate(self.points):
            verdict = _VERDICT[self.calls.get(i, Call.UNKNOWN)] if self.values(i) else Verdict.SKIP
            out.append(Step(Stage.ENV, self.labels[i], "", None, "", verdict,
                            tuple(self.measure.probed.runs.get(i, []))))
        self.steps[:] = out
        self.subject.stepped(tuple(out), self.rule)
        return out

    def numbers(self, verdict: Answer, culprits: Sequence[str]) -> Numbers:
        """The values of the environments and of each trial, and the one-line answer (the culprit
        changes named after the change in the number)."""
        self._stepped()
        spec, unit, good = self.judge.spec, self.measure.probed.unit, self.values(0)
        points = []
        for i, label in enumerate(self.labels):
            values = self.values(i)
            s = Summary.of(values) if values else Summary(0.0, 0.0, 0)
            call, effect = (UNTESTABLE, 0.0) if not values else (NOT_WORSE, 0.0)
            if values and i and good:
                c = self.judge(good, values, spec.threshold.amount, good)
                call, effect = _CALL[c.call], c.effect
            points.append(PointNumbers(label, values, s.median, s.spread, call, effect))
        report = self.report
        line = describe(report, spec, self.labels[:2], unit) if report else f"no {spec.label} from the environments"
        if culprits:
            line = line.replace(f" at {self.labels[1]}", "") + ": " + " and ".join(culprits)
        shape = report.shape.value if report and verdict is not Answer.UNTESTABLE else "untestable"
        return Numbers(spec.label, f"worse if {spec.direction.value} by {spec.threshold.describe()}", unit, shape,
                       line, tuple(points), (), sum(len(r) for r in self.measure.probed.runs.values()))
