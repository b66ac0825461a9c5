"""The revert proof of a bisection that found its first bad commit: that commit reverted on top
of a tree that shows the regression (the first bad release's tag, or a commit search's bad
end), built as a point of its own and run.  The answer stands whatever the proof shows (the
search's boundary was tested); the proof says whether the commit is what the regression comes
from.  The release ``Bisection`` and the ``CommitBisection`` both prove through ``prove``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from dsbisect.bisect.budget import BudgetSpent
from dsbisect.bisect.points import Points
from dsbisect.bisect.probe import Probe
from dsbisect.core.model import GitSource, Point, Stage
from dsbisect.envs import gitrepo
from dsbisect.records.proof import Proof, ProofVerdict, judge
from dsbisect.records.results import Result
from dsbisect.search.steps import Side


@dataclass(frozen=True)
class Onto:
    """Where the first bad commit is reverted: commit ``onto`` of the clone ``repo``, called
    ``name`` (a tag, a short hash); ``version`` is what the reverted tree's point leads to, and
    ``want`` the most runs it gets (it stops at the first that shows the regression)."""

    repo: Path
    name: str
    onto: str
    version: str
    want: int


def prove(result: Result, at: Onto, probe: Probe, points: Points, afford: Callable[..., None]) -> Proof:
    """Revert ``result``'s first bad commit on top of ``at`` and run that tree through ``probe``
    (``points`` makes its point; ``afford(point, want=n)`` raises ``BudgetSpent`` when the
    budget cannot pay for it: the proof is then not run, and says why)."""
    c, req = result.commit, probe.req
    probe.runner.progress("note", f"proof: reverting {c.first_bad[:10]} on top of {at.name}")
    rev = gitrepo.revert_tree(at.repo, c.first_bad, at.onto)
    base = Proof(c.first_bad, at.name, at.onto, ProofVerdict.UNTESTABLE, req.mode, rev.merge)
    if not rev.clean:
        verdict = ProofVerdict.CONFLICT if rev.conflicts else ProofVerdict.UNTESTABLE
        return replace(base, verdict=verdict, conflicts=rev.conflicts, detail=rev.error)
    src = GitSource(req.package, str(at.repo), at.onto, f"{at.name} with {c.first_bad[:10]} reverted",
                    f'Revert "{c.subject}"', reverted=c.first_bad, tree=rev.tree)
    point = points.commit(src, at.version)
    try:
        afford(point, want=at.want)
    except BudgetSpent as spent:  # the answer stands; the proof waits for a run with budget
        return replace(base, detail=f"not run: {spent.reason}")
    return _run(base, point, at.want, probe)


def _run(base: Proof, point: Point, want: int, probe: Probe) -> Proof:
    """The reverted tree's runs (until one shows the regression), judged."""
    runs = probe.runner.runs(probe.req.case, point, want=want,
                             enough=lambda rs: any(probe.side(probe.verdict(r)) is Side.NEW for r in rs))
    step = probe.step(point, runs, Stage.PROVE)
    verdict, outcome, agree = judge([(probe.side(probe.verdict(r)), r.outcome) for r in runs])
    return replace(base, verdict=verdict, outcome=outcome, runs=len(runs), agree=agree,
                   detail=step.detail if verdict is not ProofVerdict.PROVEN else "",
                   run_ids=tuple(r.id for r in runs))
