"""A bisection of a clone's commits with no releases: ``dsbisect bisect PKG --commits OLD..NEW
--git-repo CLONE -- COMMAND`` (the nightly's search: the last green commit to HEAD).

Each commit of the ``span.Span`` is a point built from ``git archive`` of that commit (as the
release bisection's commit step builds them) and tested through a ``probe.Probe``, so every run
lands in the store and a second invocation reuses it: both ends first (the bad end says what
the regression is), then the search (``--repeat``, or ``--confidence`` for a flaky one), then the
revert proof (the first bad commit reverted on top of the bad end).  A ``budget.Meter`` is asked
before each round; when the budget is spent the answer is ``unfinished``: the range narrowed so
far, kept in the store, from which the same command goes on.
"""

from __future__ import annotations

from dataclasses import replace

from dsbisect.bisect.bisection import ReleaseSubject
from dsbisect.bisect.budget import BudgetSpent, Meter, narrowed, new_runs, sides_of, unfinished_message
from dsbisect.bisect.points import Points, ReleasePoints
from dsbisect.bisect.probe import Probe
from dsbisect.bisect.revert import Onto, prove
from dsbisect.bisect.span import Span
from dsbisect.core.model import Answer, GitSource, Outcome, Point, Stage
from dsbisect.envs.gitrepo import Commit
from dsbisect.records.bisections import BisectionStatus
from dsbisect.records.results import CommitResult, Request, Result
from dsbisect.run.runner import Runner
from dsbisect.search import bayes
from dsbisect.search.confidence import Confidence, ends_problem, proof_runs
from dsbisect.search.steps import Search, Side, search

__all__ = ["CommitBisection", "narrowed"]


class CommitBisection:
    """The search of ``span``'s commits for ``request`` (its good and bad are the ends' hashes),
    within ``meter``'s budget; ``points`` makes each commit's point (``ReleasePoints`` unless given)."""

    def __init__(self, runner: Runner, request: Request, span: Span, meter: Meter, points: Points | None = None):
        self.runner, self.req, self.span, self.meter = runner, request, span, meter
        self.points = points or ReleasePoints.of(request.case, request.package, request.pins)
        self.subject = ReleaseSubject(request, runner.store)
        self.probe = Probe(runner, request, self.subject)
        self.chain = list(span.chain)
        version = span.new.describe or span.new.short  # what every commit point leads to: the bad end
        self.pts = [self.points.commit(_source(request.package, span.repo, c), version) for c in self.chain]
        self.labels = [c.short for c in self.chain]

    def run(self) -> Result:
        try:
            return self._run()
        finally:
            self.runner.stop_ahead()

    def _run(self) -> Result:
        req, probe = self.req, self.probe
        self.subject.save(BisectionStatus.RUNNING, {"candidates": self.labels}, probe.rule)
        conf = None
        try:
            if req.confidence is not None:  # flaky: the probabilistic search tests the ends itself
                found, conf, problem = self._flaky()
            else:
                self._afford(self.pts[0], self.pts[-1])
                problem = probe.check_ends(self.labels, self.pts, Stage.COMMIT)
                found = None if problem else search(len(self.pts), self._round, req.width)
        except BudgetSpent as spent:
            return self._finish(self._unfinished(spent.reason))
        if problem:
            return self._finish(Result(req, tuple(self.labels), tuple(probe.steps), problem[0],
                                       message=self._with_note(problem[1])))
        result = self._answer(found)
        if conf is not None:
            result = _with_confidence(result, conf)
        if req.prove and result.verdict is Answer.FOUND and result.commit.first_bad:
            result = self._prove(result)
        return self._finish(result)

    # ------------------------------------------------------------------ budget

    def _afford(self, *points: Point, want: int | None = None) -> None:
        """Raise BudgetSpent unless testing ``points`` fits what is left of the budget."""
        self.meter.count(r for s in self.probe.steps for r in s.runs)
        self.meter.check(new_runs(self.runner, self.req.case, points, self.req.repeat if want is None else want))

    def _round(self, indices) -> list[Side]:
        self._afford(*(self.pts[i] for i in indices))
        return self.probe.test_many(self.pts, indices, Stage.COMMIT)

    def _unfinished(self, reason: str) -> Result:
        last_old, maybe = narrowed(self._sides(), len(self.chain))
        hashes = tuple(self.chain[i].hash for i in maybe)
        cr = CommitResult(self.chain[last_old].hash, None, "", hashes, self.span.between, Answer.UNFINISHED)
        message = unfinished_message(reason, self.req.mode.new, "commit", [self.labels[i] for i in maybe],
                                     self.meter.made)
        return Result(self.req, tuple(self.labels), tuple(self.probe.steps), Answer.UNFINISHED, commit=cr,
                      message=self._with_note(message))

    def _sides(self) -> dict[int, Side]:
        """Each commit tested so far, by its index in the chain: the side its last step put it on."""
        at = {c.hash: i for i, c in enumerate(self.chain)}
        return sides_of(self.probe.steps, Stage.COMMIT, at, self.probe.side)

    # ------------------------------------------------------------------ answer

    def _answer(self, found: Search) -> Result:
        first = self.chain[found.first_new]
        exact = found.exact
        cr = CommitResult(self.chain[found.last_old].hash, first.hash if exact else None, first.subject if exact else "",
                          tuple(self.chain[i].hash for i in found.maybe), self.span.between,
                          Answer.FOUND if exact else Answer.AMBIGUOUS)
        message = "" if exact else (
            f"untestable commits leave {len(found.maybe)} candidates for the first "
            f"{self.req.mode.new} commit: {', '.join(self.labels[i] for i in found.maybe)}"
            + self.probe.why_ambiguous(tuple(self.labels[i] for i in found.maybe)))
        return Result(self.req, tuple(self.labels), tuple(self.probe.steps), cr.verdict, commit=cr,
                      message=self._with_note(message))

    def _with_note(self, message: str) -> str:
        return "; ".join(x for x in (self.span.note, message) if x)

    def _finish(self, result: Result) -> Result:
        result = replace(result, steps=tuple(self.probe.steps), regression=self.probe.regression,
                         different=tuple(self.probe.different.values()))
        self.subject.save(BisectionStatus.DONE, result.to_json(), self.probe.rule)
        return result

    # ------------------------------------------------------------- --confidence

    def _flaky(self) -> tuple[Search | None, Confidence | None, tuple[Answer, str] | None]:
        """The probabilistic search (bayes.search) over the chain, one run per probe, each asked
        of the budget first (the release engine's, over commits)."""
        mode, used, probe, pts = self.req.mode, {}, self.probe, self.pts
        defining = len(pts) - 1 if mode.defining is Side.NEW else 0

        def one(i: int) -> Side:
            self._afford(pts[i], want=used.get(i, 0) + 1)
            runs = self.runner.runs(self.req.case, pts[i], want=used.get(i, 0) + 1)
            new, used[i] = runs[used.get(i, 0):], len(runs)
            if i == defining and any(r.outcome in (Outcome.HANG, Outcome.FAIL) for r in runs):
                probe.learn(self.labels[i], runs)
            return probe.side(probe.step(pts[i], new, Stage.COMMIT).verdict) if new else Side.SKIP

        est = bayes.search(len(pts), one, self.req.confidence, flaky=mode.defining)
        end = pts[defining].key
        probe.learn(self.labels[defining], [r for s in probe.steps for r in s.runs if r.point_key == end])
        conf = Confidence.of(est, self.labels, self.req.confidence, Stage.COMMIT, mode)
        self.runner.progress("note", conf.describe())
        ends = [probe.last_step(pts[i]) for i in (defining, -1 - defining)]
        problem = ends_problem(est.status, mode, (self.labels[defining], self.labels[-1 - defining]),
                               tuple((s.detail, s.outcome) if s else ("", Outcome.SKIP) for s in ends),
                               dict(probe.different), used.get(defining, 0))
        if problem:
            return None, None, problem
        return Search(est.last_old, est.first_new, est.maybe, est.probed), conf, None

    # ------------------------------------------------------------------ proof

    def _prove(self, result: Result) -> Result:
        """Revert the first bad commit on top of the bad end and run that tree (up to two runs,
        asked of the budget; ``revert.prove``): the answer stands whatever it shows."""
        req, new = self.req, self.span.new
        want = max(2, req.repeat, proof_runs(result.confidence))
        at = Onto(self.span.repo, new.short, new.hash, self.pts[-1].version_of(req.package) or new.short, want)
        return replace(result, proof=prove(result, at, self.probe, self.points, self._afford))


def _source(package: str, repo, c: Commit) -> GitSource:
    return GitSource(package, str(repo), c.hash, c.describe, c.subject)


def _with_confidence(result: Result, conf: Confidence) -> Result:
    result = replace(result, confidence=result.confidence + (conf,))
    if conf.sure:
        return result
    return replace(result, verdict=Answer.UNCONFIRMED, message=conf.describe())
