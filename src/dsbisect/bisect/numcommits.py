"""The commit step of a number (``--metric`` with ``--git-repo``, issue 38), and its revert proof.

Once the release search of a number found the first release that is worse, the commits between
the two releases' tags (``Bisection.commit_chain``) are searched as the releases were: the same
numeric search (``bisect.numeric``), its ends the tags' own builds, run interleaved first.  Its
answer is the commit step's; its values per commit are the ``commit`` part of the numbers.

The proof reverts the first worse commit on top of the first worse release's tag and measures
that tree beside the last good commit: proven when the reverted release's number recovers (not
worse than the last good commit's by the threshold, beyond the noise), not sufficient when it
stays worse (another commit of the release costs the number too), untestable when its runs do
not give the number or cannot tell by their cap.  The answer stands whatever the proof shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from dsbisect.bisect.numeric import Measure, bisect_numbers
from dsbisect.core.metric import Call
from dsbisect.core.model import Answer, GitSource, Outcome, Point, Stage, Verdict
from dsbisect.envs import gitrepo
from dsbisect.records.numbers import NOT_WORSE, UNSURE, WORSE, PointNumbers
from dsbisect.records.proof import Proof, ProofVerdict
from dsbisect.records.results import CommitResult, Result, Step
from dsbisect.search import numeric
from dsbisect.verdict.numbers import Judge, Summary

__all__ = ["commits_and_proof", "proof_call"]

PROOF_MIN_RUNS = 2  # as the pass/fail proof: one run is not enough to call a tree recovered


def commits_and_proof(bisection, result: Result, repo: Path) -> Result:
    """``result`` (a number's release answer, found) with its commit step and, when that found one
    commit and ``--no-prove`` was not given, the revert proof."""
    req = bisection.req
    chain, points, note = bisection.commit_chain(result, repo)
    labels = [c.short for c in chain]
    bisection.runner.progress("note", f"commit step: {len(chain) - 1} commits between {result.last_good} and "
                                      f"{result.first_bad}, measured as the releases were")
    found = bisect_numbers(bisection.runner, req, labels, points, Stage.COMMIT)
    numbers = replace(result.numbers, commit=found.numbers) if result.numbers else None
    result = replace(result, steps=result.steps + found.steps, numbers=numbers)
    if found.verdict not in (Answer.FOUND, Answer.AMBIGUOUS) or not found.first_bad:
        msg = "; ".join(x for x in (note, f"commit step: {found.message}") if x)
        return replace(result, commit_message=msg)
    at = {c.short: c for c in chain}
    first = at[found.first_bad]
    exact = found.verdict is Answer.FOUND
    cr = CommitResult(at[found.last_good].hash, first.hash if exact else None, first.subject if exact else "",
                      tuple(at[m].hash for m in found.maybe), len(chain) - 1, found.verdict)
    if numbers is not None and exact:
        numbers = replace(numbers, answer=f"{numbers.answer}, commit {first.short} ({first.subject})")
    result = replace(result, commit=cr, commit_message=note, numbers=numbers)
    if exact and req.prove:
        by = dict(zip(labels, points))
        result = _prove(bisection, result, repo, by[found.last_good], found)
    return result


def proof_call(judge: Judge, good: Sequence[float], reverted: Sequence[float], reference: Sequence[float],
               runs_left: bool) -> ProofVerdict | None:
    """The proof's verdict from the values so far: PROVEN when the reverted tree is surely not worse
    than the last good commit by the threshold, NOT_SUFFICIENT when it surely is, UNTESTABLE when
    the runs could not tell by their cap, None: run again."""
    if len(reverted) < PROOF_MIN_RUNS:
        return None if runs_left else ProofVerdict.UNTESTABLE
    c = judge(good, reverted, judge.spec.threshold.amount, reference)
    if c.call is Call.GOOD:
        return ProofVerdict.PROVEN
    if c.call is Call.BAD:
        return ProofVerdict.NOT_SUFFICIENT
    return None if runs_left else ProofVerdict.UNTESTABLE


def _prove(bisection, result: Result, repo: Path, good_point: Point, found: Result) -> Result:
    """Revert the first worse commit on the first worse release's tag, and measure it beside the
    last good commit until ``proof_call`` decides."""
    req, c = bisection.req, result.commit
    tag = gitrepo.tag_for(repo, req.package, result.first_bad)
    onto = gitrepo.resolve(repo, tag)
    bisection.runner.progress("note", f"proof: reverting {c.first_bad[:10]} on top of {tag}, measuring "
                                      f"{req.metric.label}")
    rev = gitrepo.revert_tree(repo, c.first_bad, onto)
    base = Proof(c.first_bad, tag, onto, ProofVerdict.UNTESTABLE, req.mode, rev.merge)
    if not rev.clean:
        verdict = ProofVerdict.CONFLICT if rev.conflicts else ProofVerdict.UNTESTABLE
        return replace(result, proof=replace(base, verdict=verdict, conflicts=rev.conflicts, detail=rev.error))
    src = GitSource(req.package, str(repo), onto, f"{tag} with {c.first_bad[:10]} reverted",
                    f'Revert "{c.subject}"', reverted=c.first_bad, tree=rev.tree)
    point = bisection.points.commit(src, result.first_bad)
    measure = Measure(bisection.runner, req, [good_point, point], [c.last_good[:10], "reverted"])
    judge, cap = Judge(req.metric), max(numeric.POINT_RUNS, req.repeat)
    reference = _values(found, found.candidates[0]) or ()
    values: tuple[list[float], list[float]] = ([], [])
    verdict = None
    while verdict is None:
        tried = [len(measure.probed.runs.get(k, [])) for k in (0, 1)]
        i = 1 if tried[1] < PROOF_MIN_RUNS or tried[1] <= tried[0] else 0
        got = measure(i)
        if got is None:  # a tree that gave no number: its runs say why
            break
        values[i].append(got)
        left = len(values[1]) < cap or len(values[0]) < cap
        verdict = proof_call(judge, values[0], values[1], reference or values[0], left)
    return _proved(result, base, measure, values, verdict, judge, reference)


def _proved(result: Result, base: Proof, measure: Measure, values, verdict: ProofVerdict | None,
            judge: Judge, reference: Sequence[float]) -> Result:
    runs = measure.probed.runs.get(1, [])
    unit, label = measure.probed.unit, judge.spec.label
    good, mine = Summary.of(values[0]) if values[0] else None, Summary.of(values[1]) if values[1] else None
    if verdict is None or mine is None or good is None:
        either = [r for k in (1, 0) for r in measure.probed.runs.get(k, [])]
        failed = next((r for r in either if r.outcome is not Outcome.PASS), None)
        why = (f"a run did not pass ({failed.outcome.value})" if failed else f"its runs gave no {label}")
        proof = replace(base, runs=len(runs), detail=why, run_ids=tuple(r.id for r in runs))
        return replace(result, proof=proof, steps=result.steps + _proof_steps(result, measure, Verdict.SKIP))
    c = judge(values[0], values[1], judge.spec.threshold.amount, reference or values[0])
    call = {ProofVerdict.PROVEN: NOT_WORSE, ProofVerdict.NOT_SUFFICIENT: WORSE}.get(verdict, UNSURE)
    nums = PointNumbers("reverted", tuple(values[1]), mine.median, mine.spread, call, c.effect)
    detail = (f"{label} {mine.describe(unit)} ({len(values[1])} runs) against the last good commit's "
              f"{good.describe(unit)} ({len(values[0])} runs)")
    if verdict is ProofVerdict.UNTESTABLE:
        detail += ": the runs cannot tell whether it recovers"
    agree = len(values[1]) if verdict is not ProofVerdict.UNTESTABLE else 0
    proof = replace(base, verdict=verdict, outcome=Outcome.PASS, runs=len(runs), agree=agree, detail=detail,
                    run_ids=tuple(r.id for r in runs), numbers=nums)
    step_verdict = {ProofVerdict.PROVEN: Verdict.GOOD, ProofVerdict.NOT_SUFFICIENT: Verdict.BAD}.get(verdict,
                                                                                                  Verdict.SKIP)
    return replace(result, proof=proof, steps=result.steps + _proof_steps(result, measure, step_verdict))


def _proof_steps(result: Result, measure: Measure, verdict: Verdict) -> tuple[Step, ...]:
    """The reverted tree's runs as the proof's step, and the last good commit's new runs (those
    the commit step had not made) as one more step of the commit stage."""
    c, proof_runs = result.commit, tuple(measure.probed.runs.get(1, []))
    src = measure.points[1].source
    out = []
    if proof_runs:
        out.append(Step(Stage.PROVE, "reverted", measure.points[1].version_of(result.request.package) or "",
                        src.commit, src.subject, verdict, proof_runs))
    known = {r.id for s in result.steps for r in s.runs}
    again = tuple(r for r in measure.probed.runs.get(0, []) if r.id not in known)
    if again:
        good_src = measure.points[0].source
        out.append(Step(Stage.COMMIT, c.last_good[:10], measure.points[0].version_of(result.request.package) or "",
                        good_src.commit if good_src else None, good_src.subject if good_src else "", Verdict.GOOD,
                        again))
    return tuple(out)


def _values(found: Result, label: str) -> tuple[float, ...] | None:
    if found.numbers is None:
        return None
    return next((p.values for p in found.numbers.points if p.label == label), None)
