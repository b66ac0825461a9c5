"""An environment bisection for people: the chain first, then the changes, the trials, and
each culprit's release (and commit) bisection as ``bisect`` reports it.

Nothing here prints; the CLI does.  Everything shown passes through ``outside.safe`` (redacted, inert, never markup).
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from dsbisect.render import report as rep
from dsbisect.envdiff.engine import EnvResult
from dsbisect.render.grid import md as _md
from dsbisect.core.mode import Side
from dsbisect.core.model import Answer, Stage
from dsbisect.core.outside import safe, safe_text
from dsbisect.records.results import Result, TrialRun


def chain(r: EnvResult) -> str:
    """``37 changes; culprit transformers 4.36.2 -> 4.39.2 (6 trials); first bad release 4.37.0
    (3 runs); first bad commit <hash> <subject> (6 runs)``."""
    n = len(r.changes)
    head = f"{n} change{'s' if n != 1 else ''}"
    if not r.culprits:
        return safe(f"{head}; {r.verdict.value}: {r.message}" if r.message else f"{head}; {r.verdict.value}")
    trials = f"({len(r.trials)} trial{'s' if len(r.trials) != 1 else ''})"
    names = [r.changes[i].describe() for i in r.culprits if i not in r.required]
    needs = [r.changes[i].describe() for i in r.required]
    if needs:
        names[-1] += f" (with {' and '.join(needs)}, which it requires; harmless alone)"
    if len(names) == 1:
        parts = [f"{head}; culprit {names[0]} {trials}"]
    else:
        parts = [f"{head}; culprits (only together): {' and '.join(names)} {trials}"]
    if r.verdict is not Answer.FOUND:
        parts[0] += " — not exact"
    seen = {i for t in (*r.ends, *r.trials) for i in t.run_ids}  # level 2 reuses these: not counted again
    for res in r.releases:
        parts += _release_parts(res, len(r.releases) > 1, seen, res.request.mode is not r.request.mode)
    return safe("; ".join(parts))


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


def level1_result(r: EnvResult) -> Result:
    """The level-1 steps as a ``bisect`` result, for today's renderers (table, evidence)."""
    return Result(r.request.trial_request(), (), tuple(r.steps), r.verdict, message=r.message)


# ------------------------------------------------------------------ terminal


def changes_table(r: EnvResult) -> Table:
    culprits = set(r.culprits)
    table = Table(header_style="bold", title=safe_text(f"{len(r.changes)} changes: {r.request.good_env.source} → "
                                                       f"{r.request.bad_env.source}"))
    for col in ("#", "change", "kind", "culprit"):
        table.add_column(col, overflow="fold")
    for i, c in enumerate(r.changes):
        table.add_row(Text(str(i)), safe_text(c.describe()), Text(c.kind.value), Text("yes" if i in culprits else ""),
                      style="bold red" if i in culprits else "")
    return table


def trials_table(r: EnvResult) -> Table:
    table = Table(header_style="bold", title="level 1: the ends, then the trials")
    for col in ("trial", "applied", "outcome", "side", "runs", "detail"):
        table.add_column(col, overflow="fold")
    for k, t in _numbered(r):
        table.add_row(Text(k), safe_text(t.label), Text(t.outcome.value.upper()), Text(t.side.value),
                      Text(" ".join(f"#{i}" for i in t.run_ids)), safe_text(t.detail[:200]))
    return table


def _numbered(r: EnvResult) -> list[tuple[str, TrialRun]]:
    return [("good", r.ends[0])] * bool(r.ends) + [("bad", r.ends[1])] * (len(r.ends) > 1) + [
        (str(k + 1), t) for k, t in enumerate(r.trials)]


def remedy_lines(r: EnvResult) -> list[str]:
    """What to do today, first in every report: each culprit's pin and fix, as run."""
    return [safe(line) for m in r.remedies for line in m.lines()]


def notes(r: EnvResult) -> list[str]:
    lines = list(r.notes)
    if r.note:
        lines.append(r.note)
    lines += [f"not bisected: {s}" for s in r.skipped]
    lines += [f"confounder: {x.describe()}" for x in r.confounders]
    lines += ["tied by dependency metadata (tried together): "
              + ", ".join(r.changes[i].name for i in u) for u in r.units]
    return [safe(x) for x in lines]


def env_renderable(r: EnvResult, command: str) -> Group:
    style = {Answer.FOUND: "bold green", Answer.AMBIGUOUS: "bold yellow"}.get(r.verdict, "bold red")
    parts: list = [safe_text(x, style="bold") for x in remedy_lines(r)]
    parts += [safe_text(chain(r), style=style), changes_table(r), trials_table(r)]
    parts += [safe_text(x, style="dim") for x in notes(r)]
    if r.releases:
        parts += [rep.bisect_renderable(res, command) for res in r.releases]
    else:
        parts.append(rep.bisect_renderable(level1_result(r), command))
    return Group(*parts)


# ------------------------------------------------------------------ Markdown


def env_markdown(r: EnvResult, command: str) -> str:
    req = r.request
    first = [m for m in r.remedies if m.still_bad][:1]
    lines = [f"**Still broken in the latest release: {_md(safe(m.package))} {_md(safe(m.latest or ''))}.**"
             for m in first] + [""] * bool(first)
    lines += [f"### dsbisect: {_md(req.good_env.source)} → {_md(req.bad_env.source)} "
              f"(environments, regress on {req.regress_on.value})", ""]
    lines += [f"- **{_md(x)}**" for x in remedy_lines(r)] + [""] * bool(r.remedies)
    lines += [f"**{_md(chain(r))}**", ""]
    lines += [f"- {_md(x)}" for x in notes(r)] + [""] * bool(notes(r))
    lines += ["<details><summary>" + f"{len(r.changes)} changes</summary>", "",
              "| # | change | kind | culprit |", "|---|---|---|---|"]
    culprits = set(r.culprits)
    lines += [f"| {i} | {_md(safe(c.describe()))} | {c.kind.value} | {'**yes**' if i in culprits else ''} |"
              for i, c in enumerate(r.changes)]
    lines += ["", "</details>", "", f"<details><summary>level 1: {len(r.trials)} trials</summary>", "",
              "| trial | applied | outcome | side | runs | detail |", "|---|---|---|---|---|---|"]
    lines += [f"| {k} | {_md(safe(t.label))} | {t.outcome.value.upper()} | {t.side.value} | "
              f"{' '.join(f'#{i}' for i in t.run_ids)} | {_md(safe(t.detail[:200]))} |" for k, t in _numbered(r)]
    lines += ["", "</details>", ""]
    text = "\n".join(lines) + "\n"
    if r.releases:
        return text + "\n".join(rep.bisect_markdown(res, command) for res in r.releases)
    return text + rep.bisect_markdown(level1_result(r), command)
