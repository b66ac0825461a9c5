"""What a bisection asked and found: Request, Step, Regression, CommitResult, Confirmation, Result.

The bisection side of what is recorded (``records`` holds the run side).  ``bisection`` makes
these values, ``report``/``chainreport`` render them and the store keeps them as JSON: each
type's ``to_json`` is its part of ``bisect --format json`` (and of the bisections table's
``result`` column), key for key; ``from_json`` reads it back, from this version or an older
one: keys it does not know are passed over, missing ones take their defaults.

A result read back knows what its JSON says and no more: its steps carry their tallies (the
outcome, counts, run ids, seconds, detail) but not the ``RunRecord``s (``Step.runs`` is empty;
the store has them by id), and its request names the case but has none of the case's settings.
Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from dsbisect.core.metric import MetricSpec
from dsbisect.search.confidence import Confidence, confidence_from_json, confidence_json
from dsbisect.verdict.identity import Identity
from dsbisect.core.mode import Mode
from dsbisect.core.model import (
    Answer,
    Case,
    Outcome,
    RegressOn,
    Stage,
    Verdict,
    digest,
    read_enum,
    read_int,
    read_ints,
    worst,
)
from dsbisect.records import migrate
from dsbisect.records.numbers import Numbers
from dsbisect.records.proof import Proof
from dsbisect.core.outside import clip
from dsbisect.core.redact import redact_tree
from dsbisect.search.steps import Side
from dsbisect.records.run import RunRecord

__all__ = ["Agreement", "CommitResult", "Confirmation", "Confounder", "Recorded", "Regression", "Request", "Result",
           "Step", "Tally", "TrialRun", "dumps"]


def _strs(value: Any) -> tuple[str, ...]:
    return tuple(str(x) for x in value) if isinstance(value, (list, tuple)) else ()


def _str(d: Mapping, key: str) -> str:
    value = d.get(key)
    return "" if value is None else str(value)


def _opt(d: Mapping, key: str) -> str | None:
    value = d.get(key)
    return None if value is None else str(value)


def _maps(value: Any) -> tuple[Mapping, ...]:
    """The objects of a recorded list (an odd record's other values are passed over)."""
    return tuple(x for x in value if isinstance(x, Mapping)) if isinstance(value, (list, tuple)) else ()


def _dict(d: Mapping, key: str) -> Mapping | None:
    value = d.get(key)
    return value if isinstance(value, Mapping) else None


# ------------------------------------------------------------------ request


@dataclass(frozen=True)
class Request:
    package: str
    good: str
    bad: str
    case: Case
    pins: tuple[str, ...] = ()
    regress_on: RegressOn = RegressOn.AUTO  # AUTO: what the bad end shows (Bisection.rule, once it ran)
    mode: Mode = Mode.REGRESSION
    repeat: int = 1
    signature: str | None = None
    pre: bool = False
    git_repo: Path | None = None
    verify_commit_ends: bool = True
    include_yanked: bool = False
    width: int = 1
    confirm: int = 1  # runs of the final last-good / first-bad pair; 1 = the search's own
    argv: tuple[str, ...] = ()  # the bisect command line (marks.invocation), kept for `dsbisect log`; not in the key
    prove: bool = True  # after a commit step: the revert proof (not in the key: it adds a step, changes no answer)
    any_failure: bool = False  # count every failure of the rule's kind, not only the bad end's own
    confidence: float | None = None  # --confidence P: the probabilistic search (bayes), one run per probe
    metric: MetricSpec | None = None  # --metric/--worse-if: a regression as a number (bisect.numeric)
    metric_pattern: str | None = None  # --metric-pattern: the regex that reads the metric from the output

    @property
    def key(self) -> str:
        return digest({
            "package": canonicalize_name(self.package), "good": self.good, "bad": self.bad, "case": self.case.key,
            "pins": sorted(self.pins), "regress_on": self.regress_on.value, "find_fix": self.mode.find_fix,
            "repeat": self.repeat, "signature": self.signature, "pre": self.pre,
            **({"include_yanked": True} if self.include_yanked else {}),
            **({"any_failure": True} if self.any_failure else {}),
            **({"confidence": self.confidence} if self.confidence is not None else {}),
            **({"metric": self.metric.describe(), "metric_pattern": self.metric_pattern} if self.metric else {}),
            "git": str(self.git_repo) if self.git_repo else None,
        })

    def to_json(self) -> dict:
        """The request's keys of a result (``regress_on`` is the result's: the rule it resolved to)."""
        return {"package": self.package, "good": self.good, "bad": self.bad, "mode": self.mode.value}

    @classmethod
    def from_json(cls, d: Mapping, regress_on: RegressOn = RegressOn.AUTO) -> Request:
        """A result's request as recorded: the case by its name only (a result keeps no more of it)."""
        case = Case(name=_str(d, "case"), script=Path(), script_digest="")
        return cls(_str(d, "package"), _str(d, "good"), _str(d, "bad"), case, pins=_strs(d.get("pins")),
                   regress_on=regress_on, mode=read_enum(Mode, d.get("mode"), Mode.REGRESSION),
                   signature=_opt(d, "signature_filter"))


# --------------------------------------------------------------------- steps


@dataclass(frozen=True)
class Tally:
    """What a step's runs came to, as a result records it (the runs themselves are the store's)."""

    outcome: Outcome  # the worst of the runs' (model.WORST_FIRST)
    counts: tuple[tuple[Outcome, int], ...]  # in Outcome's order, the outcomes seen only
    run_ids: tuple[int, ...]
    seconds: float
    detail: str  # the first hang, failure or skip's signature or reason; else the last run's
    manual: bool  # a run of it was marked by hand

    @classmethod
    def of(cls, runs: Iterable[RunRecord]) -> Tally:
        runs = tuple(runs)
        bad = [r for r in runs if r.outcome in (Outcome.HANG, Outcome.FAIL, Outcome.SKIP)]
        shown = bad[0] if bad else (runs[-1] if runs else None)
        counts = tuple((o, n) for o in Outcome if (n := sum(1 for r in runs if r.outcome is o)))
        return cls(worst(r.outcome for r in runs), counts, tuple(r.id for r in runs),
                   sum(r.seconds or 0.0 for r in runs), (shown.signature or shown.reason) if shown else "",
                   any(r.manual is not None for r in runs))


@dataclass(frozen=True)
class Step:
    """One point of a bisection and its runs.  Made from runs, the tally is counted from them;
    read back from JSON, ``runs`` is empty and the tally is the recorded one."""

    stage: Stage
    label: str  # version or short hash
    version: str
    commit: str | None
    subject: str
    verdict: Verdict
    runs: tuple[RunRecord, ...] = ()
    tally: Tally = field(default=None)  # type: ignore[assignment]  # None: counted from runs

    def __post_init__(self) -> None:
        if self.tally is None:
            object.__setattr__(self, "tally", Tally.of(self.runs))

    @property
    def outcome(self) -> Outcome:
        return self.tally.outcome

    @property
    def seconds(self) -> float:
        return self.tally.seconds

    @property
    def detail(self) -> str:
        return self.tally.detail

    def to_json(self) -> dict:
        t = self.tally
        return {"stage": self.stage.value, "version": self.version, "commit": self.commit, "subject": self.subject,
                "verdict": self.verdict.value, "outcome": t.outcome.value, "runs": len(t.run_ids),
                "counts": {o.value: n for o, n in t.counts}, "run_ids": list(t.run_ids),
                "seconds": round(t.seconds, 3), "detail": t.detail, "manual": t.manual}

    @classmethod
    def from_json(cls, d: Mapping) -> Step:
        commit = _opt(d, "commit")
        version = _str(d, "version")
        counts = _dict(d, "counts") or {}
        seconds = d.get("seconds")
        tally = Tally(read_enum(Outcome, d.get("outcome"), Outcome.SKIP),
                      tuple((o, n) for o in Outcome if (n := read_int(counts.get(o.value))) > 0),
                      read_ints(d.get("run_ids")),
                      float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else 0.0,
                      _str(d, "detail"), bool(d.get("manual")))
        return cls(read_enum(Stage, d.get("stage"), Stage.RELEASE), commit[:10] if commit else version, version,
                   commit, _str(d, "subject"), read_enum(Verdict, d.get("verdict"), Verdict.SKIP), (), tally)


# ---------------------------------------------------------------- the answer


@dataclass(frozen=True)
class Regression:
    """What the search counted as bad: the rule, and the failure learned from the defining end."""
    regress_on: RegressOn  # concrete: HANG, FAIL or ANY
    identity: Identity | None  # None: the end showed no failure, or --any-failure / --signature
    learned_from: str  # the end's label
    end: str  # "bad end" | "broken end"
    asked: RegressOn  # as given: AUTO, or an explicit rule

    def describe(self) -> str:
        how = "" if self.asked is RegressOn.AUTO else f" (--regress-on {self.asked.value})"
        if self.identity is None and self.regress_on is RegressOn.ANY and self.asked is RegressOn.AUTO:
            return ""  # the end showed no failure: there is nothing to say what the regression is
        if self.identity is None:
            kind = "failure or hang" if self.regress_on is RegressOn.ANY else self.regress_on.value.upper()
            return f"the regression: any {kind}{how}"
        return f"the regression: {self.identity.describe()}{how} (learned from {self.learned_from}, the {self.end})"

    def to_json(self) -> dict:
        return {"kind": self.regress_on.value, "asked": self.asked.value, "learned_from": self.learned_from,
                "identity": self.identity.describe() if self.identity else None,
                "failure": self.identity.as_json() if self.identity else None}

    @classmethod
    def from_json(cls, d: Mapping, mode: Mode = Mode.REGRESSION) -> Regression:
        failure = _dict(d, "failure")
        return cls(read_enum(RegressOn, d.get("kind"), RegressOn.ANY),
                   Identity.from_json(migrate.identity(failure)) if failure else None,
                   _str(d, "learned_from"), mode.defining_end,
                   read_enum(RegressOn, d.get("asked"), RegressOn.AUTO))


@dataclass(frozen=True)
class CommitResult:
    last_good: str
    first_bad: str | None
    subject: str
    maybe: tuple[str, ...]
    count: int
    verdict: Answer  # found | ambiguous

    def to_json(self) -> dict:
        return {"last_good": self.last_good, "first_bad": self.first_bad, "subject": self.subject,
                "maybe": list(self.maybe), "commits_in_range": self.count, "verdict": self.verdict.value}

    @classmethod
    def from_json(cls, d: Mapping) -> CommitResult:
        return cls(_str(d, "last_good"), _opt(d, "first_bad"), _str(d, "subject"), _strs(d.get("maybe")),
                   read_int(d.get("commits_in_range")), read_enum(Answer, d.get("verdict"), Answer.AMBIGUOUS))


@dataclass(frozen=True)
class Agreement:
    """How many runs of one end of the final pair agreed with the answer."""
    name: str  # last good | first bad | last broken | first fixed
    point: str
    expected: str  # good | bad
    agree: int
    runs: int

    def describe(self) -> str:
        return f"{self.name} {self.point} {self.expected} in {self.agree} of {self.runs} runs"


@dataclass(frozen=True)
class Confirmation:
    runs: int  # wanted per end
    ends: tuple[Agreement, ...]

    @property
    def confirmed(self) -> bool:
        return all(e.agree == e.runs == self.runs for e in self.ends)

    def describe(self) -> str:
        return "; ".join(e.describe() for e in self.ends)

    def to_json(self) -> dict:
        return {"runs": self.runs, "confirmed": self.confirmed,
                **{e.name.replace(" ", "_"): {"point": e.point, "agree": e.agree, "runs": e.runs, "as": e.expected}
                   for e in self.ends}}

    @classmethod
    def from_json(cls, d: Mapping) -> Confirmation:
        ends = tuple(Agreement(str(k).replace("_", " "), _str(v, "point"), _str(v, "as"), read_int(v.get("agree")),
                               read_int(v.get("runs"))) for k, v in d.items() if isinstance(v, Mapping))
        return cls(read_int(d.get("runs")), ends)


@dataclass(frozen=True)
class Result:
    request: Request
    candidates: tuple[str, ...]
    steps: tuple[Step, ...]
    verdict: Answer
    last_good: str | None = None
    first_bad: str | None = None
    maybe: tuple[str, ...] = ()
    message: str = ""
    commit: CommitResult | None = None
    commit_message: str = ""
    confirm: Confirmation | None = None
    good_end: str = ""  # how the good end was found, when it was not given (GOOD auto)
    caveats: tuple[str, ...] = ()  # what lies between the answer's ends and was not tested
    proof: Proof | None = None  # the first bad commit reverted on the first bad release
    regression: Regression | None = None
    different: tuple[str, ...] = ()  # "1.1.0 failed differently (...): not counted; --any-failure counts it"
    confidence: tuple[Confidence, ...] = ()  # --confidence: one per stage searched
    numbers: Numbers | None = None  # --metric: the values per tested point and the answer
    fix: Result | None = None  # --fixed-in: the find-fix bisection from the first bad release to the latest
    fix_note: str = ""  # --fixed-in with no bisection to run (the first bad is the latest), or why not

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    @property
    def runs(self) -> list[RunRecord]:
        """The runs of every step (none for a result read back from JSON)."""
        return [r for s in self.steps for r in s.runs]

    def to_json(self) -> dict:
        """``bisect --format json`` (unmasked: ``dumps`` masks it for stdout, the store's save masks it)."""
        req = self.request
        return {
            **req.to_json(),
            "regress_on": (self.regression.regress_on if self.regression else req.regress_on).value,
            "regression": self.regression.to_json() if self.regression else None,
            "different": list(self.different), "signature_filter": req.signature, "case": req.case.name,
            "pins": list(req.pins), "candidates": list(self.candidates), "steps": [s.to_json() for s in self.steps],
            "verdict": self.verdict.value, "message": self.message, "last_good": self.last_good,
            "first_bad": self.first_bad, "maybe": list(self.maybe),
            "commit": self.commit.to_json() if self.commit else None, "commit_message": self.commit_message,
            "good_end": self.good_end or None, "caveats": list(self.caveats),
            "confirm": self.confirm.to_json() if self.confirm else None,
            "proof": self.proof.to_json() if self.proof else None,
            "confidence": confidence_json(req.confidence, self.confidence),
            **({"numbers": self.numbers.to_json()} if self.numbers else {}),
            **({"fix": self.fix.to_json() if self.fix else None, "fix_note": self.fix_note}
               if self.fix or self.fix_note else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping) -> Result:
        """A recorded result (``bisect --format json``, a bisection's ``result`` column), of any version."""
        d = migrate.result(d)
        mode = read_enum(Mode, d.get("mode"), Mode.REGRESSION)
        regression = Regression.from_json(d["regression"], mode) if _dict(d, "regression") else None
        asked = regression.asked if regression else read_enum(RegressOn, d.get("regress_on"), RegressOn.AUTO)
        commit, confirm, proof = (_dict(d, k) for k in ("commit", "confirm", "proof"))
        asked_p, found = confidence_from_json(d.get("confidence"), mode)
        return cls(replace(Request.from_json(d, asked), confidence=asked_p), _strs(d.get("candidates")),
                   tuple(Step.from_json(s) for s in _maps(d.get("steps"))),
                   read_enum(Answer, d.get("verdict"), Answer.UNTESTABLE), _opt(d, "last_good"), _opt(d, "first_bad"),
                   _strs(d.get("maybe")), _str(d, "message"), CommitResult.from_json(commit) if commit else None,
                   _str(d, "commit_message"), Confirmation.from_json(confirm) if confirm else None,
                   _str(d, "good_end"), _strs(d.get("caveats")),
                   Proof.from_json(proof, mode) if proof else None, regression, _strs(d.get("different")),
                   found, Numbers.from_json(d.get("numbers")),
                   Result.from_json(d["fix"]) if _dict(d, "fix") else None, _str(d, "fix_note"))


def dumps(r: Result) -> str:
    """The result as JSON for stdout, secrets masked."""
    return json.dumps(redact_tree(r.to_json()), indent=2)


# ------------------------------------------------------- environment bisection


@dataclass(frozen=True)
class TrialRun:
    """One level-1 trial: the changes applied on top of the good environment, and how it went."""

    applied: frozenset[int]
    side: Side
    label: str
    run_ids: tuple[int, ...]
    outcome: Outcome
    detail: str  # the skip's reason (uv's, when the pins could not be satisfied), the signature...

    def to_json(self) -> dict:
        return {"applied": sorted(self.applied), "side": self.side.value, "label": self.label,
                "outcome": self.outcome.value, "run_ids": list(self.run_ids), "detail": self.detail}

    @classmethod
    def from_json(cls, d: Mapping) -> TrialRun:
        """A recorded trial (keys it does not know are passed over)."""
        return cls(frozenset(read_ints(d.get("applied"))), read_enum(Side, d.get("side"), Side.SKIP), _str(d, "label"),
                   read_ints(d.get("run_ids")), read_enum(Outcome, d.get("outcome"), Outcome.SKIP), _str(d, "detail"))


@dataclass(frozen=True)
class Confounder:
    """A pin uv had to move for a release of a culprit (level 2)."""

    package: str
    version: str
    moved: tuple[str, ...]  # "c 1.0 -> 2.0"
    reason: str

    def describe(self) -> str:
        return f"at {self.package} {self.version} uv had to move {', '.join(self.moved)} ({clip(self.reason, 200)})"

    def to_json(self) -> dict:
        return {"package": self.package, "version": self.version, "moved": list(self.moved), "reason": self.reason}

    @classmethod
    def from_json(cls, d: Mapping) -> Confounder:
        return cls(_str(d, "package"), _str(d, "version"), _strs(d.get("moved")), _str(d, "reason"))


@dataclass(frozen=True)
class Recorded:
    """What a bisection's ``result`` column holds, finished or not, of a release bisection or of an
    environment bisection (``bisect --good-env``): what ``dsbisect log`` reads back."""

    verdict: Answer | None  # None: not finished
    steps: tuple[Step, ...]  # every step, in order (an environment bisection's: level 1, then each release's)
    answers: tuple[Result, ...] = ()  # the release bisection as recorded so far; an environment one's per culprit
    culprits: tuple[str, ...] = ()  # an environment bisection's changes found
    environment: bool = False
    trials: tuple[TrialRun, ...] = ()  # an environment bisection's level 1: the two ends, then the trials
    message: str = ""  # an environment bisection's: its answer in one line, or why it has none

    @classmethod
    def from_json(cls, d: Mapping) -> Recorded:
        d = migrate.result(d)
        verdict = read_enum(Answer, d.get("verdict"), None) if d.get("verdict") else None
        steps = tuple(Step.from_json(s) for s in _maps(d.get("steps")))
        if d.get("kind") == "environment":
            diff = _dict(d, "env_diff") or {}
            answers = tuple(Result.from_json(x) for x in _maps(d.get("releases")))
            trials = tuple(TrialRun.from_json(t) for t in (*_maps(diff.get("ends")), *_maps(diff.get("trials"))))
            return cls(verdict, steps, answers, _strs(diff.get("culprits")), True, trials, _str(d, "message"))
        return cls(verdict, steps, (Result.from_json(d),))
