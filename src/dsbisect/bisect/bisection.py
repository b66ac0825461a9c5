"""A whole bisection: candidates, ends check, release search, then commit search.

The search itself is ``search.search`` (pure); this module turns versions and commits into
points, runs them through the ``Runner`` (so every run lands in the store and a second
invocation reuses it), and maps outcomes to the old/new sides of the search.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from dsbisect.search import bayes
from dsbisect.core import eta
from dsbisect.envs import gitrepo
from dsbisect.search.confidence import Confidence, ends_problem, proof_runs
from dsbisect.verdict.identity import Rule, resolve
from dsbisect.core.model import Answer, GitSource, IndexOptions, Outcome, Point, RegressOn, Stage, Verdict
from dsbisect.verdict.outcome import combine
from dsbisect.core.redact import redact_tree
from dsbisect.records.proof import Proof, ProofVerdict, judge
from dsbisect.records.results import Agreement, CommitResult, Confirmation, Regression, Request, Result, Step
from dsbisect.run.runner import Runner
from dsbisect.search.steps import Search, Side, lookahead, search
from dsbisect.records.run import RunRecord
from dsbisect.envs.versions import AUTO, candidates, gaps


SHOWN = {Outcome.PASS: "passed", Outcome.FAIL: "failed", Outcome.HANG: "hung", Outcome.SKIP: "was skipped"}


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


def steps_for(left: int, width: int) -> int:
    """Rounds of ``width`` points that a search among ``left`` untested candidates takes (each
    round splits what is left into ``width + 1`` parts); at least one."""
    if left <= 0:
        return 1
    return max(1, math.ceil(math.log(left + 1) / math.log(max(1, width) + 1) - 1e-9))


def range_note(labels: list[str], stage: Stage, find_fix: bool, width: int) -> str:
    """What a search covers, said before its first run: "7 releases from 0.18.1 to 0.18.7 (5
    between them: about 3 steps after the ends); both ends first: 0.18.1 (good) and 0.18.7 (bad)"."""
    what = "commits" if stage is Stage.COMMIT else "releases"
    between = max(0, len(labels) - 2)
    steps = steps_for(between, width)
    names = ("broken", "fixed") if find_fix else ("good", "bad")
    after = f"about {steps} step{'s' if steps > 1 else ''} after the ends" if between else "no release between them"
    if stage is Stage.COMMIT and not between:
        after = "no commit between them"
    return (f"{len(labels)} {what} from {labels[0]} to {labels[-1]} ({between} between them: {after}); both ends "
            f"first: {labels[0]} ({names[0]}) and {labels[-1]} ({names[1]})")


class Bisection:
    def __init__(self, runner: Runner, index: IndexOptions, request: Request):
        self.runner, self.index, self.req = runner, index, request
        self.steps: list[Step] = []
        self._points: dict[str, Point] = {}  # commit hash -> point, for the confirmation
        self._known: dict[int, dict[int, Side]] = {}  # per list of points searched: index -> side
        # What counts as bad: AUTO counts any failure until the defining end has run (_learn).
        self.rule = Rule(request.regress_on, request.signature)
        self.regression: Regression | None = None
        self._different: dict[str, str] = {}  # label -> why it was not counted
        self._rounds: list[float] = []  # wall seconds of each round that ran something (eta.time_left)
        self._launched: list[float] = []  # of each such round, its longest run's own seconds (launch to verdict)
        self._after_ends = 0  # rounds before this one were the ends' (venvs built, bytecode cached: once)
        self._t0 = time.time()

    # ------------------------------------------------------------------ run

    def run(self, planned: Plan | None = None) -> Result:
        try:
            return self._run(planned)
        finally:
            self.runner.stop_ahead()

    def _run(self, planned: Plan | None) -> Result:
        req = self.req
        planned = planned or plan(req, self.index)
        repo, versions = planned.repo, list(planned.versions)
        good_end = ""
        if req.good == AUTO:
            start, good_end = self._walk_back(versions)
            if start is None:
                return self._finish(versions, Answer.GOOD_END_BAD if good_end.startswith("no ") else
                                    Answer.NOT_REPRODUCED, good_end)
            versions = versions[start:]
        points = [self._release_point(v) for v in versions]
        self._save("running", {"candidates": versions})
        if req.confidence is not None:  # flaky: the probabilistic search tests the ends itself
            found, conf, problem = self._flaky(versions, points, Stage.RELEASE)
        else:
            problem = self._check_ends(versions, points, Stage.RELEASE)
            found = None if problem else search(len(points), lambda idx: self._test_many(points, idx, Stage.RELEASE),
                                                req.width)
        if problem:
            return self._finish(versions, *problem)
        result = _replace(self._release_result(versions, found), good_end=good_end)
        if req.confidence is not None:
            result = _with_confidence(result, conf)
        result = _replace(result, caveats=self._caveats(result))
        if repo and result.verdict is Answer.FOUND:
            result = self._commits(result, repo)
        if req.confirm > 1:
            result = self._confirm(result)
        if repo and req.prove and result.verdict is Answer.FOUND and result.commit and result.commit.first_bad:
            result = self._prove(result, repo)
        result = self._with_notes(result)
        self._save("done", result.to_json())
        return result

    def _walk_back(self, versions: list[str]) -> tuple[int | None, str]:
        """GOOD auto: test BAD, then releases 1, 2, 4, 8... back from it until one behaves like the
        old end (as cargo-bisect-rustc finds its start).  (index of that release, how it went)."""
        new = len(versions) - 1
        bad = self._side(self._test(self._release_point(versions[new]), Stage.RELEASE,
                                    learn=None if self.req.find_fix else versions[new]).verdict)
        if bad is not Side.NEW:
            word = "fixed" if self.req.find_fix else "bad"
            return None, f"{versions[new]} (the {word} end) does not behave as the {word} end: nothing to walk back from"
        step, i, tried = 1, new, [versions[new]]
        while i > 0:
            i = max(0, i - step)
            side = self._side(self._test(self._release_point(versions[i]), Stage.RELEASE).verdict)
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
        want = self.req.confirm
        found = self.runner.run_many(self.req.case, [p for _, p in pair], want=want)
        names = ("last broken", "first fixed") if self.req.find_fix else ("last good", "first bad")
        ends = []
        for (label, point), runs, name, side in zip(pair, found, names, (Side.OLD, Side.NEW)):
            self._step(point, runs, Stage.CONFIRM)
            agree = sum(1 for r in runs if self._side(self._verdict(r)) is side)
            as_bad = (side is Side.NEW) != self.req.find_fix
            ends.append(Agreement(name, label, "bad" if as_bad else "good", agree, len(runs)))
        conf = Confirmation(want, tuple(ends))
        if conf.confirmed:
            return _replace(result, steps=tuple(self.steps), confirm=conf)
        return _replace(result, steps=tuple(self.steps), confirm=conf, verdict=Answer.UNCONFIRMED,
                        message=f"not confirmed: {conf.describe()} — the boundary is flaky here; "
                                f"bisect again with --repeat {want}")

    def _final_pair(self, result: Result) -> list[tuple[str, Point]] | None:
        c = result.commit
        if c is not None and c.first_bad:
            return [(h[:10], self._points[h]) for h in (c.last_good, c.first_bad)]
        if c is None and result.verdict is Answer.FOUND and not result.commit_message:
            return [(v, self._release_point(v)) for v in (result.last_good, result.first_bad)]
        return None  # nothing exact to confirm (ambiguous, or the commit step stopped)

    def _finish(self, versions: list[str], verdict: Answer, message: str) -> Result:
        result = self._with_notes(Result(self.req, tuple(versions), tuple(self.steps), verdict, message=message))
        self._save("done", result.to_json())
        return result

    def _release_result(self, versions: list[str], found: Search) -> Result:
        maybe = tuple(versions[i] for i in found.maybe)
        verdict_ = Answer.FOUND if found.exact else Answer.AMBIGUOUS
        msg = "" if found.exact else (
            f"untestable releases leave {len(maybe)} candidates for the first "
            f"{'fixed' if self.req.find_fix else 'bad'} release: {', '.join(maybe)}" + self._why_ambiguous(maybe))
        return Result(self.req, tuple(versions), tuple(self.steps), verdict_, versions[found.last_old],
                      versions[found.first_new], maybe, msg)

    # ---------------------------------------------------------------- points

    def _release_point(self, version: str) -> Point:
        return Point(versions=((self.req.package, version),), pins=self._pins())

    def _pins(self) -> tuple[str, ...]:
        moved = canonicalize_name(self.req.package)
        from packaging.requirements import Requirement

        pins = [p for p in self.req.case.pins + self.req.pins if canonicalize_name(Requirement(p).name) != moved]
        return tuple(dict.fromkeys(pins))

    # ----------------------------------------------------------------- probes

    def _side(self, v: Verdict) -> Side:
        if v is Verdict.SKIP:
            return Side.SKIP
        new_is_bad = not self.req.find_fix
        return Side.NEW if (v is Verdict.BAD) == new_is_bad else Side.OLD

    def _enough(self, runs: list[RunRecord]) -> bool:
        return any(self._verdict(r) is Verdict.BAD for r in runs)

    def _test(self, point: Point, stage: Stage, learn: str | None = None) -> Step:
        runs = self.runner.runs(self.req.case, point, want=self.req.repeat, enough=self._enough)
        if learn is not None:
            self._learn(learn, runs)
        return self._step(point, runs, stage)

    # -------------------------------------------------------------- the regression

    def _learn(self, label: str, runs: list[RunRecord]) -> None:
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
        self.regression = Regression(rule_on, learned, label, "broken end" if req.find_fix else "bad end",
                                     req.regress_on)
        if learned is not None:
            self.runner.progress("note", self.regression.describe())

    def _note_different(self, label: str, runs: list[RunRecord]) -> None:
        for r in runs:
            seen = r.identity()
            if self._verdict(r) is Verdict.SKIP and self.rule.differs(r.outcome, seen) and label not in self._different:
                self._different[label] = (f"{label} failed differently ({seen.shown}"
                                          + (f" at {' ← '.join(seen.frames[:2])}" if seen.frames else "")
                                          + "): not counted; --any-failure counts it")

    def _why_ambiguous(self, maybe: tuple[str, ...]) -> str:
        why = [self._different[m] for m in maybe if m in self._different]
        return f" ({'; '.join(why)})" if why else ""

    def _with_notes(self, result: Result) -> Result:
        return _replace(result, regression=self.regression, different=tuple(self._different.values()))

    def _step(self, point: Point, runs: list[RunRecord], stage: Stage) -> Step:
        req = self.req
        v = combine([self._verdict(r) for r in runs])
        src = point.source
        step = Step(stage, self._label(point), point.version_of(req.package) or "", src.commit if src else None,
                    src.subject if src else "", v, tuple(runs))
        if v is Verdict.SKIP:  # a point that a run of the regression made bad is bad, whatever its other runs
            self._note_different(step.label, runs)
        self.steps.append(step)
        self._save("running", {"steps": [s.to_json() for s in self.steps]})
        return step

    def _verdict(self, r: RunRecord) -> Verdict:
        return r.verdict(self.rule)  # the one rule (records.RunRecord.verdict), dsbisect log's too

    def _test_many(self, points: list[Point], indices, stage: Stage) -> list[Side]:
        """Test the points at ``indices`` (at once, one per free slot, when there are several)."""
        chosen = [points[i] for i in indices]
        self._announce(points, indices, stage)
        known = self._known.setdefault(id(points), {0: Side.OLD, len(points) - 1: Side.NEW})
        lo = max((i for i, s in known.items() if s is Side.OLD), default=0)
        hi = min((i for i, s in known.items() if s is Side.NEW and i > lo), default=len(points) - 1)
        ahead = lookahead(lo, hi, known, indices, self.req.width)
        self.runner.prepare_ahead(self.req.case, [points[i] for i in ahead])  # both possible next points
        found = self._timed(chosen)
        sides = [self._side(self._step(p, runs, stage).verdict) for p, runs in zip(chosen, found)]
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
                                     f"{', '.join(self._label(points[i]) for i in indices)}")

    def _timed(self, chosen: list[Point]) -> list[list[RunRecord]]:
        """``run_many`` of ``chosen``, its wall time kept as rounds for the estimate (a round that
        only reused recorded runs took no time a new one would take: left out)."""
        t0 = time.monotonic()
        found = self.runner.run_many(self.req.case, chosen, want=self.req.repeat, enough=self._enough)
        new = [r for runs in found for r in runs if r.started >= self._t0 and r.manual is None]
        if new:
            n = eta.rounds_of(len(chosen), self.req.width)
            self._rounds += [(time.monotonic() - t0) / n] * n
            self._launched += [max(r.seconds or 0.0 for r in new)] * n
        return found

    def _label(self, p: Point) -> str:
        return p.source.short if p.source else (p.version_of(self.req.package) or p.label)

    def _check_ends(self, labels: list[str], points: list[Point], stage: Stage) -> tuple[Answer, str] | None:
        """Both ends must behave as declared; otherwise (verdict, message)."""
        self.runner.progress("note", self._range_note(labels, stage))
        ends = self._timed([points[0], points[-1]])
        self._after_ends = len(self._rounds)
        fix = self.req.find_fix
        self._learn(labels[0] if fix else labels[-1], ends[0] if fix else ends[1])
        old, new = (self._step(p, runs, stage) for p, runs in zip((points[0], points[-1]), ends))
        names = ("broken", "fixed") if fix else ("good", "bad")
        ends = ((old, Side.OLD, names[0], labels[0]), (new, Side.NEW, names[1], labels[-1]))
        for step, _, name, label in ends:  # an end that could not be tested first: no other word is sure
            if self._side(step.verdict) is Side.SKIP:
                return Answer.UNTESTABLE, (f"the {name} end: {self._different[label]}" if label in self._different
                                           else f"{label} (the {name} end) could not be tested: {step.detail}")
        if (self._side(old.verdict), self._side(new.verdict)) == (Side.NEW, Side.OLD):
            return self._swapped_message(old, new, (labels[0], labels[-1]), fix)
        for step, want, name, label in ends:
            if self._side(step.verdict) is not want:
                return self._ends_message(step, name, label, fix)
        return None

    def _range_note(self, labels: list[str], stage: Stage) -> str:
        return range_note(labels, stage, self.req.find_fix, self.req.width)

    def _swapped_message(self, old: Step, new: Step, labels: tuple[str, str], fix: bool) -> tuple[Answer, str]:
        """Each end behaved as the other was declared to: the ends look swapped (the hint names
        the mode that fits what they did)."""
        names = ("broken", "fixed") if fix else ("good", "bad")
        hint = "to find the release that broke it, leave out --find-fix" if fix else \
            "to find the release that fixed it, add --find-fix"
        return Answer.GOOD_END_BAD, (f"{labels[0]} (the {names[0]} end) {SHOWN[old.outcome]} and {labels[1]} (the "
                                     f"{names[1]} end) {SHOWN[new.outcome]}: the ends look swapped; {hint}")

    def _ends_message(self, step: Step, name: str, label: str, fix: bool) -> tuple[Answer, str]:
        shown = SHOWN[step.outcome]
        if name == "bad":
            return Answer.NOT_REPRODUCED, f"{label} (the bad end) {shown}: the regression does not reproduce here"
        if name == "fixed":
            return Answer.NOT_REPRODUCED, f"{label} (the fixed end) {shown}: the fix is not visible here"
        if name == "broken":
            return Answer.GOOD_END_BAD, f"{label} (the broken end) {shown}: the bug does not reproduce there; check the range"
        return Answer.GOOD_END_BAD, f"{label} (the good end) also {shown}; widen the range"

    # ---------------------------------------------------------------- commits

    def _commits(self, result: Result, repo: Path) -> Result:
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
        commits = gitrepo.commits_between(repo, start, new_tag)
        chain = [gitrepo.commit(repo, start), *commits]
        points = [self._commit_point(repo, c, result.first_bad) for c in chain]
        self._points.update({c.hash: p for c, p in zip(chain, points)})
        conf, problem = None, None
        if req.confidence is not None:  # flaky: both ends are run, for the failure rate
            found, conf, problem = self._flaky([c.short for c in chain], points, Stage.COMMIT)
        elif req.verify_commit_ends or note:  # the tags' source builds, or the merge base, must be tested
            problem = self._check_commit_ends(chain, points, both=req.verify_commit_ends)
        if problem:
            msg = "; ".join(x for x in (note, f"commit step: {problem[1]}") if x)
            return _replace(result, steps=tuple(self.steps), commit_message=msg)
        if conf is None:
            found = search(len(points), lambda idx: self._test_many(points, idx, Stage.COMMIT), req.width)
        first = chain[found.first_new]
        cr = CommitResult(
            last_good=chain[found.last_old].hash,
            first_bad=first.hash if found.exact else None,
            subject=first.subject if found.exact else "",
            maybe=tuple(chain[i].hash for i in found.maybe),
            count=len(commits),
            verdict=Answer.FOUND if found.exact else Answer.AMBIGUOUS,
        )
        result = _replace(result, commit=cr, steps=tuple(self.steps), commit_message=note)
        return result if conf is None else _with_confidence(result, conf)

    def _check_commit_ends(self, chain: list[gitrepo.Commit], points: list[Point],
                           both: bool) -> tuple[Answer, str] | None:
        if both:
            return self._check_ends([c.short for c in chain], points, Stage.COMMIT)
        step = self._test(points[0], Stage.COMMIT)
        side = self._side(step.verdict)
        if side is Side.OLD:
            return None
        if side is Side.SKIP:
            return Answer.UNTESTABLE, f"the merge base {chain[0].short} could not be tested: {step.detail}"
        return Answer.GOOD_END_BAD, (f"the merge base {chain[0].short} already behaves like the "
                                f"{'fixed' if self.req.find_fix else 'bad'} end: the change is on the release branch")

    # ------------------------------------------------------------- --confidence

    def _flaky(self, labels: list[str], points: list[Point], stage: Stage):
        """The probabilistic search (bayes.search) over ``points``, one run per probe (a recorded
        run of the same inputs first, as everywhere): (Search, Confidence, None), or (None, None,
        (verdict, message)) when an end does not behave as declared."""
        fix, used = self.req.find_fix, {}
        defining = 0 if fix else len(points) - 1

        def probe(i: int) -> Side:
            runs = self.runner.runs(self.req.case, points[i], want=used.get(i, 0) + 1)
            new, used[i] = runs[used.get(i, 0):], len(runs)
            if i == defining and any(r.outcome in (Outcome.HANG, Outcome.FAIL) for r in runs):
                self._learn(labels[i], runs)  # the first failing run of the defining end says what it is
            return self._side(self._step(points[i], new, stage).verdict) if new else Side.SKIP

        est = bayes.search(len(points), probe, self.req.confidence, flaky=Side.OLD if fix else Side.NEW)
        end = points[defining].key  # when the defining end never failed: what it showed (no identity)
        self._learn(labels[defining], [r for s in self.steps for r in s.runs if r.point_key == end])
        conf = Confidence.of(est, labels, self.req.confidence, stage, fix)
        self.runner.progress("note", conf.describe())
        ends = [self._last_step(points[i]) for i in (defining, -1 - defining)]
        problem = ends_problem(est.status, fix, (labels[defining], labels[-1 - defining]),
                               tuple((s.detail, s.outcome) if s else ("", Outcome.SKIP) for s in ends),
                               self._different, used.get(defining, 0))
        return (None, None, problem) if problem else (Search(est.last_old, est.first_new, est.maybe, est.probed), conf, None)

    def _last_step(self, point: Point) -> Step | None:
        return next((s for s in reversed(self.steps) if s.runs and s.runs[0].point_key == point.key), None)

    def _commit_point(self, repo: Path, c: gitrepo.Commit, version: str) -> Point:
        src = GitSource(self.req.package, str(repo), c.hash, c.describe, c.subject)
        return Point(versions=((self.req.package, version),), pins=self._pins(), source=src)

    # ------------------------------------------------------------------ proof

    def _prove(self, result: Result, repo: Path) -> Result:
        """Revert the first bad commit on top of the first bad release's tag and run that tree:
        the answer stands whatever it shows (the search's boundary was tested); the proof says
        whether the commit is what the release's regression comes from."""
        req, c = self.req, result.commit
        tag = gitrepo.tag_for(repo, req.package, result.first_bad)
        onto = gitrepo.resolve(repo, tag)
        self.runner.progress("note", f"proof: reverting {c.first_bad[:10]} on top of {tag}")
        rev = gitrepo.revert_tree(repo, c.first_bad, onto)
        base = Proof(c.first_bad, tag, onto, ProofVerdict.UNTESTABLE, req.find_fix, rev.merge)
        if not rev.clean:
            verdict_ = ProofVerdict.CONFLICT if rev.conflicts else ProofVerdict.UNTESTABLE
            return _replace(result, proof=_replace(base, verdict=verdict_, conflicts=rev.conflicts, detail=rev.error))
        src = GitSource(req.package, str(repo), onto, f"{tag} with {c.first_bad[:10]} reverted",
                        f'Revert "{c.subject}"', reverted=c.first_bad, tree=rev.tree)
        point = Point(versions=((req.package, result.first_bad),), pins=self._pins(), source=src)
        runs = self.runner.runs(req.case, point, want=max(2, req.repeat, req.confirm, proof_runs(result.confidence)),
                                enough=lambda rs: any(self._side(self._verdict(r)) is Side.NEW for r in rs))
        step = self._step(point, runs, Stage.PROVE)
        observed = [(self._side(self._verdict(r)), r.outcome) for r in runs]
        verdict_, outcome, agree = judge(observed)
        detail = step.detail if verdict_ is not ProofVerdict.PROVEN else ""
        proof = _replace(base, verdict=verdict_, outcome=outcome, runs=len(runs), agree=agree, detail=detail,
                         run_ids=tuple(r.id for r in runs))
        return _replace(result, steps=tuple(self.steps), proof=proof)

    # ------------------------------------------------------------------ store

    def _save(self, status: str, result: dict) -> None:
        req = self.req
        rule = self.rule.regress_on if self.regression is not None else req.regress_on  # AUTO, once known
        params = {"case": req.case.name, "pins": list(req.pins), "regress_on": rule.value,
                  "find_fix": req.find_fix, "repeat": req.repeat, "signature": req.signature}
        if req.confidence is not None:
            params["confidence"] = req.confidence
        if self.rule.learned is not None:  # for `dsbisect log`: what the search counted as bad
            params["regression"] = self.rule.learned.as_json()
        if req.argv:  # for `dsbisect log`: the command, and where it ran (its relative paths are from there)
            params |= {"argv": list(req.argv), "cwd": str(Path.cwd())}
        # argv, a reason or a subject may hold credentials (an index URL's, a --hub_token): stored
        # masked (the group reads the store); a rerun takes them from its own command line
        self.runner.store.save_bisection(req.key, req.package, req.good, req.bad, redact_tree(params), status,
                                         redact_tree(result))


def _with_confidence(result: Result, conf: Confidence) -> Result:
    """The figure on the result; the run cap reached before P: the most likely answer, unconfirmed."""
    result = _replace(result, confidence=result.confidence + (conf,))
    if conf.sure:
        return result
    return _replace(result, verdict=Answer.UNCONFIRMED, message=conf.describe())


def _replace(result: Result, **changes) -> Result:
    from dataclasses import replace

    return replace(result, **changes)
