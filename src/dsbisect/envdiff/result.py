"""An environment bisection's result (``EnvResult``): its JSON, its every-cause loop put
together, and the answer in one line, as the JSON's ``message`` and every report's summary say
it: ``37 changes; culprit transformers 4.36.2 -> 4.39.2 (6 trials); first bad release 4.37.0
(3 runs); first bad commit <hash> <subject> (6 runs)``.  Outside text made safe.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.utils import canonicalize_name

from dsbisect.core.mode import Side
from dsbisect.core.model import Answer, Stage
from dsbisect.core.outside import safe
from dsbisect.envdiff.causes import Cause, EveryCause
from dsbisect.envdiff.environments import Change
from dsbisect.envdiff.settings import change_json, ends_word
from dsbisect.records.numbers import Numbers
from dsbisect.records.results import Confounder, Result, Step, TrialRun
from dsbisect.search.causes import Causes

if typing.TYPE_CHECKING:
    from dsbisect.envdiff.plan import EnvRequest
    from dsbisect.envdiff.remedy import Remedy


@dataclass(frozen=True)
class EnvResult:
    request: EnvRequest
    changes: tuple[Change, ...]
    verdict: Answer
    message: str = ""
    ends: tuple[TrialRun, ...] = ()  # the good and the bad environment, as given
    trials: tuple[TrialRun, ...] = ()
    culprits: tuple[int, ...] = ()
    required: tuple[int, ...] = ()  # culprits the others require (uv: they cannot be applied without them)
    exact: bool = False
    note: str = ""
    units: tuple[tuple[int, ...], ...] = ()
    releases: tuple[Result, ...] = ()  # one per bisected culprit
    skipped: tuple[str, ...] = ()  # culprits not bisected below the change, and why
    confounders: tuple[Confounder, ...] = ()
    notes: tuple[str, ...] = ()
    steps: tuple[Step, ...] = ()  # the level-1 steps (the ends, then the trials), as a Bisection's
    remedies: tuple[Remedy, ...] = ()  # per culprit with a first bad release: the pin and the fix, run
    numbers: Numbers | None = None  # --metric: level 1's values per trial (envdiff.numbers)
    every: EveryCause | None = None  # every cause (the first is culprits), each check run, the verified line

    @property
    def exit_code(self) -> int:
        return max([self.verdict.exit_code, *(r.exit_code for r in self.releases)])

    def to_json(self) -> dict:
        return env_json(self)

    @property
    def failure(self) -> tuple[Answer, str]:
        """The verdict and message of the first level that did not answer (level 1, else a release)."""
        bad = next((r for r in self.releases if r.exit_code), None)
        if self.verdict.exit_code or bad is None:
            return self.verdict, self.message
        return bad.verdict, f"{bad.request.package}: {bad.message}"


def every_cause(found: Causes, level1: Sequence[EnvResult], trials: Sequence[TrialRun],
                ends: Sequence[TrialRun]) -> EveryCause:
    """The causes as the engine's level 1 judged each (``level1``: one result per cause, the
    first the answer's own), each with its check's trial."""
    by_applied = {t.applied: t for t in (*ends[:1], *trials)}
    causes = tuple(Cause(r.culprits, r.required, r.exact, r.verdict, r.note, by_applied[check.applied])
                   for r, check in zip(level1, found.checks))
    word = ends_word(level1[0].changes)
    return EveryCause(causes, found.end, len(level1[0].changes), "environment" if word == "env" else word)


def with_causes(first: EnvResult, more: Sequence[EnvResult], every: EveryCause) -> EnvResult:
    """The first cause's result with every cause's release bisections (in cause order) and the loop."""
    return dataclasses.replace(first, every=every, releases=sum((r.releases for r in more), first.releases),
                               skipped=sum((r.skipped for r in more), first.skipped),
                               confounders=sum((r.confounders for r in more), first.confounders))


def env_json(r: EnvResult) -> dict:
    """``bisect --good-env --format json`` (the result column of an environment bisection)."""
    req = r.request
    return {
        "kind": "environment",
        "good_env": req.good_env.source,
        "bad_env": req.bad_env.source,
        "case": req.case.name,
        "regress_on": req.regress_on.value,
        "hold": list(req.hold),
        "verdict": r.verdict.value,
        "message": r.message or chain(r),  # a found answer in one line, as the reports begin
        "env_diff": {
            "changes": [change_json(c) for c in r.changes],
            "ends": [t.to_json() for t in r.ends],
            "trials": [t.to_json() for t in r.trials],
            "culprits": [r.changes[i].name for i in r.culprits],
            "culprit_changes": [change_json(r.changes[i]) for i in r.culprits],
            "required": [r.changes[i].name for i in r.required],
            "exact": r.exact,
            "note": r.note,
            "units": [list(u) for u in r.units],
            "notes": list(r.notes),
        },
        "releases": [x.to_json() for x in r.releases],
        "not_bisected": list(r.skipped),
        "confounders": [x.to_json() for x in r.confounders],
        "steps": [s.to_json() for s in r.steps] + [s.to_json() for x in r.releases for s in x.steps]
        + [s.to_json() for m in r.remedies for x in (m.pin, m.fix) if x is not None for s in x.steps],  # for `log`
        "remedy": [m.to_json() for m in r.remedies],
        "every_cause": r.every.to_json(r.changes, r.releases) if r.every is not None else None,
        **({"numbers": r.numbers.to_json()} if r.numbers else {}),
    }


# ---------------------------------------------------------------------- the answer in one line


def chain(r: EnvResult) -> str:
    """``37 changes; culprit transformers 4.36.2 -> 4.39.2 (6 trials); first bad release 4.37.0
    (3 runs); first bad commit <hash> <subject> (6 runs)``."""
    n = len(r.changes)
    head = f"{n} change{'s' if n != 1 else ''}"
    if not r.culprits:
        return safe(f"{head}; {r.verdict.value}: {r.message}" if r.message else f"{head}; {r.verdict.value}")
    trials = f"({len(r.trials)} trial{'s' if len(r.trials) != 1 else ''})"
    seen = {i for t in (*r.ends, *r.trials) for i in t.run_ids}  # level 2 reuses these: not counted again
    causes = [(c.culprits, c.required) for c in r.every.causes] if r.every is not None else [(r.culprits, r.required)]
    parts = []
    for k, (culprits, required) in enumerate(causes):
        said = _culprits(r, culprits, required)
        if k == 0:
            lead = f"{head}; {len(causes)} causes; cause 1: " if len(causes) > 1 else f"{head}; "
            parts.append(f"{lead}{said} {trials}" + " — not exact" * (r.verdict is not Answer.FOUND))
        else:
            parts.append(f"cause {k + 1}: {said}" + " — not exact" * (r.every.causes[k].verdict is not Answer.FOUND))
        names = {canonicalize_name(r.changes[i].name) for i in culprits}
        for res in r.releases:
            if canonicalize_name(res.request.package) in names:
                parts += _release_parts(res, len(r.releases) > 1, seen, res.request.mode is not r.request.mode)
    if r.every is not None:
        parts.append(r.every.verified)
    return safe("; ".join(parts))


def _culprits(r: EnvResult, culprits: tuple[int, ...], required: tuple[int, ...]) -> str:
    names = [r.changes[i].describe() for i in culprits if i not in required]
    needs = [r.changes[i].describe() for i in required]
    if needs:
        names[-1] += f" (with {' and '.join(needs)}, which it requires; harmless alone)"
    return f"culprit {names[0]}" if len(names) == 1 else f"culprits (only together): {' and '.join(names)}"


def _release_parts(res: Result, named: bool, seen: set[int], downgrade: bool) -> list[str]:
    """A downgrade is bisected upwards (as --find-fix): its answer is the last bad release and
    the first good one above it."""
    req = res.request
    who = f"{req.package}: " if named else ""
    word = req.mode.first_new
    runs = _runs(res, Stage.RELEASE, seen)
    if res.first_bad and res.verdict is Answer.FOUND and downgrade:  # bisected upwards, from the older release
        low, high = (f"last {req.mode.verdict(Side.OLD).value}", f"first {req.mode.verdict(Side.NEW).value}")
        parts = [f"{who}(a downgrade) {low} release {res.last_good}, {high} release {res.first_bad} "
                 f"({_count(runs)})"]
    elif res.first_bad and res.verdict is Answer.FOUND:
        parts = [f"{who}{word} release {res.first_bad} ({_count(runs)})"]
    elif res.maybe:
        parts = [f"{who}{word} release one of {', '.join(res.maybe)} ({runs} runs)"]
    else:
        return [f"{who}release bisection: {res.verdict.value}" + (f" ({res.message})" if res.message else "")]
    c = res.commit
    if c is not None and c.first_bad:
        n = _runs(res, Stage.COMMIT, seen)
        parts.append(f"{word} commit {c.first_bad[:10]} {c.subject} ({_count(n)})")
    elif c is not None:
        parts.append(f"commit left between {', '.join(h[:10] for h in c.maybe)}")
    elif res.commit_message:
        parts.append(f"commit step: {res.commit_message}")
    return parts


def _count(runs: int) -> str:
    return "level 1's runs" if runs == 0 else f"{runs} run{'s' if runs != 1 else ''}"


def _runs(res: Result, stage: Stage, seen: set[int]) -> int:
    """Runs this stage made (not those of level 1 it reused)."""
    return len({i for s in res.steps if s.stage is stage for i in s.tally.run_ids} - seen)
