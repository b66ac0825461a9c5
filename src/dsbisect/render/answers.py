"""The store's bisections as ``dsbisect report`` shows them: each one's question, its verdict
and answer (the lines ``bisect`` ended with), the runs it used and the command that ran it.

Pure: ``records.BisectionRecord`` in, a frozen ``Answered`` per bisection out, rendered as
plain lines (the terminal), Markdown (an issue body) and JSON.  Everything from a record is
outside text: redacted and inert (``outside.safe``; JSON through ``redact.redact_tree``).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from dsbisect.core.model import Answer
from dsbisect.render.grid import md
from dsbisect.core.outside import safe
from dsbisect.records.bisections import BisectionRecord
from dsbisect.core.redact import redact_tree
from dsbisect.render.report import bisect_summary  # the one wording of a release bisection's answer
from dsbisect.records.results import Recorded


@dataclass(frozen=True)
class Found:
    """A bisection's answer for one package, as fields (a release bisection has one; an
    environment bisection one per culprit): what a script reads instead of the sentences."""

    package: str
    mode: str  # regression, find-fix (a downgrade is bisected as find-fix)
    last_good: str | None  # with find-fix: the last broken release
    first_bad: str | None  # with find-fix: the first fixed release
    maybe: tuple[str, ...] = ()  # untestable releases left these candidates
    commit: str | None = None  # the first bad (fixed) commit, when the commit step found it
    subject: str = ""

    def to_json(self) -> dict:
        return {"package": self.package, "mode": self.mode, "last_good": self.last_good, "first_bad": self.first_bad,
                "maybe": list(self.maybe), "commit": self.commit, "subject": self.subject}


@dataclass(frozen=True)
class Answered:
    """One recorded bisection, as the report says it."""

    key: str
    question: str  # "deepspeed 0.18.6 → 0.18.7"
    case: str  # "" when the record names none
    status: str  # done, running, interrupted, ...
    verdict: str  # found, ambiguous, not-reproduced, ...; "" while it is not finished
    answer: tuple[str, ...]  # the lines the bisection ended with ("last good release: ...")
    run_ids: tuple[int, ...]
    command: str  # the dsbisect command line that ran it ("" when not recorded)
    found: tuple[Found, ...] = ()  # the answer as fields

    @property
    def heading(self) -> str:
        case = f", case {self.case}" if self.case else ""
        return f"bisection {self.key[:12]}: {self.question}{case} — {self.verdict or f'not finished ({self.status})'}"


def answered(records: Sequence[BisectionRecord], cases: Sequence[str] = ()) -> list[Answered]:
    """The bisections (of ``cases`` only, when given), oldest first; the release bisections an
    environment bisection ran as its level 2 are shown within it, not again on their own."""
    inner = level2(records)
    out = [_answered(b) for b in records if b.key not in inner]
    return [a for a in out if not cases or a.case in cases]


def level2(records: Sequence[BisectionRecord]) -> set[str]:
    """The keys of the release bisections that an environment bisection among ``records`` ran
    (its level 2): the same package, ends and case, and runs all among the environment one's."""
    envs = [(b, b.recorded) for b in records]
    envs = [(b, r) for b, r in envs if r.environment]
    out = set()
    for b in records:
        r = b.recorded
        if r.environment or not r.steps:
            continue
        ids = {i for s in r.steps for i in s.tally.run_ids}
        for env, er in envs:
            theirs = {i for s in (*er.steps, *(s for a in er.answers for s in a.steps)) for i in s.tally.run_ids}
            if env.params.case == b.params.case and ids <= theirs and any(
                    (a.request.package, a.request.good, a.request.bad) == (b.package, b.good, b.bad) for a in er.answers):
                out.add(b.key)
    return out


def _found(r: Recorded) -> tuple[Found, ...]:
    """The answer's fields: one per release answer, and a culprit not bisected below its change
    with no release named."""
    answered = (Answer.FOUND, Answer.AMBIGUOUS)
    out = [Found(a.request.package, a.request.mode.value, a.last_good, a.first_bad,
                 a.maybe if a.verdict is Answer.AMBIGUOUS else (),
                 a.commit.first_bad if a.commit and a.commit.first_bad else None,
                 a.commit.subject if a.commit and a.commit.first_bad else "") for a in r.answers if a.verdict in answered]
    named = {f.package for f in out}
    out += [Found(c, "regression", None, None) for c in r.culprits if c not in named and r.verdict in answered]
    return tuple(out)


def _answered(b: BisectionRecord) -> Answered:
    r = b.recorded
    if r.environment:
        lines = [f"verdict: {r.verdict.value if r.verdict else b.status.value}"]
        lines += [r.message] if r.message else [f"culprit: {c}" for c in r.culprits]  # the chain, when recorded
        lines += [ln for rel in r.answers for ln in bisect_summary(rel)[1:]]
    elif r.verdict is not None:
        lines = bisect_summary(r.answers[0])
    else:
        lines = [f"not finished ({b.status.value}): {len(r.steps)} step(s) recorded"]
    releases = [s for rel in r.answers for s in rel.steps] if r.environment else []
    ids = tuple(dict.fromkeys(i for s in (*r.steps, *releases) for i in s.tally.run_ids))
    command = shlex.join(["dsbisect", "bisect", *b.params.argv]) if b.params.argv else ""
    if b.interrupted and r.verdict is None:
        lines += [f"interrupted: {b.interrupted}", _resume(command, b.params.cwd)]
    return Answered(key=b.key, question=f"{b.package} {b.good} → {b.bad}", case=b.params.case,
                    status=b.status.value, verdict=r.verdict.value if r.verdict else "",
                    answer=tuple(safe(ln) for ln in lines), run_ids=ids, command=safe(command),
                    found=_found(r) if r.verdict is not None else ())


def _resume(command: str, cwd: object) -> str:
    """How to go on with an interrupted bisection."""
    where = f" in {cwd}" if isinstance(cwd, str) else ""
    how = f"run its command (ran as) again{where}" if command else "run the same dsbisect bisect again"
    hidden = "; *** stands for a credential the store does not keep: give it again" if "***" in command else ""
    return f"to resume, {how}: the runs it finished are reused{hidden}"


def terminal_lines(found: Sequence[Answered]) -> list[tuple[str, int]]:
    """(line, indent) for the terminal and a pipe: a heading per bisection, its answer under it."""
    out: list[tuple[str, int]] = []
    for a in found:
        out.append((safe(a.heading), 0))
        out += [(ln, 2) for ln in a.answer[1:]]
        out.append((f"runs: {_ids(a.run_ids)}", 2))
        if a.command:
            out.append((f"ran as: {a.command}", 2))
    return out


def markdown_lines(found: Sequence[Answered]) -> list[str]:
    if not found:
        return []
    out = ["**Bisections**", ""]
    for a in found:
        out += [f"- **{md(a.heading)}**"] + [f"  - {md(ln)}" for ln in a.answer[1:]]
        out.append(f"  - runs: {_ids(a.run_ids)}")
        if a.command:
            out.append(f"  - ran as: `{md(a.command).replace('`', '')}`")
    return out + [""]


def to_json(found: Sequence[Answered]) -> list[dict]:
    return redact_tree([{"key": a.key, "question": a.question, "case": a.case, "status": a.status,
                         "verdict": a.verdict or None, "answer": list(a.answer), "run_ids": list(a.run_ids),
                         "command": a.command, "found": [f.to_json() for f in a.found]} for a in found])


def _ids(ids: Sequence[int]) -> str:
    return " ".join(f"#{i}" for i in ids) if len(ids) <= 12 else \
        " ".join(f"#{i}" for i in ids[:10]) + f" … ({len(ids)} in all)"
