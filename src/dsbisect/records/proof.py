"""The revert proof of a first bad commit: what reverting it on the first bad release showed.

A commit search ends where the behaviour switches on the first-parent chain; that the
commit *causes* the regression in the release users install is a further claim.  The
bisection reverts the commit on top of the first bad release's tag and runs that tree:
if it behaves like the old end, the commit is proven; if it still behaves like the new
end, the commit is not sufficient (another commit of the release also brings the
regression); the revert may also not apply (conflicts) or not be testable.  Pure: the
bisection runs the point and hands the sides and outcomes of its runs in.  For a number
(``--metric``), proven means the reverted release's number recovers (not worse than the last good
commit's beyond the noise); ``numbers`` keeps its values and ``detail`` the line that says so.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dsbisect.core.mode import Mode
from dsbisect.core.model import Outcome, read_enum, read_int, read_ints
from dsbisect.records.numbers import PointNumbers
from dsbisect.search.steps import Side


class ProofVerdict(enum.Enum):
    PROVEN = "proven"  # the release without the commit behaves like the old end
    NOT_SUFFICIENT = "not-sufficient"  # it still behaves like the new end
    CONFLICT = "conflict"  # the revert does not apply cleanly on the release
    UNTESTABLE = "untestable"  # the reverted tree could not be made, built or run


@dataclass(frozen=True)
class Proof:
    commit: str  # the commit reverted (the first bad one; the first fixed one in a fix search)
    onto: str  # the tag it was reverted on top of (the first bad release)
    onto_commit: str
    verdict: ProofVerdict
    mode: Mode = Mode.REGRESSION
    merge: bool = False  # a merge commit, reverted against its first parent
    outcome: Outcome | None = None  # the outcome of the runs that decided
    runs: int = 0
    agree: int = 0  # runs that decided (like the old end when proven, the new end when not)
    conflicts: tuple[str, ...] = ()
    detail: str = ""  # why it is untestable, or what a run that decided said
    run_ids: tuple[int, ...] = ()
    numbers: PointNumbers | None = None  # --metric: the reverted release's values, called against the last good

    def to_json(self) -> dict:
        """The result's ``proof`` (``--format json``); the mode is the result's, not here."""
        return {"commit": self.commit, "onto": self.onto, "onto_commit": self.onto_commit, "merge": self.merge,
                "outcome": self.outcome.value if self.outcome else None, "runs": self.runs, "agree": self.agree,
                "verdict": self.verdict.value, "conflicts": list(self.conflicts), "detail": self.detail,
                "run_ids": list(self.run_ids), **({"numbers": self.numbers.to_json()} if self.numbers else {})}

    @classmethod
    def from_json(cls, d: Mapping, mode: Mode = Mode.REGRESSION) -> Proof:
        """A recorded proof (keys it does not know are passed over; missing ones take their defaults)."""
        conflicts = d.get("conflicts")
        return cls(str(d.get("commit") or ""), str(d.get("onto") or ""), str(d.get("onto_commit") or ""),
                   read_enum(ProofVerdict, d.get("verdict"), ProofVerdict.UNTESTABLE), mode, bool(d.get("merge")),
                   read_enum(Outcome, d.get("outcome"), None), read_int(d.get("runs")), read_int(d.get("agree")),
                   tuple(str(c) for c in conflicts) if isinstance(conflicts, list) else (), str(d.get("detail") or ""),
                   read_ints(d.get("run_ids")),
                   PointNumbers.from_json(d["numbers"]) if isinstance(d.get("numbers"), Mapping) else None)

    def describe(self) -> str:
        what = f"reverting {'merge ' if self.merge else ''}{self.commit[:10]}"
        what += " (against its first parent)" if self.merge else ""
        head = f"{what} on top of {self.onto}"
        counted = f"({self.agree} of {self.runs} run{'s' if self.runs != 1 else ''})"
        shown = self.outcome.value.upper() if self.outcome else "?"
        if self.verdict is ProofVerdict.CONFLICT:
            files = ", ".join(self.conflicts)
            return f"{head}: the revert does not apply cleanly (conflicts in {files}); not run"
        if self.verdict is ProofVerdict.UNTESTABLE:
            return f"{head}: could not be tested: {self.detail or 'no run'}"
        fix = self.mode is Mode.FIND_FIX
        if self.numbers is not None:  # a number: the line says what the reverted release measured
            ends = {ProofVerdict.PROVEN: "the number recovers: the commit is the cause",
                    ProofVerdict.NOT_SUFFICIENT: "the number does not recover: the commit is not sufficient"}
            return f"{head}: {self.detail} — {ends[self.verdict]}"
        if self.verdict is ProofVerdict.PROVEN:
            again = " again" if fix else ""
            return f"{head}: {shown}{again} {counted} — the commit is the {'fix' if fix else 'cause'}"
        alone = " alone" if fix else ""
        return f"{head}: still {shown} {counted} — the commit{alone} is not sufficient"


def judge(observed: Sequence[tuple[Side, Outcome]]) -> tuple[ProofVerdict, Outcome | None, int]:
    """The verdict of the reverted release's runs, the outcome that decided it, and how many
    runs said so.  One run like the new end is enough to say "not sufficient" (a flaky
    regression that comes back in the reverted tree is still there); "proven" needs every
    run that could be tested to behave like the old end."""
    new = [o for s, o in observed if s is Side.NEW]
    if new:
        return ProofVerdict.NOT_SUFFICIENT, new[0], len(new)
    old = [o for s, o in observed if s is Side.OLD]
    if old:
        return ProofVerdict.PROVEN, old[0], len(old)
    return ProofVerdict.UNTESTABLE, None, 0
