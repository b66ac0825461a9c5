"""The release bisection of a number (``bisect ... --metric NAME --worse-if 'lower by 5%'``,
issue 38): ``search.numeric`` chooses what runs next, ``verdict.numbers`` judges the samples, and
this runs the points and turns what they measured into a ``Result``.

A run's number is its readings of the metric (``evidence.readings`` of its record, and the
user's ``--metric-pattern`` read from its logs) folded by the spec; a run that did not pass, or
whose ranks reported no such reading, gives none, and a point with no number is untestable (an
end that is says so, with the names its run did report).  Both ends run first, interleaved; a bad
end not worse than the good one beyond the noise is "not reproduced" with both ends' values.
Each tested point is called worse, not worse or unsure against the good end, and flagged when it
was measured under other conditions than the ends (``records.conditions``); a time metric on a
loaded machine gets a note that its verdicts are weak there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from dsbisect.core.errors import InputError
from dsbisect.core.metric import Call, MetricSpec, Reading, percent_undefined, run_value
from dsbisect.core.model import Answer, Outcome, Point, Stage, Verdict
from dsbisect.core.rundir import RunDir
from dsbisect.records.conditions import LOAD_SLACK, Conditions, differences
from dsbisect.records.numbers import NOT_WORSE, UNSURE, UNTESTABLE, WORSE, Numbers, PointNumbers
from dsbisect.records.results import Request, Result, Step
from dsbisect.records.run import RunRecord
from dsbisect.run import readings as run_readings
from dsbisect.run.runner import Runner
from dsbisect.search import numeric
from dsbisect.verdict.numbers import Judge, Shape, StepReport, Summary, describe, find_steps
from dsbisect.verdict.readings import compile_pattern

__all__ = ["Measure", "bisect_numbers", "readings_of"]

_TIMING_UNITS = ("s", "ms", "us", "ns", "min", "h", "samples/s", "steps/s")
_CALLS = {Call.BAD: WORSE, Call.GOOD: NOT_WORSE, Call.UNKNOWN: UNSURE}


@dataclass
class _Probed:
    """What the search has run so far: each index's runs, and the unit and the names seen."""

    runs: dict[int, list[RunRecord]] = field(default_factory=dict)
    unit: str = ""
    seen: dict[int, set[str]] = field(default_factory=dict)


def readings_of(run: RunRecord, spec: MetricSpec, pattern: re.Pattern | None) -> tuple[Reading, ...]:
    """The run's readings: its record's, and the pattern's matches in its logs."""
    found = run.evidence.numbers
    if pattern is not None and run.run_dir:
        found += run_readings.pattern(RunDir(Path(run.run_dir)), pattern, spec.name)
    return found


class Measure:
    """``probe(i)`` for ``search.numeric``: one more run of point ``i``, and its number."""

    def __init__(self, runner: Runner, req: Request, points: Sequence[Point], labels: Sequence[str]):
        self.runner, self.req, self.points, self.labels = runner, req, points, labels
        self.pattern = compile_pattern(req.metric_pattern) if req.metric_pattern else None
        self.probed = _Probed()

    def __call__(self, i: int) -> float | None:
        value = self._once(i)
        have = self.probed.runs[i]
        if value is None and _failed_first(have):  # one failure may be the machine's: once more
            self.runner.progress("note", f"{self.labels[i]}: run {len(have)} did not pass "
                                         f"({have[-1].outcome.value}): it gave no {self.req.metric.label}; once more")
            value = self._once(i)
        return value

    def _once(self, i: int) -> float | None:
        have = self.probed.runs.setdefault(i, [])
        runs = self.runner.runs(self.req.case, self.points[i], want=len(have) + 1)
        known = {r.id for r in have}  # a recorded run found stale is run again: new ids, not new places
        new = [r for r in runs if r.id not in known]
        have += new
        value = None
        for r in new:
            value = self.value_of(i, r) if value is None else value
        shown = "no reading" if value is None else f"{value:.6g} {self.probed.unit}".rstrip()
        self.runner.progress("note", f"{self.labels[i]}: {self.req.metric.label} = {shown} (run {len(have)})")
        return value

    def value_of(self, i: int, r: RunRecord) -> float | None:
        """Run ``r``'s number (None: it did not pass, or gave none), point ``i``'s names noted."""
        readings = readings_of(r, self.req.metric, self.pattern)
        self.probed.seen.setdefault(i, set()).update(x.name for x in readings)
        if r.outcome is not Outcome.PASS:
            return None
        try:
            got = run_value(readings, self.req.metric)
        except InputError as e:  # its unit cannot be compared with the threshold's: said, not counted
            self.probed.seen.setdefault(i, set()).add(f"(unusable: {e})")
            return None
        if got is None:
            return None
        self.probed.unit = self.probed.unit or got.unit
        return got.value


def _failed_first(runs: Sequence[RunRecord]) -> bool:
    """Whether the point's one failed or hung run is its latest (the only one that did not pass,
    a skip aside: that is no accident of the machine)."""
    failed = [r for r in runs if r.outcome is not Outcome.PASS]
    return len(failed) == 1 and failed[0] is runs[-1] and failed[0].outcome in (Outcome.FAIL, Outcome.HANG)


def bisect_numbers(runner: Runner, req: Request, labels: Sequence[str], points: Sequence[Point],
                   stage: Stage = Stage.RELEASE) -> Result:
    """The search for the first candidate whose number is worse than the good end's by the
    threshold, beyond the noise: the result, with the numbers per tested point."""
    spec = req.metric
    assert spec is not None, "bisect_numbers needs a request with a metric"
    judge = Judge(spec)
    measure = Measure(runner, req, points, labels)
    cap = numeric.POINT_RUNS if req.repeat <= 1 else max(3, req.repeat)
    found = numeric.search(len(points), measure, judge, spec.threshold.amount,
                           point_runs=cap, end_runs=max(cap, 3) if req.repeat > 1 else numeric.END_RUNS)
    probed = measure.probed
    steps = tuple(_steps(found, probed, labels, points, judge, req, stage))
    base = Result(req, tuple(labels), steps, Answer.UNTESTABLE)
    if found.status in (numeric.Status.GOOD_END_UNTESTABLE, numeric.Status.BAD_END_UNTESTABLE):
        i = 0 if found.status is numeric.Status.GOOD_END_UNTESTABLE else len(points) - 1
        return _with(base, Answer.UNTESTABLE, _untestable(spec, labels[i], i, probed), found, judge, labels,
                     (), probed.unit)
    report = find_steps(found.grouped(), judge)
    line = describe(report, spec, labels, probed.unit)
    verdict, last_good, first_bad, maybe = _answer(report, labels)
    notes = _notes(report, spec, probed) + _left_out(found, spec, labels, probed)
    return _with(base, verdict, line, found, judge, labels, notes, probed.unit,
                 last_good=last_good, first_bad=first_bad, maybe=maybe, shape=report.shape)


def _answer(report: StepReport, labels: Sequence[str]) -> tuple[Answer, str | None, str | None, tuple[str, ...]]:
    """(verdict, last good, first bad, the candidates left between them) of a step report: the
    first step over the threshold, in candidate order."""
    if report.shape is Shape.NOT_REPRODUCED or report.shape is Shape.UNDECIDED:
        return Answer.NOT_REPRODUCED, None, None, ()
    over = sorted(report.over, key=lambda s: s.first)
    if not over:  # spread out, or no step could be sized: no single culprit
        return Answer.AMBIGUOUS, labels[0], labels[-1], tuple(labels[1:])
    first = over[0]
    if first.first == first.last + 1:
        return Answer.FOUND, labels[first.last], labels[first.first], ()
    return Answer.AMBIGUOUS, labels[first.last], labels[first.first], tuple(labels[first.last + 1:first.first + 1])


def _with(base: Result, verdict: Answer, line: str, found: numeric.Exploration, judge: Judge,
          labels: Sequence[str], notes: Sequence[str], unit: str, *, last_good: str | None = None,
          first_bad: str | None = None, maybe: tuple[str, ...] = (), shape: Shape | None = None) -> Result:
    spec = judge.spec
    numbers = Numbers(spec.label, f"worse if {spec.direction.value} by {spec.threshold.describe()}",
                      unit, shape.value if shape else "untestable", line,
                      tuple(_point_numbers(found, judge, labels, base)), tuple(notes), found.runs.total)
    return replace(base, verdict=verdict, message=line, last_good=last_good, first_bad=first_bad, maybe=maybe,
                   numbers=numbers)


def _point_numbers(found: numeric.Exploration, judge: Judge, labels: Sequence[str], base: Result):
    good = found.runs.values[0]
    conditions = {s.label: s for s in base.steps}
    for i, values in enumerate(found.runs.values):
        if not values and i not in found.runs.untestable:
            continue
        s = Summary.of(values) if values else Summary(0.0, 0.0, 0)
        if not values:
            call, effect = UNTESTABLE, 0.0
        elif i == 0:
            call, effect = NOT_WORSE, 0.0
        else:
            c = judge(good, values, judge.spec.threshold.amount, good) if good else None
            call, effect = (_CALLS[c.call], c.effect) if c else (UNSURE, 0.0)
        step = conditions.get(labels[i])
        yield PointNumbers(labels[i], values, s.median, s.spread, call, effect, _flags(step, base.steps))


def _flags(step: Step | None, steps: Sequence[Step]) -> tuple[str, ...]:
    """What differed in this point's runs' conditions from the ends' first runs."""
    if step is None or not step.runs or not steps or step in (steps[0], steps[-1]):
        return ()
    ends = [Conditions.from_json(s.runs[0].facts.conditions) for s in (steps[0], steps[-1]) if s.runs]
    mine = Conditions.from_json(step.runs[-1].facts.conditions)
    return tuple(dict.fromkeys(d for end in ends for d in differences(end, mine)))


def _steps(found: numeric.Exploration, probed: _Probed, labels: Sequence[str], points: Sequence[Point],
           judge: Judge, req: Request, stage: Stage):
    """A step per tested point, the ends first and last: bad where worse than the good end."""
    good = found.runs.values[0]
    order = sorted(probed.runs, key=lambda i: (i != 0, i == len(points) - 1, i))
    for i in order:
        values = found.runs.values[i]
        if not values:
            v = Verdict.SKIP
        elif i == 0:
            v = Verdict.GOOD
        else:
            c = judge(good, values, judge.spec.threshold.amount, good).call if good else Call.UNKNOWN
            v = {Call.BAD: Verdict.BAD, Call.GOOD: Verdict.GOOD}.get(c, Verdict.SKIP)
        src = points[i].source
        yield Step(stage, labels[i], points[i].version_of(req.package) or "", src.commit if src else None,
                   src.subject if src else "", v, tuple(probed.runs[i]))


def _untestable(spec: MetricSpec, label: str, i: int, probed: _Probed) -> str:
    runs = probed.runs.get(i, [])
    failed = [r for r in runs if r.outcome is not Outcome.PASS]
    if failed:
        return f"{label}: its run did not pass ({failed[0].outcome.value}), so it gave no {spec.label}"
    names = sorted(probed.seen.get(i, set()))
    said = f"; its runs reported {', '.join(names[:12])}" if names else "; its runs reported no numbers"
    return f"{label}: no rank reported {spec.label}{said}"


def _left_out(found: numeric.Exploration, spec: MetricSpec, labels: Sequence[str], probed: _Probed) -> list[str]:
    """Why each candidate that gave no number was left out of the levels."""
    return [_untestable(spec, labels[i], i, probed) + ": left out" for i in sorted(found.runs.untestable)]


def _notes(report: StepReport, spec: MetricSpec, probed: _Probed) -> list[str]:
    """A good end of ~0 under a relative threshold; a loaded machine's note for a time metric."""
    return _zero_note(report, spec, probed.unit) + _load_note(spec, probed)


def _zero_note(report: StepReport, spec: MetricSpec, unit: str) -> list[str]:
    """Under a relative threshold, a good end of ~0 makes a percentage meaningless: said, with
    how the points were judged."""
    if not spec.threshold.relative or len(report.points) < 2:
        return []
    good, bad = report.points[0][1].median, report.points[-1][1].median
    if not percent_undefined(good, bad - good):
        return []
    return [f"the good end's {spec.label} is {good:.4g} {unit}".rstrip() + f", ~0 next to the change: a percentage "
            f"of it is undefined, so changes are shown as amounts, and {spec.threshold.describe()} of ~0 is ~0 (any "
            "change beyond the noise counts); give --worse-if an amount in a unit to set a size"]


def _load_note(spec: MetricSpec, probed: _Probed) -> list[str]:
    timing = probed.unit in _TIMING_UNITS or spec.name in ("wall_time", "step_time") or "per_sec" in spec.name
    busy = [c.busy for runs in probed.runs.values() for r in runs
            if (c := Conditions.from_json(r.facts.conditions)).busy is not None]
    if timing and busy and max(busy) > LOAD_SLACK:
        return [f"the machine was loaded (up to {max(busy):.1f} runnable per core while measuring): "
                f"timing verdicts are weak here; rerun on an idle machine to trust {spec.label}"]
    return []
