"""Testing the points of a search: each point's runs through the ``Runner``, its verdict under
the regression's rule, the steps taken, and both ends checked before the search starts.

Every engine that searches over points (the release and commit ``Bisection``, an environment
bisection's trials) tests them through a ``Probe``: what differs between engines is what their
points are called, how an end that does not behave is worded, and where their progress is kept,
and that an engine says through a ``Subject`` (as cargo-bisect-rustc keeps the search apart from
installing and testing).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from dsbisect.core import eta
from dsbisect.core.mode import Mode
from dsbisect.core.model import Answer, Case, Point, RegressOn, Stage, Verdict
from dsbisect.records.results import Regression, Request, Step
from dsbisect.records.run import RunRecord
from dsbisect.run.runner import CaseOf, Runner
from dsbisect.search.steps import Side, lookahead
from dsbisect.verdict.identity import Rule, resolve
from dsbisect.verdict.outcome import combine


class Subject(Protocol):
    """What a search's points are to whoever reads about them."""

    def label(self, point: Point) -> str:
        """What progress lines and steps call ``point`` (a version, a short hash, a trial)."""

    def ends_message(self, step: Step, end: Side, label: str) -> tuple[Answer, str]:
        """The verdict and message when ``end`` (OLD: the good or broken end; NEW: the bad or
        fixed one), labelled ``label``, did not behave as declared (``step`` is its run)."""

    def swapped_message(self, old: Step, new: Step, labels: tuple[str, str]) -> tuple[Answer, str]:
        """The verdict and message when each end did what the other was declared to (the old
        end's run ``old``, the new end's ``new``, labelled ``labels``): the ends look swapped."""

    def range_note(self, labels: list[str], stage: Stage, width: int) -> str:
        """What the search covers, said before the ends run (``labels``: its points in order)."""

    def stepped(self, steps: tuple[Step, ...], rule: Rule) -> None:
        """A step ended (``steps``: all so far; ``rule``: what counts as bad now): keep the
        search's progress, so that an interrupted search shows how far it got."""


def steps_for(left: int, width: int) -> int:
    """Rounds of ``width`` points that a search among ``left`` untested candidates takes (each
    round splits what is left into ``width + 1`` parts); at least one."""
    if left <= 0:
        return 1
    return max(1, math.ceil(math.log(left + 1) / math.log(max(1, width) + 1) - 1e-9))


def range_note(labels: list[str], stage: Stage, mode: Mode, width: int) -> str:
    """What a search covers, said before its first run: "7 releases from 0.18.1 to 0.18.7 (5
    between them: about 3 steps after the ends); both ends first: 0.18.1 (good) and 0.18.7 (bad)"."""
    what = "commits" if stage is Stage.COMMIT else "releases"
    between = max(0, len(labels) - 2)
    steps = steps_for(between, width)
    after = f"about {steps} step{'s' if steps > 1 else ''} after the ends" if between else "no release between them"
    if stage is Stage.COMMIT and not between:
        after = "no commit between them"
    return (f"{len(labels)} {what} from {labels[0]} to {labels[-1]} ({between} between them: {after}); both ends "
            f"first: {labels[0]} ({mode.old}) and {labels[-1]} ({mode.new})")


class Probe:
    """Runs points of one search under one request's verdict settings (``--regress-on``,
    ``--signature``, ``--any-failure``, ``--repeat``, ``--find-fix``, ``--width``), keeping its
    steps and what it learned of the regression from the defining end."""

    def __init__(self, runner: Runner, request: Request, subject: Subject, cases: CaseOf | None = None):
        self.runner, self.req, self.subject = runner, request, subject
        self.case: Case | CaseOf = cases or request.case  # a function of the point where trials differ in settings
        self.steps: list[Step] = []
        # What counts as bad: AUTO counts any failure until the defining end has run (learn).
        self.rule = Rule(request.regress_on, request.signature)
        self.regression: Regression | None = None
        self._different: dict[str, str] = {}  # label -> why it was not counted
        self._known: dict[int, dict[int, Side]] = {}  # per list of points searched: index -> side
        self._rounds: list[float] = []  # wall seconds of each round that ran something (eta.time_left)
        self._launched: list[float] = []  # of each such round, its longest run's own seconds (launch to verdict)
        self._after_ends = 0  # rounds before this one were the ends' (venvs built, bytecode cached: once)
        self._t0 = time.time()

    @property
    def different(self) -> Mapping[str, str]:
        """Label -> why its failure was not counted (it failed otherwise than the regression)."""
        return self._different

    # ----------------------------------------------------------------- verdicts

    def side(self, v: Verdict) -> Side:
        """The side of the search a verdict puts a point on (looking for a fix, BAD is the old side)."""
        return self.req.mode.side(v)

    def verdict(self, r: RunRecord) -> Verdict:
        return r.verdict(self.rule)  # the one rule (records.RunRecord.verdict), dsbisect log's too

    def enough(self, runs: list[RunRecord]) -> bool:
        """Whether the runs of a point so far decide it (one bad run does)."""
        return any(self.verdict(r) is Verdict.BAD for r in runs)

    # -------------------------------------------------------------------- steps

    def test(self, point: Point, stage: Stage, learn: str | None = None) -> Step:
        """``--repeat`` runs of ``point`` (fewer when one is bad), as a step; ``learn``: the
        label of the defining end, whose runs say what the regression is."""
        runs = self.runner.runs(self._case_of(point), point, want=self.req.repeat, enough=self.enough)
        if learn is not None:
            self.learn(learn, runs)
        return self.step(point, runs, stage)

    def test_all(self, points: Sequence[Point], stage: Stage) -> list[Step]:
        """Each point's step (run at once, one per free slot, when there are several)."""
        found = self.runner.run_many(self.case, list(points), want=self.req.repeat, enough=self.enough)
        return [self.step(p, runs, stage) for p, runs in zip(points, found)]

    def step(self, point: Point, runs: list[RunRecord], stage: Stage) -> Step:
        """``runs`` of ``point`` as a step of the search (kept, and its progress saved)."""
        v = combine([self.verdict(r) for r in runs])
        src = point.source
        step = Step(stage, self.subject.label(point), point.version_of(self.req.package) or "",
                    src.commit if src else None, src.subject if src else "", v, tuple(runs))
        if v is Verdict.SKIP:  # a point that a run of the regression made bad is bad, whatever its other runs
            self._note_different(step.label, runs)
        self.steps.append(step)
        self.subject.stepped(tuple(self.steps), self.rule)
        return step

    def _case_of(self, point: Point) -> Case:
        return self.case(point) if callable(self.case) else self.case

    def last_step(self, point: Point) -> Step | None:
        return next((s for s in reversed(self.steps) if s.runs and s.runs[0].point_key == point.key), None)

    # ------------------------------------------------------------ the regression

    def learn(self, label: str, runs: list[RunRecord]) -> None:
        """From the defining end's runs (the bad end; with --find-fix the broken one): AUTO's
        concrete rule, and the failure that is "the regression" (unless --any-failure or
        --signature say otherwise).  Learned once: the first end that ran decides."""
        if self.regression is not None:
            return
        req = self.req
        seen = [i for r in runs if r.manual is None and (i := r.identity()) is not None]
        if req.regress_on in (RegressOn.HANG, RegressOn.FAIL):
            seen = [i for i in seen if i.kind.value == req.regress_on.value]
        end = min(seen, key=lambda i: i.kind.rank, default=None)  # a hang before a failure (model.WORST_FIRST)
        rule_on = resolve(req.regress_on, end)
        learned = None if (req.any_failure or req.signature or end is None) else end
        self.rule = Rule(rule_on, req.signature, learned)
        self.regression = Regression(rule_on, learned, label, req.mode.defining_end, req.regress_on)
        if learned is not None:
            self.runner.progress("note", self.regression.describe())

    def _note_different(self, label: str, runs: list[RunRecord]) -> None:
        for r in runs:
            seen = r.identity()
            if self.verdict(r) is Verdict.SKIP and self.rule.differs(r.outcome, seen) and label not in self._different:
                self._different[label] = (f"{label} failed differently ({seen.shown}"
                                          + (f" at {' ← '.join(seen.frames[:2])}" if seen.frames else "")
                                          + "): not counted; --any-failure counts it")

    def why_ambiguous(self, maybe: tuple[str, ...]) -> str:
        """Why the candidates ``maybe`` were not told apart, where a failure of another kind says so."""
        why = [self._different[m] for m in maybe if m in self._different]
        return f" ({'; '.join(why)})" if why else ""

    # ---------------------------------------------------------------- the search

    def check_ends(self, labels: list[str], points: list[Point], stage: Stage) -> tuple[Answer, str] | None:
        """Both ends must behave as declared; otherwise (verdict, message)."""
        mode = self.req.mode
        self.runner.progress("note", self.subject.range_note(labels, stage, self.req.width))
        ends = self.timed([points[0], points[-1]])
        self._after_ends = len(self._rounds)
        k = -1 if mode.defining is Side.NEW else 0
        self.learn(labels[k], ends[k])
        old, new = (self.step(p, runs, stage) for p, runs in zip((points[0], points[-1]), ends))
        checked = ((old, Side.OLD, labels[0]), (new, Side.NEW, labels[-1]))
        for step, want, label in checked:  # an end that could not be tested first: no other word is sure
            name = mode.end(want)
            if self.side(step.verdict) is Side.SKIP:
                return Answer.UNTESTABLE, (f"the {name} end: {self._different[label]}" if label in self._different
                                           else f"{label} (the {name} end) could not be tested: {step.detail}")
        if (self.side(old.verdict), self.side(new.verdict)) == (Side.NEW, Side.OLD):
            return self.subject.swapped_message(old, new, (labels[0], labels[-1]))
        for step, want, label in checked:
            if self.side(step.verdict) is not want:
                return self.subject.ends_message(step, want, label)
        return None

    def test_many(self, points: list[Point], indices, stage: Stage) -> list[Side]:
        """Test the points at ``indices`` (at once, one per free slot, when there are several),
        the venvs of both possible next rounds built meanwhile."""
        chosen = [points[i] for i in indices]
        self._announce(points, indices, stage)
        known = self._known.setdefault(id(points), {0: Side.OLD, len(points) - 1: Side.NEW})
        lo = max((i for i, s in known.items() if s is Side.OLD), default=0)
        hi = min((i for i, s in known.items() if s is Side.NEW and i > lo), default=len(points) - 1)
        ahead = lookahead(lo, hi, known, indices, self.req.width)
        self.runner.prepare_ahead(self.case, [points[i] for i in ahead])  # both possible next points
        found = self.timed(chosen)
        sides = [self.side(self.step(p, runs, stage).verdict) for p, runs in zip(chosen, found)]
        self._known.setdefault(id(points), {}).update(zip(indices, sides))
        return sides

    def _announce(self, points: list[Point], indices, stage: Stage) -> None:
        """Where the search is: "7 candidates left (about 3 steps); testing 0.12.3"."""
        known = self._known.setdefault(id(points), {0: Side.OLD, len(points) - 1: Side.NEW})
        lo = max((i for i, s in known.items() if s is Side.OLD), default=0)
        hi = min((i for i, s in known.items() if s is Side.NEW and i > lo), default=len(points) - 1)
        left = sum(1 for i in range(lo + 1, hi) if i not in known)
        what = "commits" if stage is Stage.COMMIT else "candidates"
        steps = steps_for(left, self.req.width)
        eta_ = eta.about(eta.time_left(eta.pace(self._rounds[self._after_ends:], self._launched), steps))
        self.runner.progress("note", f"{left} {what} left (about {steps} step{'s' if steps > 1 else ''}"
                                     f"{f', {eta_} at the pace so far' if eta_ else ''}); testing "
                                     f"{', '.join(self.subject.label(points[i]) for i in indices)}")

    def timed(self, chosen: list[Point]) -> list[list[RunRecord]]:
        """``run_many`` of ``chosen``, its wall time kept as rounds for the estimate (a round that
        only reused recorded runs took no time a new one would take: left out)."""
        t0 = time.monotonic()
        found = self.runner.run_many(self.case, chosen, want=self.req.repeat, enough=self.enough)
        new = [r for runs in found for r in runs if r.started >= self._t0 and r.manual is None]
        if new:
            n = eta.rounds_of(len(chosen), self.req.width)
            self._rounds += [(time.monotonic() - t0) / n] * n
            self._launched += [max(r.seconds or 0.0 for r in new)] * n
        return found
