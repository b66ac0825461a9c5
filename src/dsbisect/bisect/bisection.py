"""A whole bisection: candidates, ends check, release search, then commit search.

The search itself is ``search.search`` (pure); this module turns versions and commits into
points (through a ``points.Points``), tests them through a ``probe.Probe`` (so every run lands
in the store and a second invocation reuses it), and maps outcomes to the old/new sides of the
search.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from dsbisect.bisect.budget import BudgetSpent, Meter, narrowed, new_runs, sides_of, unfinished_message
from dsbisect.bisect.points import Points, ReleasePoints
from dsbisect.bisect.probe import Probe, range_note, steps_for
from dsbisect.bisect.revert import Onto, prove
from dsbisect.core.model import Answer, GitSource, IndexOptions, Outcome, Point, Stage
from dsbisect.core.redact import redact_tree
from dsbisect.envs import gitrepo
from dsbisect.envs.versions import AUTO, candidates, gaps
from dsbisect.records.bisections import AskedFor, BisectionStatus
from dsbisect.records.results import Agreement, CommitResult, Confirmation, Request, Result, Step
from dsbisect.run.runner import Runner
from dsbisect.search import bayes
from dsbisect.search.confidence import Confidence, ends_problem, proof_runs
from dsbisect.search.steps import Search, Side, search
from dsbisect.store.store import Store
from dsbisect.verdict.identity import Rule

__all__ = ["Bisection", "Plan", "ReleaseSubject", "plan", "range_note", "steps_for"]


@dataclass(frozen=True)
class Plan:
    """What a request resolves to before anything runs: the candidates, and the clone."""

    versions: tuple[str, ...]
    repo: Path | None


def plan(req: Request, index: IndexOptions) -> Plan:
    """Check a request against the index and the clone (an InputError for a bad range, an
    unknown package or version, a missing clone) without touching the store or the cache.
    BAD ``latest`` becomes the newest release; GOOD ``auto`` keeps every release before BAD."""
    repo = gitrepo.check_repo(req.git_repo) if req.git_repo else None
    found = candidates(req.package, req.good, req.bad, index, req.pre, req.include_yanked)
    return Plan(tuple(str(v) for v in found), repo)


SHOWN = {Outcome.PASS: "passed", Outcome.FAIL: "failed", Outcome.HANG: "hung", Outcome.SKIP: "was skipped"}


@dataclass(frozen=True)
class ReleaseSubject:
    """A release bisection as a ``probe.Subject``: its points called by version (a commit by
    its short hash), its ends worded as releases, its progress kept under the request's key."""

    request: Request
    store: Store

    def label(self, point: Point) -> str:
        return point.source.short if point.source else (point.version_of(self.request.package) or point.label)

    def ends_message(self, step: Step, end: Side, label: str) -> tuple[Answer, str]:
        answer = Answer.NOT_REPRODUCED if end is Side.NEW else Answer.GOOD_END_BAD
        return answer, self.request.mode.misbehaved(end, label, SHOWN[step.outcome])

    def swapped_message(self, old: Step, new: Step, labels: tuple[str, str]) -> tuple[Answer, str]:
        mode = self.request.mode
        said = (f"{mode.did(Side.OLD, labels[0], SHOWN[old.outcome])} and "
                f"{mode.did(Side.NEW, labels[1], SHOWN[new.outcome])}")
        return Answer.GOOD_END_BAD, mode.swapped(said)

    def range_note(self, labels: list[str], stage: Stage, width: int) -> str:
        return range_note(labels, stage, self.request.mode, width)

    def stepped(self, steps: tuple[Step, ...], rule: Rule) -> None:
        self.save(BisectionStatus.RUNNING, {"steps": [s.to_json() for s in steps]}, rule)

    def save(self, status: BisectionStatus, result: dict, rule: Rule) -> None:
        """The bisection's row in the store: what it was asked (``rule``: what counts as bad, once
        learned, for `dsbisect log`; the command and where it ran), ``status`` and ``result``."""
        req = self.request
        asked = AskedFor.of_release(req, rule, str(Path.cwd()))
        # argv, a reason or a subject may hold credentials (an index URL's, a --hub_token): stored
        # masked (the group reads the store); a rerun takes them from its own command line
        self.store.save_bisection(req.key, req.package, req.good, req.bad, asked.masked(), status,
                                  redact_tree(result))


class Bisection:
    """The release search of ``request`` (then its commit step, ``--confirm`` and the revert
    proof): its points made by ``points`` (``ReleasePoints`` of the request unless given),
    tested by a ``Probe`` whose subject is the request's ``ReleaseSubject``; within ``meter``'s
    budget when given (``--max-runs``, ``--deadline``: asked before each round, the answer
    ``unfinished`` with the range narrowed so far when it runs out)."""

    def __init__(self, runner: Runner, index: IndexOptions, request: Request, points: Points | None = None,
                 meter: Meter | None = None):
        self.runner, self.index, self.req, self.meter = runner, index, request, meter
        self._versions: list[str] = []  # the candidates searched, once known (for an unfinished answer)
        self.points = points or ReleasePoints.of(request.case, request.package, request.pins)
        self.subject = ReleaseSubject(request, runner.store)
        self.probe = Probe(runner, request, self.subject)
        self._by_commit: dict[str, Point] = {}  # commit hash -> point, for the confirmation

    @property
    def steps(self) -> list[Step]:
        return self.probe.steps

    # ------------------------------------------------------------------ run

    def run(self, planned: Plan | None = None) -> Result:
        try:
            return self._run(planned)
        except BudgetSpent as spent:
            return self._unfinished(spent.reason)
        finally:
            self.runner.stop_ahead()

    def _run(self, planned: Plan | None) -> Result:
        req = self.req
        planned = planned or plan(req, self.index)
        repo, versions = planned.repo, list(planned.versions)
        self._versions, good_end = versions, ""
        if req.good == AUTO:
            start, good_end = self._walk_back(versions)
            if start is None:
                return self._finish(versions, Answer.GOOD_END_BAD if good_end.startswith("no ") else
                                    Answer.NOT_REPRODUCED, good_end)
            versions = self._versions = versions[start:]
        points = [self.points.release(v) for v in versions]
        self._save(BisectionStatus.RUNNING, {"candidates": versions})
        if req.metric is not None:  # a regression as a number: its own search (bisect.numeric)
            from dsbisect.bisect.numeric import bisect_numbers

            result = replace(bisect_numbers(self.runner, req, versions, points), good_end=good_end)
            if repo and result.verdict is Answer.FOUND:  # the commit step and the proof, as numbers
                from dsbisect.bisect.numcommits import commits_and_proof

                result = commits_and_proof(self, result, repo)
            self._save(BisectionStatus.DONE, result.to_json())
            return result
        if req.confidence is not None:  # flaky: the probabilistic search tests the ends itself
            found, conf, problem = self._flaky(versions, points, Stage.RELEASE)
        else:
            self._afford(points[0], points[-1])
            problem = self.probe.check_ends(versions, points, Stage.RELEASE)
            found = None if problem else search(len(points), lambda idx: self._round(points, idx, Stage.RELEASE),
                                                req.width)
        if problem:
            return self._finish(versions, *problem)
        result = replace(self._release_result(versions, found), good_end=good_end)
        if req.confidence is not None:
            result = _with_confidence(result, conf)
        result = replace(result, caveats=self._caveats(result))
        if repo and result.verdict is Answer.FOUND:
            result = self._commits(result, repo)
        if req.confirm > 1:
            result = self._confirm(result)
        if repo and req.prove and result.verdict is Answer.FOUND and result.commit and result.commit.first_bad:
            result = self._prove(result, repo)
        result = self._with_notes(result)
        self._save(BisectionStatus.DONE, result.to_json())
        return result

    def _walk_back(self, versions: list[str]) -> tuple[int | None, str]:
        """GOOD auto: test BAD, then releases 1, 2, 4, 8... back from it until one behaves like the
        old end (as cargo-bisect-rustc finds its start).  (index of that release, how it went)."""
        new, probe = len(versions) - 1, self.probe
        self._afford(self.points.release(versions[new]))
        bad = probe.side(probe.test(self.points.release(versions[new]), Stage.RELEASE,
                                    learn=versions[new] if self.req.mode.defining is Side.NEW else None).verdict)
        if bad is not Side.NEW:
            word = self.req.mode.new
            return None, f"{versions[new]} (the {word} end) does not behave as the {word} end: nothing to walk back from"
        step, i, tried = 1, new, [versions[new]]
        while i > 0:
            i = max(0, i - step)
            self._afford(self.points.release(versions[i]))
            side = probe.side(probe.test(self.points.release(versions[i]), Stage.RELEASE).verdict)
            tried.append(versions[i])
            if side is Side.OLD:
                return i, (f"good end found by walking back from {versions[new]}: "
                           f"{' → '.join(tried)} ({len(tried) - 1} step{'s' if len(tried) > 2 else ''})")
            if side is Side.NEW:
                step *= 2
        return None, f"no release back to {versions[0]} behaves as the old end (tried {', '.join(tried)})"

    def _caveats(self, result: Result) -> tuple[str, ...]:
        """Releases between the answer's ends that were not candidates (yanked, pre-release, or
        missing from an offline wheelhouse): the answer may be one of them."""
        if not (result.last_good and result.first_bad):
            return ()
        old, new = (result.last_good, result.first_bad)
        req = self.req
        return tuple(gaps(req.package, old, new, self.index, req.pre, req.include_yanked))

    def _confirm(self, result: Result) -> Result:
        """Run the final pair (the last good and first bad point of the deepest stage searched)
        until each has ``confirm`` runs: the answer stands only if every run agrees with it."""
        pair = self._final_pair(result)
        if pair is None:
            return result
        want, probe = self.req.confirm, self.probe
        found = self.runner.run_many(self.req.case, [p for _, p in pair], want=want)
        mode = self.req.mode
        ends = []
        for (label, point), runs, name, side in zip(pair, found, (mode.last_old, mode.first_new), (Side.OLD, Side.NEW)):
            probe.step(point, runs, Stage.CONFIRM)
            agree = sum(1 for r in runs if probe.side(probe.verdict(r)) is side)
            ends.append(Agreement(name, label, mode.verdict(side).value, agree, len(runs)))
        conf = Confirmation(want, tuple(ends))
        if conf.confirmed:
            return replace(result, steps=tuple(self.steps), confirm=conf)
        return replace(result, steps=tuple(self.steps), confirm=conf, verdict=Answer.UNCONFIRMED,
                       message=f"not confirmed: {conf.describe()} — the boundary is flaky here; "
                               f"bisect again with --repeat {want}")

    def _final_pair(self, result: Result) -> list[tuple[str, Point]] | None:
        c = result.commit
        if c is not None and c.first_bad:
            return [(h[:10], self._by_commit[h]) for h in (c.last_good, c.first_bad)]
        if c is None and result.verdict is Answer.FOUND and not result.commit_message:
            return [(v, self.points.release(v)) for v in (result.last_good, result.first_bad)]
        return None  # nothing exact to confirm (ambiguous, or the commit step stopped)

    def _finish(self, versions: list[str], verdict: Answer, message: str, last_good: str | None = None,
                maybe: tuple[str, ...] = ()) -> Result:
        result = self._with_notes(Result(self.req, tuple(versions), tuple(self.steps), verdict, last_good,
                                         maybe=maybe, message=message))
        self._save(BisectionStatus.DONE, result.to_json())
        return result

    def _release_result(self, versions: list[str], found: Search) -> Result:
        maybe = tuple(versions[i] for i in found.maybe)
        verdict_ = Answer.FOUND if found.exact else Answer.AMBIGUOUS
        msg = "" if found.exact else (
            f"untestable releases leave {len(maybe)} candidates for the first "
            f"{self.req.mode.new} release: {', '.join(maybe)}" + self.probe.why_ambiguous(maybe))
        return Result(self.req, tuple(versions), tuple(self.steps), verdict_, versions[found.last_old],
                      versions[found.first_new], maybe, msg)

    def _with_notes(self, result: Result) -> Result:
        return replace(result, regression=self.probe.regression, different=tuple(self.probe.different.values()))

    def _save(self, status: BisectionStatus, result: dict) -> None:
        self.subject.save(status, result, self.probe.rule)

    # ----------------------------------------------------------------- budget

    def _afford(self, *points: Point, want: int | None = None) -> None:
        """Raise BudgetSpent unless testing ``points`` fits what is left of the budget (none: always)."""
        if self.meter is None:
            return
        self.meter.count(r for s in self.steps for r in s.runs)
        self.meter.check(new_runs(self.runner, self.req.case, points, self.req.repeat if want is None else want))

    def _round(self, points: list[Point], indices, stage: Stage) -> list[Side]:
        self._afford(*(points[i] for i in indices))
        return self.probe.test_many(points, indices, stage)

    def _unfinished(self, reason: str) -> Result:
        """The release search stopped by the budget: the releases the first bad one may still be."""
        versions = self._versions
        lo, maybe = narrowed(sides_of(self.steps, Stage.RELEASE, {v: i for i, v in enumerate(versions)},
                                      self.probe.side), len(versions))
        labels = tuple(versions[i] for i in maybe)
        message = unfinished_message(reason, self.req.mode.new, "release", labels, self.meter.made)
        return self._finish(versions, Answer.UNFINISHED, message, last_good=versions[lo], maybe=labels)

    def _commits_unfinished(self, result: Result, chain: list[gitrepo.Commit], count: int, reason: str) -> Result:
        """The commit step stopped by the budget: the release answer stands, the commits left are named."""
        lo, maybe = narrowed(sides_of(self.steps, Stage.COMMIT, {c.hash: i for i, c in enumerate(chain)},
                                      self.probe.side), len(chain))
        cr = CommitResult(chain[lo].hash, None, "", tuple(chain[i].hash for i in maybe), count, Answer.UNFINISHED)
        message = unfinished_message(reason, self.req.mode.new, "commit", [chain[i].short for i in maybe],
                                     self.meter.made)
        return replace(result, verdict=Answer.UNFINISHED, commit=cr, steps=tuple(self.steps), message=message)

    # ---------------------------------------------------------------- commits

    def commit_chain(self, result: Result, repo: Path) -> tuple[list[gitrepo.Commit], list[Point], str]:
        """The commits between the release answer's two tags (the start first: the old tag, or
        their merge base on a release branch), their points, and the note on a merge base."""
        req = self.req
        old_tag = gitrepo.tag_for(repo, req.package, result.last_good)
        new_tag = gitrepo.tag_for(repo, req.package, result.first_bad)
        start, note = old_tag, ""
        if not gitrepo.is_ancestor(repo, old_tag, new_tag):
            # A release cut from a branch (as DeepSpeed's are): like git bisect, start from
            # the merge base, whose behaviour must then be tested rather than assumed.
            start = gitrepo.merge_base(repo, old_tag, new_tag)
            note = (f"{old_tag} is not an ancestor of {new_tag} (a release branch): the commits searched are "
                    f"the first-parent ones from their merge base {start[:10]}")
        chain = [gitrepo.commit(repo, start), *gitrepo.commits_between(repo, start, new_tag)]
        points = [self.points.commit(_source(req.package, repo, c), result.first_bad) for c in chain]
        return chain, points, note

    def _commits(self, result: Result, repo: Path) -> Result:
        chain, points, note = self.commit_chain(result, repo)
        commits = chain[1:]
        self._by_commit.update({c.hash: p for c, p in zip(chain, points)})
        try:
            found, conf, problem = self._commit_search(chain, points, note)
        except BudgetSpent as spent:
            return self._commits_unfinished(result, chain, len(commits), spent.reason)
        if problem:
            msg = "; ".join(x for x in (note, f"commit step: {problem[1]}") if x)
            return replace(result, steps=tuple(self.steps), commit_message=msg)
        first = chain[found.first_new]
        cr = CommitResult(
            last_good=chain[found.last_old].hash,
            first_bad=first.hash if found.exact else None,
            subject=first.subject if found.exact else "",
            maybe=tuple(chain[i].hash for i in found.maybe),
            count=len(commits),
            verdict=Answer.FOUND if found.exact else Answer.AMBIGUOUS,
        )
        result = replace(result, commit=cr, steps=tuple(self.steps), commit_message=note)
        return result if conf is None else _with_confidence(result, conf)

    def _commit_search(self, chain: list[gitrepo.Commit], points: list[Point], note: str):
        """The commit step's search: (Search, Confidence or None, None), or (None, None, (verdict,
        message)) when its ends do not behave as declared."""
        req, conf, problem = self.req, None, None
        if req.confidence is not None:  # flaky: both ends are run, for the failure rate
            return self._flaky([c.short for c in chain], points, Stage.COMMIT)
        if req.verify_commit_ends or note:  # the tags' source builds, or the merge base, must be tested
            self._afford(*((points[0], points[-1]) if req.verify_commit_ends else (points[0],)))
            problem = self._check_commit_ends(chain, points, both=req.verify_commit_ends)
        if problem:
            return None, None, problem
        return search(len(points), lambda idx: self._round(points, idx, Stage.COMMIT), req.width), conf, None

    def _check_commit_ends(self, chain: list[gitrepo.Commit], points: list[Point],
                           both: bool) -> tuple[Answer, str] | None:
        if both:
            return self.probe.check_ends([c.short for c in chain], points, Stage.COMMIT)
        step = self.probe.test(points[0], Stage.COMMIT)
        side = self.probe.side(step.verdict)
        if side is Side.OLD:
            return None
        if side is Side.SKIP:
            return Answer.UNTESTABLE, f"the merge base {chain[0].short} could not be tested: {step.detail}"
        return Answer.GOOD_END_BAD, (f"the merge base {chain[0].short} already behaves like the "
                                f"{self.req.mode.new} end: the change is on the release branch")

    # ------------------------------------------------------------- --confidence

    def _flaky(self, labels: list[str], points: list[Point], stage: Stage):
        """The probabilistic search (bayes.search) over ``points``, one run per probe (a recorded
        run of the same inputs first, as everywhere): (Search, Confidence, None), or (None, None,
        (verdict, message)) when an end does not behave as declared."""
        mode, used, probe = self.req.mode, {}, self.probe
        defining = len(points) - 1 if mode.defining is Side.NEW else 0

        def one(i: int) -> Side:
            self._afford(points[i], want=used.get(i, 0) + 1)
            runs = self.runner.runs(self.req.case, points[i], want=used.get(i, 0) + 1)
            new, used[i] = runs[used.get(i, 0):], len(runs)
            if i == defining and any(r.outcome in (Outcome.HANG, Outcome.FAIL) for r in runs):
                probe.learn(labels[i], runs)  # the first failing run of the defining end says what it is
            return probe.side(probe.step(points[i], new, stage).verdict) if new else Side.SKIP

        est = bayes.search(len(points), one, self.req.confidence, flaky=mode.defining)
        end = points[defining].key  # when the defining end never failed: what it showed (no identity)
        probe.learn(labels[defining], [r for s in self.steps for r in s.runs if r.point_key == end])
        conf = Confidence.of(est, labels, self.req.confidence, stage, mode)
        self.runner.progress("note", conf.describe())
        ends = [probe.last_step(points[i]) for i in (defining, -1 - defining)]
        problem = ends_problem(est.status, mode, (labels[defining], labels[-1 - defining]),
                               tuple((s.detail, s.outcome) if s else ("", Outcome.SKIP) for s in ends),
                               dict(probe.different), used.get(defining, 0))
        return (None, None, problem) if problem else (Search(est.last_old, est.first_new, est.maybe, est.probed), conf, None)

    # ------------------------------------------------------------------ proof

    def _prove(self, result: Result, repo: Path) -> Result:
        """Revert the first bad commit on top of the first bad release's tag and run that tree
        (``revert.prove``)."""
        req = self.req
        tag = gitrepo.tag_for(repo, req.package, result.first_bad)
        want = max(2, req.repeat, req.confirm, proof_runs(result.confidence))
        at = Onto(repo, tag, gitrepo.resolve(repo, tag), result.first_bad, want)
        proof = prove(result, at, self.probe, self.points, self._afford)
        return replace(result, steps=tuple(self.steps), proof=proof)


def _source(package: str, repo: Path, c: gitrepo.Commit) -> GitSource:
    """Commit ``c`` of ``package``'s clone ``repo``, as a point's source."""
    return GitSource(package, str(repo), c.hash, c.describe, c.subject)


def _with_confidence(result: Result, conf: Confidence) -> Result:
    """The figure on the result; the run cap reached before P: the most likely answer, unconfirmed."""
    result = replace(result, confidence=result.confidence + (conf,))
    if conf.sure:
        return result
    return replace(result, verdict=Answer.UNCONFIRMED, message=conf.describe())
