"""An environment bisection: two environments -> the change(s) -> the release -> the commit.

Level 1 (``envsearch.find_culprits``, pure) finds a 1-minimal set of the changes between the
good and the bad environment that makes the case behave as the bad one; each trial is the good
environment with a subset of the changes applied, every pin exact (``envfile.apply``), tested
by a ``probe.Probe`` as a release bisection's points are (so it lands in the store and a resumed
invocation reuses it), the ``TrialSubject`` naming the trials.  Level 2 is the release
``Bisection`` of each culprit between its two versions, its points ``CulpritPoints``: the other
packages held where the culprit reproduces (an interaction's partner at its bad version, the
rest at good); level 3 its commit step, with ``--git-repo``.

A subset uv cannot satisfy (``a 2.0`` requires ``c >= 2.0`` and only ``a`` is applied) is
untestable: its run is recorded as a skip with uv's reason and the search works around it, as
``git bisect skip`` does.  So that most trials resolve, the changes that dependency metadata ties
together (each change with the ones uv names when it is applied alone: a dry run per change) are
tried together first (``units``), and a culprit whose removal from the answer was untestable only
because another culprit requires it is named as that one's requirement, not as a cause.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from dsbisect.envs import gitrepo
from dsbisect.bisect.bisection import Bisection, Plan, plan
from dsbisect.bisect.points import ReleasePoints
from dsbisect.bisect.probe import Probe
from dsbisect.envdiff.environments import Change, Kind
from dsbisect.envdiff.plan import (
    ENV_PACKAGE,
    EnvPlan,
    EnvRequest,
    Resolver,
    named_in,
    plan_envs,
    requirements,
)
from dsbisect.envdiff.remedy import Remedy, remedy
from dsbisect.envdiff.settings import change_json, ends_word, is_package
from dsbisect.envdiff.trialcase import TrialCases
from dsbisect.envs.venvs import EnvManager
from dsbisect.search.changes import EnvSearch
from dsbisect.search.causes import find_causes
from dsbisect.envdiff.causes import MAX_CAUSES, others
from dsbisect.envdiff.result import EnvResult, every_cause, with_causes
from dsbisect.core.errors import DsbisectError, InputError
from dsbisect.core.model import Answer, BaseMode, GitSource, IndexOptions, Point, Stage
from dsbisect.core.outside import clip
from dsbisect.run.runner import Runner
from dsbisect.records.bisections import BisectionStatus
from dsbisect.records.results import Confounder, Request, Result, Step, TrialRun
from dsbisect.search.steps import Side
from dsbisect.verdict.identity import Rule

__all__ = ["EnvBisection", "EnvPlan", "EnvRequest", "EnvResult", "plan_envs"]


# ---------------------------------------------------------------------- the engine


@dataclass
class TrialSubject:
    """The level-1 trials as a ``probe.Subject``: each trial called by the changes it applies,
    an end that does not behave worded as the environment given, progress saved under the
    environment bisection's key."""

    env: EnvBisection
    labels: dict[str, str] = field(default_factory=dict)  # point key -> the trial's name

    def label(self, point: Point) -> str:
        return self.labels.get(point.key, point.label)

    def ends_message(self, step: Step, end: Side, label: str) -> tuple[Answer, str]:
        req = self.env.req
        name = req.mode.end(end)
        given = req.good_env.source if end is Side.OLD else req.bad_env.source
        shown = {"pass": "passed", "fail": "failed", "hang": "hung", "skip": "was skipped"}[step.outcome.value]
        if end is Side.NEW:
            return Answer.NOT_REPRODUCED, (f"{given} (the {name} environment, as given) {shown}: "
                                           f"the {req.mode.change} does not reproduce here")
        return Answer.GOOD_END_BAD, (f"{given} (the {name} environment, as given) {shown} too: "
                                     "nothing between the two environments to bisect")

    def swapped_message(self, old: Step, new: Step, labels: tuple[str, str]) -> tuple[Answer, str]:
        """Each environment did what the other was declared to: the hint gives them the right way
        round, or names the other mode."""
        req = self.env.req
        good, bad, other = req.good_env.source, req.bad_env.source, req.mode.flipped
        shown = {"pass": "passed", "fail": "failed", "hang": "hung", "skip": "was skipped"}
        return Answer.GOOD_END_BAD, (f"{good} (the {req.mode.old} environment, as given) {shown[old.outcome.value]} "
                                     f"and {bad} (the {req.mode.new} environment) {shown[new.outcome.value]}: the two "
                                     f"look swapped; give --good-env {bad} --bad-env {good}, or {other.asked_by} to "
                                     f"find what {other.verb} it")

    def range_note(self, labels: list[str], stage: Stage, width: int) -> str:
        """Level 1's start: the two environments as given, then trials of the changes (no releases)."""
        req, n = self.env.req, len(self.env.changes)
        return (f"level 1: both environments first, as given: {req.good_env.source} ({req.mode.old}) and "
                f"{req.bad_env.source} ({req.mode.new}); then the {req.mode.old} one with some of the {n} "
                f"change{'s' if n != 1 else ''} applied")

    def stepped(self, steps: tuple[Step, ...], rule: Rule) -> None:
        self.env.save(BisectionStatus.RUNNING, {"steps": [s.to_json() for s in steps]})


@dataclass(frozen=True)
class CulpritPoints:
    """A culprit's release points: the release engine's (``ReleasePoints``, the environment
    held), with the pins of a release that cannot be installed with the others held moved as
    uv's error names (``per_version``, recorded as confounders)."""

    releases: ReleasePoints
    per_version: Mapping[str, tuple[str, ...]]

    def release(self, version: str) -> Point:
        return self._pinned(self.releases.release(version), version)

    def commit(self, source: GitSource, version: str) -> Point:
        return self._pinned(self.releases.commit(source, version), version)

    def _pinned(self, point: Point, version: str) -> Point:
        return dataclasses.replace(point, pins=self.per_version.get(version, point.pins))


class EnvBisection:
    def __init__(self, runner: Runner, index: IndexOptions, request: EnvRequest, planned: EnvPlan):
        self.runner, self.index, self.req, self.plan = runner, index, request, planned
        self.changes = planned.changes
        self.trials: list[TrialRun] = []
        self.ends: tuple[TrialRun, ...] = ()
        self.resolver: Resolver | None = None
        self.subject = TrialSubject(self)
        self.cases = TrialCases(request.settings, request.case, runner.envs.paths.root / "settings") \
            if request.settings else None  # a trial of settings runs a case of its own
        self.probe = Probe(runner, request.trial_request(), self.subject,  # the trials' verdicts, steps, ends
                           cases=self.cases.case_of if self.cases else None)
        if request.metric is not None:  # --metric: the trials called by their number (packages only)
            from dsbisect.envdiff.numbers import NumericTrials

            self.probe = NumericTrials(runner, request.trial_request(), self.subject)
        self.ties: dict[int, str] = {}  # change -> uv's reason it cannot be applied alone

    # ------------------------------------------------------------------ run

    def run(self) -> EnvResult:
        mgr: EnvManager = self.runner.envs
        self._keep_freezes()
        with Resolver(mgr.uv, mgr.base, mgr.mode is BaseMode.LAYERED) as self.resolver:
            try:
                return self._run()
            finally:
                self.runner.stop_ahead()

    def _keep_freezes(self) -> None:
        """The environments resolved for this request (a date, a commit, this one) written as freezes
        in the bisection's folder of the store, so that the run can be repeated from files."""
        written, notes = [], list(self.req.source_notes)
        folder = self.runner.store.dir / "bisections" / self.req.key[:16]
        for name, text in zip(("good-env.txt", "bad-env.txt"), self.req.freezes):
            if text:
                folder.mkdir(parents=True, exist_ok=True)
                (folder / name).write_text(text)
                written.append(str(folder / name))
        if written:
            notes.append("resolved environments kept as freezes (--good-env/--bad-env repeat the run): "
                         + ", ".join(written))
        self.plan = dataclasses.replace(self.plan, notes=(*self.plan.notes, *notes))

    def _run(self) -> EnvResult:
        probe = self.probe
        self.save(BisectionStatus.RUNNING, {"changes": [change_json(c) for c in self.changes]})
        ends = [self._point(frozenset()), self._point(frozenset(range(len(self.changes))))]
        problem = probe.check_ends([self.subject.label(p) for p in ends], ends, Stage.ENV)
        self.ends = tuple(self._trial(s, st)
                          for s, st in zip((set(), set(range(len(self.changes)))), probe.steps[-2:]))
        if problem:
            return self._finish(EnvResult(self.req, self.changes, problem[0], problem[1], ends=self.ends,
                                          notes=self.plan.notes))
        units = self._units()
        found = find_causes(len(self.changes), self._test, width=max(1, self.req.width), units=units,
                            ahead=self._ahead, max_causes=MAX_CAUSES)
        level1 = [self._level1(c, units) for c in found.causes]  # each further cause bisected as the first
        result = level1[0]
        if result.culprits:
            result = self._level2(result)
            more = [self._level2(r) for r in level1[1:] if r.culprits]
            result = with_causes(result, more, every_cause(found, level1, self.trials, self.ends))
            if self.req.metric is None:  # the pin and the fix are run as pass/fail
                result = dataclasses.replace(result, remedies=self._remedies(result))
        return self._finish(result)

    def _remedies(self, result: EnvResult) -> tuple[Remedy, ...]:
        """For each culprit whose first bad release was found (an upgrade, not a downgrade): the pin
        that avoids it and the release that fixes it, each run in the bad environment."""
        bad_pins = requirements(self.req.bad_env, (), self.plan.hold, self.plan.held_names)
        versions = {c.name: c.bad.version for c in self.changes if is_package(c) and c.bad is not None and c.bad.version}
        out, everything = [], frozenset(range(len(self.changes)))
        for res in result.releases:
            if res.verdict is Answer.FOUND and res.request.mode is self.req.mode and res.last_good and res.first_bad:
                self.runner.progress("note", f"remedy: {res.request.package} (the pin, then the latest release)")
                rest = others(result.every, self.changes, res.request.package)  # the other causes, reverted
                out.append(remedy(self.runner, self.index, res, self._reqs(everything - rest) if rest else bad_pins,
                                  versions[res.request.package], self._points,
                                  tuple(self.changes[i].describe() for i in sorted(rest))))
        return tuple(out)

    def _points(self, name: str, planned: Plan, pins: tuple[str, ...]) -> tuple[CulpritPoints, list[Confounder]]:
        """The release points of ``name`` with ``pins`` held, each release's pins moved as uv needs."""
        per, moved = self._release_pins(name, planned, pins)
        return CulpritPoints(ReleasePoints(name, pins), per), moved

    def _level1(self, found: EnvSearch, units) -> EnvResult:
        required = self._required(found)
        explained = set(found.unverified) <= set(required) and len(required) < len(found.culprits)
        verdict = Answer.FOUND if found.exact or explained else Answer.AMBIGUOUS
        names = " and ".join(self.changes[i].describe() for i in found.culprits)
        message = "" if verdict is Answer.FOUND else found.note or f"not exact: {names}"
        return EnvResult(self.req, self.changes, verdict, message, ends=self.ends, trials=tuple(self.trials),
                         culprits=found.culprits, required=required, exact=found.exact, note=self._note(found, required),
                         units=tuple(tuple(sorted(u)) for u in units), notes=self.plan.notes)

    def _skip_reason(self, found: EnvSearch, x: int) -> str:
        rest = frozenset(found.culprits) - {x}
        return next((t.detail for t in self.trials if t.applied == rest), "")

    def _required(self, found: EnvSearch) -> tuple[int, ...]:
        """The culprits whose removal was untestable because uv's reason names them: the rest of
        the answer cannot be installed without them (``a 2.0`` requires ``c >= 2.0``)."""
        out = []
        for x in found.unverified:
            rest = frozenset(found.culprits) - {x}
            trial = next((t for t in self.trials if t.applied == rest), None)
            if trial is not None and trial.side is Side.SKIP and named_in(trial.detail, [self.changes[x].name]):
                out.append(x)
        return tuple(out)

    def _note(self, found: EnvSearch, required: tuple[int, ...] = ()) -> str:
        """The search's note with change names for its indices (or, where uv explains why a
        culprit could not be left out, that)."""
        if not found.unverified:
            return found.note
        if set(found.unverified) <= set(required):
            rest = " and ".join(self.changes[i].describe() for i in found.culprits if i not in required)
            return "; ".join(f"{self.changes[x].describe()} cannot be left out of the answer: {rest} requires it "
                             f"(uv: {clip(self._skip_reason(found, x), 300)}); alone it behaves as the good end"
                             for x in found.unverified)
        return found.note + " (" + "; ".join(f"{i}: {self.changes[i].describe()}" for i in found.unverified) + ")"

    def _finish(self, result: EnvResult) -> EnvResult:
        if self.req.metric is not None:  # level 1's values per trial, and the answer as a number
            names = [self.changes[i].describe() for i in result.culprits]
            result = dataclasses.replace(result, numbers=self.probe.numbers(result.verdict, names))
        result = dataclasses.replace(result, steps=tuple(self.probe.steps))
        self.save(BisectionStatus.DONE, result.to_json())
        return result

    # ------------------------------------------------------------ trials

    def _test(self, subsets: Sequence[frozenset[int]]) -> list[Side]:
        """Each subset as a point, all run at once (a subset uv cannot satisfy is a skip the
        Runner records with uv's reason: the search steps around it)."""
        points = [self._point(s) for s in subsets]
        shown = "; ".join(self._describe(s) for s in subsets)
        self.runner.progress("note", f"level 1: {len(subsets)} trial(s) of {len(self.changes)} changes: {shown}")
        steps = self.probe.test_all(points, Stage.ENV)
        for subset, step in zip(subsets, steps):
            self.trials.append(self._trial(subset, step))
        return [self.probe.side(st.verdict) for st in steps]

    def _ahead(self, subsets: Sequence[frozenset[int]]) -> None:
        """Build the venvs of the next round's likely trials while this round runs (as a release
        bisection looks ahead); a few per free slot, the rest would rarely be asked."""
        chosen = list(subsets)[:2 * max(1, self.req.width)]
        self.runner.prepare_ahead(self.req.case, [self._point(frozenset(s)) for s in chosen])

    def _trial(self, applied: frozenset[int], step: Step) -> TrialRun:
        return TrialRun(frozenset(applied), self.probe.side(step.verdict), step.label, step.tally.run_ids, step.outcome,
                        step.detail)

    def _closure(self, subset: frozenset[int]) -> tuple[frozenset[int], str]:
        """``subset`` with the changes uv's error names added until uv can satisfy it (at most
        three rounds), and uv's first reason; ``subset`` itself when it resolves or never does."""
        ran, first = frozenset(subset), ""
        by_name = {canonicalize_name(c.name): i for i, c in enumerate(self.changes) if is_package(c)}
        for _ in range(3):
            problem = self.resolver.check(self._reqs(ran))
            if problem is None:
                return ran, first
            extra = {by_name[n] for n in named_in(problem, by_name)} - ran
            if not extra:
                break
            first = first or problem
            ran |= extra
        return frozenset(subset), ""

    def _units(self) -> list[frozenset[int]]:
        """Changes that dependency metadata ties together: each change with the ones uv needs
        moved with it (its adjustment when applied alone)."""
        singles = [frozenset({i}) for i, c in enumerate(self.changes) if is_package(c)]  # settings tie to nothing
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="dsbisect-resolve") as pool:
            found = list(pool.map(self._closure, singles))
        self.ties = {i: why for i, (ran, why) in enumerate(found) if len(ran) > 1}
        return list(dict.fromkeys(ran for ran, _ in found if len(ran) > 1))  # a tie once, whichever side found it

    def _reqs(self, applied: frozenset[int]) -> tuple[str, ...]:
        return requirements(self.req.good_env, [c for c in (self.changes[i] for i in sorted(applied)) if is_package(c)],
                            self.plan.hold,
                             self.plan.held_names)

    def _point(self, applied: frozenset[int]) -> Point:
        moved = tuple((c.name, c.bad.version) for c in (self.changes[i] for i in sorted(applied))
                      if is_package(c) and c.bad is not None and c.bad.version and c.bad.plain)
        variant = self.cases.variant(self.changes[i] for i in applied if not is_package(self.changes[i])) \
            if self.cases else ""
        point = Point(versions=moved, pins=self._reqs(applied), name=self._describe(applied), variant=variant)
        self.subject.labels[point.key] = point.name
        return point

    def _describe(self, applied: frozenset[int]) -> str:
        n = len(self.changes)
        if not applied:
            return f"good {ends_word(self.changes)}"
        if len(applied) == n:
            return f"bad {ends_word(self.changes)}"
        if len(applied) <= 3:
            return "good + " + ", ".join(self.changes[i].describe() for i in sorted(applied))
        return f"good + {len(applied)} of {n} changes ({', '.join(self.changes[i].name for i in sorted(applied))})"

    # ------------------------------------------------------------ level 2

    def _level2(self, result: EnvResult) -> EnvResult:
        releases, skipped, confounders = [], [], []
        for i in result.culprits:
            c = self.changes[i]
            if i in result.required or not is_package(c):
                continue  # a setting is its own answer  # held at its bad version while the culprit that requires it is bisected
            if not c.bisectable or c.kind is not Kind.CHANGED:
                skipped.append(f"{c.describe()}: not bisectable below the change (not two released versions)")
                continue
            partners = [self.changes[j] for j in result.culprits if j != i]
            try:
                done, found = self._bisect_release(c, partners)
            except DsbisectError as e:  # e.g. the index lists no releases between the versions
                skipped.append(f"{c.describe()}: the release bisection could not start: {e}")
                continue
            releases.append(done)
            confounders += found
        return dataclasses.replace(result, releases=tuple(releases), skipped=tuple(skipped),
                                   confounders=tuple(confounders))

    def _bisect_release(self, c: Change, partners: list[Change]) -> tuple[Result, list[Confounder]]:
        old, new = c.good.version, c.bad.version
        backwards = _parse(new) < _parse(old)  # a downgrade: the older release is the bad one
        low, high = (new, old) if backwards else (old, new)
        rq = Request(package=c.name, good=low, bad=high, case=self.req.case,
                     pins=self._context(c, partners), regress_on=self.req.regress_on,
                     mode=self.req.mode.flipped if backwards else self.req.mode, repeat=self.req.repeat, signature=self.req.signature,
                     pre=_parse(low).is_prerelease or _parse(high).is_prerelease, git_repo=self._repo_for(c),
                     verify_commit_ends=self.req.verify_commit_ends, width=self.req.width, confirm=self.req.confirm,
                     any_failure=self.req.any_failure, prove=self.req.prove, metric=self.req.metric,
                     metric_pattern=self.req.metric_pattern)
        planned = plan(rq, self.index)
        self.runner.progress("note", f"level 2: {c.describe()}: {len(planned.versions)} releases")
        pins, confounders = self._release_pins(c.name, planned, rq.pins)
        points = CulpritPoints(ReleasePoints(rq.package, rq.pins), pins)  # the environment's pins, not the case's
        result = Bisection(self.runner, self.index, rq, points).run(planned)
        ends = {result.last_good, result.first_bad}
        said = [f"possible confounder: {x.describe()}" for x in confounders if x.version in ends]
        message = "; ".join(m for m in (result.message, *said) if m)
        return dataclasses.replace(result, message=message), confounders

    def _context(self, c: Change, partners: list[Change]) -> tuple[str, ...]:
        """Every other package where the culprit reproduces: the partners at their bad version,
        the rest at good (the culprit's own pin is replaced by each release)."""
        reqs = requirements(self.req.good_env, partners, self.plan.hold, self.plan.held_names)
        return tuple(r for r in reqs if canonicalize_name(Requirement(r).name) != canonicalize_name(c.name))

    def _release_pins(self, name: str, planned: Plan, pins: tuple[str, ...]):
        """Per release, the held pins uv can satisfy with it: those its error names are moved to
        the bad environment's version, else left to uv (recorded as confounders)."""
        def one(version: str):
            return version, self._relax(name, version, pins)

        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="dsbisect-resolve") as pool:
            found = list(pool.map(one, planned.versions))
        per = {v: p for v, (p, _) in found if p != pins}
        return per, [x for _, (_, x) in found if x is not None]

    def _relax(self, name: str, version: str, pins: tuple[str, ...]) -> tuple[tuple[str, ...], Confounder | None]:
        mine = f"{canonicalize_name(name)}=={version}"
        problem = self.resolver.check((*pins, mine))
        if problem is None:
            return pins, None
        held = {canonicalize_name(Requirement(p).name): p for p in pins}
        named = named_in(problem, held) - {canonicalize_name(name)} - set(self.plan.held_names)
        if not named:
            return pins, None  # nothing to move: the release is untestable here (a skip)
        bad = {canonicalize_name(p.name): p.requirement for p in self.req.bad_env.pins}
        relaxed = tuple(bad.get(canonicalize_name(Requirement(p).name), "") if canonicalize_name(Requirement(p).name) in named
                        else p for p in pins)
        relaxed = tuple(p for p in relaxed if p)
        if self.resolver.check((*relaxed, mine)) is not None:  # the bad env's pins do not do: let uv pick
            relaxed = tuple(p for p in pins if canonicalize_name(Requirement(p).name) not in named)
            if self.resolver.check((*relaxed, mine)) is not None:
                return pins, None
        picked = dict((canonicalize_name(n), v) for n, v in self.resolver.plan((*relaxed, mine)))
        moved = tuple(f"{n} {_version(held[n])} -> {picked.get(n) or _version(bad.get(n, '')) or 'uv’s choice'}"
                      for n in sorted(named))
        return relaxed, Confounder(name, version, moved, problem)

    def _repo_for(self, c: Change) -> Path | None:
        """The clone, for the culprit whose tags it has (the commit step needs both)."""
        repo = self.plan.repo
        if repo is None:
            return None
        try:
            gitrepo.tag_for(repo, c.name, c.good.version)
            gitrepo.tag_for(repo, c.name, c.bad.version)
        except InputError:
            return None
        return repo

    # ------------------------------------------------------------------ store

    def save(self, status: BisectionStatus, result: dict) -> None:
        req = self.req
        if status is BisectionStatus.RUNNING and "steps" in result:  # a level-1 step just ended: keep the changes beside it
            result = {"changes": [change_json(c) for c in self.changes]} | result
        self.runner.store.save_bisection(req.key, ENV_PACKAGE, req.good_env.source, req.bad_env.source,
                                         req.asked(str(Path.cwd())), status, result)


def _parse(v: str) -> Version:
    try:
        return Version(v)
    except InvalidVersion:
        raise InputError(f"{v!r} is not a version a release bisection can order") from None


def _version(req: str) -> str:
    if not req:
        return ""
    spec = list(Requirement(req).specifier)
    return spec[0].version if len(spec) == 1 else str(Requirement(req).specifier)
