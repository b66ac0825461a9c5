"""An environment bisection in one line, as its JSON ``message`` and every report's summary
say it: ``37 changes; culprit transformers 4.36.2 -> 4.39.2 (6 trials); first bad release 4.37.0
(3 runs); first bad commit <hash> <subject> (6 runs)``.  Pure; outside text made safe.
"""

from __future__ import annotations

import typing

from packaging.utils import canonicalize_name

from dsbisect.core.mode import Side
from dsbisect.core.model import Answer, Stage
from dsbisect.core.outside import safe
from dsbisect.records.results import Result

if typing.TYPE_CHECKING:
    from dsbisect.envdiff.engine import EnvResult


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
