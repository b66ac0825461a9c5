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

from dsbisect.render.grid import md
from dsbisect.core.outside import safe
from dsbisect.records.bisections import BisectionRecord
from dsbisect.core.redact import redact_tree
from dsbisect.render.report import bisect_summary  # the one wording of a release bisection's answer


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

    @property
    def heading(self) -> str:
        case = f", case {self.case}" if self.case else ""
        return f"bisection {self.key[:12]}: {self.question}{case} — {self.verdict or f'not finished ({self.status})'}"


def answered(records: Sequence[BisectionRecord], cases: Sequence[str] = ()) -> list[Answered]:
    """The bisections (of ``cases`` only, when given), oldest first."""
    out = [_answered(b) for b in records]
    return [a for a in out if not cases or a.case in cases]


def _answered(b: BisectionRecord) -> Answered:
    r = b.recorded
    if r.environment:
        lines = [f"verdict: {r.verdict.value if r.verdict else b.status.value}"]
        lines += [f"culprit: {c}" for c in r.culprits]
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
                    answer=tuple(safe(ln) for ln in lines), run_ids=ids, command=safe(command))


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
                         "command": a.command} for a in found])


def _ids(ids: Sequence[int]) -> str:
    return " ".join(f"#{i}" for i in ids) if len(ids) <= 12 else \
        " ".join(f"#{i}" for i in ids[:10]) + f" … ({len(ids)} in all)"
