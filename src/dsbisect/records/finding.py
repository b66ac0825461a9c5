"""What a nightly makes of a bisection's answer: a ``Finding`` (a regression, a hang, the machine's
fault, not finished yet ...) and the points it could not test, each with its cause.

A maintainer's nightly has to tell "the code broke" from "the machine broke": a point that
could not run because of the machine (too few GPUs, the out-of-memory killer, a node or the
scheduler) is *infra*, never a verdict on the commit; a hang is a verdict like a failure (when
the bad end hangs, the hang is the regression, proven and bisected like any other).  The cause
of an untested point is the run's recorded ``SkipCause`` (what the processes did: the exit
code, the import check, the kernel's OOM kill, the GPU count, a CUDA initialisation the
start-up hook saw fail), never words it printed.  Pure.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dsbisect.core.model import Answer, Outcome, RegressOn, Verdict
from dsbisect.records.results import Result, Step
from dsbisect.records.run import SkipCause


class Finding(enum.Enum):
    """The nightly's class of a bisection's answer (its ``verdict`` output is the answer itself)."""

    REGRESSION = "regression"  # a first bad commit, failing as the bad end fails
    HANG = "hang"  # a first bad commit, hanging as the bad end hangs
    AMBIGUOUS = "ambiguous"  # untestable commits leave several candidates
    UNFINISHED = "unfinished"  # the budget ran out: the range so far, and the store to go on from
    NOT_REPRODUCED = "not-reproduced"  # the bad end passes here (flaky, or fixed since)
    ENVIRONMENT = "environment"  # the last green commit fails now too: the machine or a dependency changed
    INFRA = "infra"  # an end could not run because of the machine
    UNTESTABLE = "untestable"  # an end could not be tested for another reason (build, import, exit 125)
    UNCONFIRMED = "unconfirmed"  # the answer did not hold (--confirm, --confidence at its cap)

    @property
    def files_issue(self) -> bool:
        """Whether the nightly opens (or updates) an issue for it: a culprit or a short list."""
        return self in (Finding.REGRESSION, Finding.HANG, Finding.AMBIGUOUS)


# The machine's doing: another machine (or the same one later) may well run the point.
MACHINE = frozenset({SkipCause.GPUS, SkipCause.OOM, SkipCause.NODES, SkipCause.SLURM, SkipCause.CUDA})
CAUSE_WORDS = {SkipCause.GPUS: "too few GPUs", SkipCause.OOM: "out of memory (killed)",
               SkipCause.NODES: "a node could not run it", SkipCause.SLURM: "the scheduler ended it",
               SkipCause.VENV: "could not be built", SkipCause.IMPORT: "does not import",
               SkipCause.START: "could not start", SkipCause.EXIT_125: "the command said untestable (exit 125)",
               SkipCause.MANUAL: "marked skip by hand", SkipCause.CUDA: "CUDA could not be initialised"}


@dataclass(frozen=True)
class Untested:
    """A point the search stepped around, and why."""

    label: str
    subject: str
    cause: SkipCause | None  # None: it failed otherwise than the regression (or no cause is known)
    detail: str

    @property
    def infra(self) -> bool:
        return self.cause in MACHINE

    def describe(self) -> str:
        why = CAUSE_WORDS.get(self.cause, "failed otherwise than the regression") if self.cause else (
            "failed otherwise than the regression" if self.detail else "not tested")
        label = "the machine's: " if self.infra else ""
        return f"{self.label}: {label}{why}" + (f" ({self.detail[:200]})" if self.detail else "")


def untested(result: Result) -> tuple[Untested, ...]:
    """The points of ``result``'s search that were stepped around, each once, in search order."""
    seen: dict[str, Untested] = {}
    for s in result.steps:
        if s.verdict is Verdict.SKIP and s.label not in seen:
            seen[s.label] = Untested(s.label, s.subject, _cause(s), s.detail)
    return tuple(seen.values())


def _cause(step: Step) -> SkipCause | None:
    return next((r.skip_cause for r in step.runs if r.skip_cause is not None), None)


def classify(result: Result) -> Finding:
    """The nightly's class of ``result``."""
    v = result.verdict
    if v is Answer.FOUND:
        kind = result.regression.regress_on if result.regression else result.request.regress_on
        first = _first_bad(result)
        hung = kind is RegressOn.HANG or (first is not None and first.outcome is Outcome.HANG)
        return Finding.HANG if hung else Finding.REGRESSION
    if v is Answer.UNTESTABLE:
        ends = [u for u in untested(result) if u.label in (result.candidates[:1] + result.candidates[-1:])]
        return Finding.INFRA if any(u.infra for u in ends) else Finding.UNTESTABLE
    return {Answer.AMBIGUOUS: Finding.AMBIGUOUS, Answer.UNFINISHED: Finding.UNFINISHED,
            Answer.NOT_REPRODUCED: Finding.NOT_REPRODUCED, Answer.GOOD_END_BAD: Finding.ENVIRONMENT,
            Answer.UNCONFIRMED: Finding.UNCONFIRMED}[v]


def _first_bad(result: Result) -> Step | None:
    want = result.commit.first_bad if result.commit else None
    return next((s for s in reversed(result.steps) if want and s.commit == want), None)
