"""An environment bisection for people: the chain first, then the changes, the trials, and
each culprit's release (and commit) bisection as ``bisect`` reports it.

Nothing here prints; the CLI does.  Everything shown passes through ``outside.safe`` (redacted, inert, never markup).
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from dsbisect.render import numbers as render_numbers
from dsbisect.render import report as rep
from dsbisect.envdiff.result import EnvResult
from dsbisect.render.grid import md as _md
from dsbisect.core.model import Answer
from dsbisect.core.outside import clip, safe, safe_text
from dsbisect.core.paths import unlocal
from dsbisect.render.pointaxes import SHOWN
from dsbisect.envdiff.result import chain
from dsbisect.envdiff.settings import ends_word, is_package
from dsbisect.records.results import Result, TrialRun


def level1_result(r: EnvResult) -> Result:
    """The level-1 steps as a ``bisect`` result, for today's renderers (table, evidence)."""
    return Result(r.request.trial_request(), (), tuple(r.steps), r.verdict, message=r.message)


# ------------------------------------------------------------------ terminal


def _cause_of(r: EnvResult) -> dict[int, str]:
    """The culprit column: ``yes`` (one cause), or which cause a change belongs to."""
    if r.every is None or len(r.every.causes) < 2:
        return dict.fromkeys(r.culprits, "yes")
    return {i: f"cause {k + 1}" for k, c in enumerate(r.every.causes) for i in c.culprits}


def changes_table(r: EnvResult) -> Table:
    culprits = _cause_of(r)
    table = Table(header_style="bold", title=safe_text(f"{len(r.changes)} changes: {r.request.good_env.source} → "
                                                       f"{r.request.bad_env.source}"))
    for col in ("#", "change", "kind", "culprit"):
        table.add_column(col, overflow="fold")
    for i, c in enumerate(r.changes):
        table.add_row(Text(str(i)), safe_text(c.describe()), Text(c.kind.value), Text(culprits.get(i, "")),
                      style="bold red" if i in culprits else "")
    return table


def trials_table(r: EnvResult) -> Table:
    table = Table(header_style="bold", title="level 1: the ends, then the trials")
    for col in ("trial", "applied", "outcome", "side", "runs", "detail"):
        table.add_column(col, overflow="fold")
    for k, t in _numbered(r):
        table.add_row(Text(k), safe_text(t.label), Text(t.outcome.value.upper()), Text(t.side.value),
                      Text(" ".join(f"#{i}" for i in t.run_ids)), safe_text(clip(t.detail, 200)))
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
    if r.every is not None:  # the checks between the causes (the last one ends the chain)
        lines += [f"after cause {k + 1}: {r.every.check_line(k)}" for k in range(len(r.every.causes) - 1)]
    lines += [f"confounder: {x.describe()}" for x in r.confounders]
    lines += ["tied by dependency metadata (tried together): "
              + ", ".join(r.changes[i].name for i in u) for u in r.units]
    return [safe(x) for x in lines]


def env_renderable(r: EnvResult, command: str) -> Group:
    style = {Answer.FOUND: "bold green", Answer.AMBIGUOUS: "bold yellow"}.get(r.verdict, "bold red")
    parts: list = [safe_text(x, style="bold") for x in remedy_lines(r)]
    parts += [safe_text(chain(r), style=style), changes_table(r), trials_table(r)]
    parts += [safe_text(x, style="dim") for x in notes(r)]
    parts += [safe_text(x) for x in render_numbers.lines(r.numbers)]  # --metric: level 1's values per trial
    if r.releases:
        parts += [rep.bisect_renderable(res, command) for res in r.releases]
    else:
        parts.append(rep.bisect_renderable(level1_result(r), command))
    return Group(*parts)


# ------------------------------------------------------------------ Markdown


NOTES_SHOWN = 3  # notes beyond which the Markdown folds them


def env_markdown(r: EnvResult, command: str) -> str:
    """An issue body: the question, the chain in one bold line, the notes (folded when many),
    the changes and the trials folded (short cells: a trial named by the changes it applies, a
    few and a count), then each culprit's release bisection as ``bisect`` gives it."""
    req = r.request
    first = [m for m in r.remedies if m.still_bad][:1]
    lines = [f"**Still broken in the latest release: {_md(safe(m.package))} {_md(safe(m.latest or ''))}.**"
             for m in first] + [""] * bool(first)
    lines += [f"### dsbisect: {_md(req.good_env.source)} → {_md(req.bad_env.source)} "
              f"(environments, regress on {req.regress_on.value})", ""]
    lines += [f"- **{_md(x)}**" for x in remedy_lines(r)] + [""] * bool(r.remedies)
    lines += [f"**{_md(chain(r))}**", ""]
    said = notes(r)
    if len(said) > NOTES_SHOWN:
        lines += [f"<details><summary>{len(said)} notes</summary>", ""] + [f"- {_md(x)}" for x in said] + [
            "", "</details>", ""]
    else:
        lines += [f"- {_md(x)}" for x in said] + [""] * bool(said)
    lines += [safe(x) for x in render_numbers.markdown(r.numbers)]  # --metric: level 1's values per trial
    lines += ["<details><summary>" + f"{len(r.changes)} changes</summary>", "",
              "| # | change | kind | culprit |", "|---|---|---|---|"]
    culprits = _cause_of(r)
    lines += [f"| {i} | {_md(safe(c.describe()))} | {c.kind.value} | {f'**{culprits[i]}**' if i in culprits else ''} |"
              for i, c in enumerate(r.changes)]
    lines += ["", "</details>", "", f"<details><summary>level 1: {len(r.trials)} trials</summary>", "",
              "| trial | applied | outcome | side | runs | detail |", "|---|---|---|---|---|---|"]
    lines += [f"| {k} | {_md(_applied(r, k, t))} | {t.outcome.value.upper()} | {t.side.value} | "
              f"{' '.join(f'#{i}' for i in t.run_ids)} | {_md(safe(clip(t.detail, rep.CELL)))} |" for k, t in _numbered(r)]
    lines += ["", "</details>", ""]
    text = unlocal("\n".join(lines) + "\n")
    if r.releases:
        return text + "\n".join(rep.bisect_markdown(res, command) for res in r.releases)
    return text + rep.bisect_markdown(level1_result(r), command)


def _applied(r: EnvResult, k: str, t: TrialRun) -> str:
    """A trial in a few words: ``good env``, ``bad config`` (the ends, by what differs), or ``+ a 2.0,
    b 2.0, c 1.4 and 11 more``."""
    if k in ("good", "bad"):
        return f"{k} {ends_word(r.changes)}"
    moved = [r.changes[i] for i in sorted(t.applied) if i < len(r.changes)]
    words = [f"{c.name} {c.shown(c.bad)}" if not is_package(c)  # a setting: its bad value
             else f"{c.name} {c.bad.label}" if c.bad is not None else f"- {c.name}" for c in moved]
    more = f" and {len(words) - SHOWN} more" if len(words) > SHOWN else ""
    return "+ " + ", ".join(words[:SHOWN]) + more if words else t.label
