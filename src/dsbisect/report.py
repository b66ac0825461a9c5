"""Records -> renderables: rich tables for the terminal, Markdown for GitHub, JSON.

Nothing here prints; the CLI does.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text

from . import __version__
from .compat import describe as describe_shims
from .facts import describe_env, describe_host
from .model import Answer, Outcome, Stage
from .store import RunRecord

STYLE = {Outcome.PASS: "bold green", Outcome.FAIL: "bold red", Outcome.HANG: "bold magenta", Outcome.SKIP: "yellow"}
ICON = {Outcome.PASS: "✅", Outcome.FAIL: "❌", Outcome.HANG: "⏳", Outcome.SKIP: "⏭️"}
RANK = {Outcome.HANG: 0, Outcome.FAIL: 1, Outcome.PASS: 2, Outcome.SKIP: 3}


@dataclass(frozen=True)
class Cell:
    outcome: Outcome
    counts: tuple[tuple[Outcome, int], ...]
    seconds: float
    runs: tuple[RunRecord, ...]

    @property
    def text(self) -> str:
        name = self.outcome.value.upper()
        total = sum(n for _, n in self.counts)
        if total > 1:
            name += " " + " ".join(f"{o.value}:{n}" for o, n in self.counts)
        if self.outcome is not Outcome.SKIP:
            name += f" ({self.seconds:.0f} s)" if self.seconds >= 10 else f" ({self.seconds:.1f} s)"
        return name

    @property
    def last(self) -> RunRecord:
        return self.runs[-1]


@dataclass(frozen=True)
class Grid:
    cases: tuple[str, ...]
    rows: tuple[tuple[str, dict[str, Cell]], ...]  # point label -> case -> cell

    @property
    def cells(self) -> list[Cell]:
        return [c for _, row in self.rows for c in row.values()]


def cell(runs: list[RunRecord]) -> Cell:
    counts = Counter(r.outcome for r in runs)
    worst = min(counts, key=lambda o: RANK[o])
    ordered = tuple(sorted(counts.items(), key=lambda kv: RANK[kv[0]]))
    secs = sum(r.seconds or 0 for r in runs) / max(1, len(runs))
    return Cell(worst, ordered, secs, tuple(runs))


def grid(runs: list[RunRecord]) -> Grid:
    """Rows are points in first-seen order, columns cases; the latest case version wins."""
    latest_key: dict[str, str] = {}
    for r in runs:
        latest_key[r.case_name] = r.case_key
    runs = [r for r in runs if latest_key[r.case_name] == r.case_key and r.outcome is not None]
    cases = tuple(dict.fromkeys(r.case_name for r in runs))
    table: dict[str, dict[str, list[RunRecord]]] = {}
    for r in runs:
        table.setdefault(r.point.label, {}).setdefault(r.case_name, []).append(r)
    rows = tuple(
        (label, {case: cell(_current(rs)) for case, rs in per_case.items()}) for label, per_case in table.items()
    )
    return Grid(cases, rows)


def _current(runs: list[RunRecord]) -> list[RunRecord]:
    """Runs of one (case, point): a later SKIP or re-run replaces earlier attempts of the same number."""
    by_attempt: dict[int, RunRecord] = {}
    for r in runs:
        by_attempt[r.attempt] = r
    return [by_attempt[a] for a in sorted(by_attempt)]


# ------------------------------------------------------------------ terminal


def grid_table(g: Grid, title: str = "") -> Table:
    table = Table(title=title or None, show_lines=False, header_style="bold")
    table.add_column("point", no_wrap=True)
    for case in g.cases:
        table.add_column(case)
    for label, row in g.rows:
        cells = []
        for case in g.cases:
            c = row.get(case)
            cells.append(Text(c.text, style=STYLE[c.outcome]) if c else Text("—", style="dim"))
        table.add_row(label, *cells)
    return table


def reasons(g: Grid) -> list[tuple[str, str, Cell]]:
    out = []
    for label, row in g.rows:
        for case, c in row.items():
            if c.outcome is not Outcome.PASS:
                out.append((label, case, c))
    return out


def grid_renderable(g: Grid, title: str = "") -> Group:
    parts: list = [grid_table(g, title)]
    for label, case, c in reasons(g):
        r = c.last
        why = r.signature or r.reason or ""
        line = Text.assemble((f"{c.outcome.value.upper()} ", STYLE[c.outcome]), f"{case} · {label}: ", why)
        if r.run_dir:
            line.append(f"  [run {r.id}: {r.run_dir}]", style="dim")
        parts.append(line)
    env = environment_lines(g)
    if env:
        parts.append(Text("\n".join(env), style="dim"))
    return Group(*parts)


def environment_lines(g: Grid) -> list[str]:
    seen = []
    for c in g.cells:
        for r in c.runs:
            if r.facts.get("versions"):
                line = describe_env(r.facts)
                if line not in seen:
                    seen.append(line)
    return seen[:4] + shadow_lines([r for c in g.cells for r in c.runs])


def run_hosts(runs: list[RunRecord]) -> list[dict]:
    """The machines the runs ran on, as each run recorded it (never the machine reporting)."""
    seen: list[dict] = []
    for r in runs:
        h = r.facts.get("host")
        if h and h not in seen:
            seen.append(h)
    return seen


def host_lines(runs: list[RunRecord]) -> list[str]:
    hs = run_hosts(runs)
    if not hs:
        return ["host: not recorded (runs made by a dsbisect before 0.1.1)"] if runs else []
    lines = [describe_host(h) for h in hs[:4]]
    if len(hs) > 4:
        lines.append(f"… and {len(hs) - 4} more hosts")
    return lines


def shadow_lines(runs: list[RunRecord]) -> list[str]:
    """Base packages that point venvs replaced: worth knowing when compiled ones are involved."""
    shadows = {}
    for r in runs:
        for name, base, point in r.facts.get("shadowed", []):
            shadows.setdefault(name, (base, set()))[1].add(point)
    return [f"point venvs shadow the base's {n} {b} with {', '.join(sorted(ps))}" for n, (b, ps) in sorted(shadows.items())]


def envs_table(envs: list) -> Table:
    """``dsbisect envs list``: the cached venvs (``envs.CachedEnv``)."""
    table = Table(header_style="bold")
    for col in ("key", "mode", "requirements", "shadows", "MB", "built in"):
        table.add_column(col)
    for e in envs:
        shadows = ", ".join(f"{n} {b}→{p}" for n, b, p in e.shadowed)
        reqs = "; ".join(e.requirements) + (f" @{e.source}" if e.source else "")
        table.add_row(e.key, e.mode, reqs, shadows, f"{e.bytes / 1e6:.0f}", f"{e.seconds:.1f} s")
    return table


# ------------------------------------------------------------------ markdown


def grid_markdown(g: Grid, title: str, compat: tuple[str, ...] = ()) -> str:
    lines = [f"### {title}", ""]
    lines.append("| point | " + " | ".join(g.cases) + " |")
    lines.append("|---|" + "---|" * len(g.cases))
    for label, row in g.rows:
        cells = []
        for case in g.cases:
            c = row.get(case)
            cells.append(f"{ICON[c.outcome]} {c.text}" if c else "—")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    rs = reasons(g)
    if rs:
        lines.append("**Details**")
        lines.append("")
        for label, case, c in rs:
            r = c.last
            lines.append(f"- {c.outcome.value.upper()} `{case}` · {label}: {_md(r.signature or r.reason)} (run {r.id})")
        lines.append("")
    lines += _md_environment(g, compat)
    stacks = [_stack_details(c.last) for c in g.cells if c.outcome is Outcome.HANG]
    lines += [s for s in stacks if s]
    return "\n".join(lines).rstrip() + "\n"


def _md_environment(g: Grid, compat: tuple[str, ...]) -> list[str]:
    lines = ["**Environment**", ""]
    for env in environment_lines(g):
        lines.append(f"- {env}")
    for h in host_lines([r for c in g.cells for r in c.runs]):
        lines.append(f"- {h}")
    lines.append(f"- dsbisect {__version__}")
    for shim in describe_shims(compat):
        lines.append(f"- compat shim in use (a possible confounder): {shim}")
    lines.append("")
    return lines


def _stack_details(run: RunRecord) -> str:
    from .forensics import analyze, render_stack

    if not run.run_dir or not Path(run.run_dir).is_dir():
        return ""
    sig = analyze(Path(run.run_dir))
    if sig is None:
        return ""
    body = []
    for st in sig.ranks:
        if st.frames:
            body.append(f"rank {st.rank}:\n{render_stack(st)}")
    if not body:
        return ""
    text = "\n\n".join(body)
    return (f"<details><summary>Stacks of hung run {run.id} ({run.point.label})</summary>\n\n"
            f"```\n{text}\n```\n\n</details>\n")


def _md(s: str) -> str:
    return (s or "").replace("|", "\\|").replace("\n", " ")


# ---------------------------------------------------------------------- json


def run_json(r: RunRecord) -> dict:
    return {
        "id": r.id,
        "case": r.case_name,
        "point": r.point.label,
        "versions": dict(r.point.versions),
        "commit": r.point.source.commit if r.point.source else None,
        "attempt": r.attempt,
        "started": round(r.started, 3),
        "outcome": r.outcome.value if r.outcome else None,
        "exit_code": r.exit_code,
        "seconds": round(r.seconds or 0.0, 3),
        "reason": r.reason,
        "signature": r.signature,
        "run_dir": r.run_dir,
        "evidence": r.evidence,
        "environment": r.facts,
    }


def grid_json(g: Grid, compat: tuple[str, ...] = ()) -> dict:
    return {
        "dsbisect": __version__,
        "hosts": run_hosts([r for c in g.cells for r in c.runs]),
        "compat": list(compat),
        "cases": list(g.cases),
        "grid": [
            {"point": label, "cells": {case: {"outcome": c.outcome.value,
                                              "counts": {o.value: n for o, n in c.counts},
                                              "seconds": round(c.seconds, 3)} for case, c in row.items()}}
            for label, row in g.rows
        ],
        "runs": [run_json(r) for c in g.cells for r in c.runs],
    }


# ------------------------------------------------------------------ bisection


def _step_cell(step) -> Text:
    counts = ", ".join(f"{o.value} {n}" for o, n in Counter(r.outcome for r in step.runs).items())
    text = step.outcome.value.upper()
    if len(step.runs) > 1:
        text += f" ({counts})"
    return Text(text, style=STYLE[step.outcome])


def bisect_table(result) -> Table:
    table = Table(header_style="bold", title=f"dsbisect bisect {result.request.package} {result.request.good} {result.request.bad}")
    for col in ("stage", "point", "outcome", "verdict", "runs", "seconds", "detail"):
        table.add_column(col, overflow="fold")
    for s in result.steps:
        point = s.label if s.stage is Stage.RELEASE else f"{s.label} {s.subject[:50]}"
        table.add_row(s.stage.value, point, _step_cell(s), s.verdict.value, str(len(s.runs)), f"{s.seconds:.1f}",
                      (s.detail or "")[:160])
    return table


def bisect_summary(result) -> list[str]:
    """The final block, as plain lines (terminal and Markdown share it)."""
    req = result.request
    bad_word = "first fixed" if req.find_fix else "first bad"
    good_word = "last broken" if req.find_fix else "last good"
    lines = [f"verdict: {result.verdict.value}"]
    if result.message:
        lines.append(result.message)
    if result.last_good:
        lines.append(f"{good_word} release: {req.package} {result.last_good}")
    if result.first_bad:
        lines.append(f"{bad_word} release: {req.package} {result.first_bad}")
    if result.commit:
        c = result.commit
        lines.append(f"{good_word} commit: {c.last_good}")
        if c.first_bad:
            lines.append(f"{bad_word} commit: {c.first_bad} {c.subject}")
        else:
            lines.append(f"commit range left ambiguous by untestable commits: {', '.join(h[:10] for h in c.maybe)}")
        lines.append(f"commits between the releases: {c.count}")
    if result.commit_message:
        lines.append(result.commit_message)
    if result.confirm is not None and result.confirm.confirmed:
        lines.append(f"confirmed: {result.confirm.describe()}")
    first = _first_bad_step(result)
    if first is not None:
        lines.append(f"at the {bad_word.split()[1]} point: {first.detail or first.outcome.value}")
    return lines


def _first_bad_step(result):
    want = result.commit.first_bad if result.commit and result.commit.first_bad else None
    for s in reversed(result.steps):
        if want and s.commit == want:
            return s
        if not want and s.stage is Stage.RELEASE and s.version == result.first_bad:
            return s
    return None


def _bisect_env(result) -> list[str]:
    facts = next((r.facts for s in result.steps for r in s.runs if r.facts.get("versions")), {})
    req = result.request
    lines = []
    if facts:
        lines.append(describe_env(facts))
    pins = list(dict.fromkeys(req.case.pins + req.pins))
    if pins:
        lines.append("held pins: " + ", ".join(pins))
    lines += [f"compat shim (a possible confounder): {s}" for s in describe_shims(req.case.compat)]
    lines += shadow_lines([r for s in result.steps for r in s.runs])
    lines += host_lines([r for s in result.steps for r in s.runs])
    lines.append(f"dsbisect {__version__}; case {req.case.name} ({req.case.nproc} ranks, "
                 f"collective timeout {req.case.collective_timeout:g} s)")
    return lines


def bisect_renderable(result, command: str) -> Group:
    parts: list = [bisect_table(result)]
    style = {Answer.FOUND: "bold green", Answer.AMBIGUOUS: "bold yellow"}.get(result.verdict, "bold red")
    for i, line in enumerate(bisect_summary(result)):
        parts.append(Text(line, style=style if i == 0 else ""))
    parts.append(Text("\n".join(_bisect_env(result)), style="dim"))
    parts.append(Text(f"Reproduce with:\n  {command}"))
    return Group(*parts)


def bisect_markdown(result, command: str) -> str:
    req = result.request
    lines = [f"### dsbisect: {req.package} {req.good} → {req.bad} ({req.mode.value}, "
             f"regress on {req.regress_on.value})", ""]
    lines += ["| stage | point | outcome | verdict | runs | seconds | detail |", "|---|---|---|---|---|---|---|"]
    for s in result.steps:
        point = s.label if s.stage is Stage.RELEASE else f"`{s.label}` {_md(s.subject[:60])}"
        lines.append(f"| {s.stage.value} | {point} | {ICON[s.outcome]} {s.outcome.value.upper()} | {s.verdict.value} | "
                     f"{len(s.runs)} | {s.seconds:.1f} | {_md((s.detail or '')[:200])} |")
    lines += ["", "**Result**", ""] + [f"- {ln}" for ln in bisect_summary(result)]
    lines += ["", "**Environment**", ""] + [f"- {ln}" for ln in _bisect_env(result)]
    lines += ["", "Reproduce with:", "", "```", command, "```", ""]
    first = _first_bad_step(result)
    if first is not None and first.runs and first.outcome is Outcome.HANG:
        details = _stack_details(next(r for r in first.runs if r.outcome is Outcome.HANG))
        if details:
            lines.append(details)
    return "\n".join(lines).rstrip() + "\n"
