"""Records -> renderables: rich tables for the terminal, Markdown for GitHub, JSON.

Nothing here prints; the CLI does.  The grid's layout is ``grid``'s; this module adds what
a report says around it (the command, the repro's files, the environment) and renders
bisections.  Everything shown passes through ``outside.safe`` (redacted, inert, never
markup); JSON through ``redact.redact_tree``.  The only I/O is reading run
folders (stacks, the copies of a command's files).
"""

from __future__ import annotations

import html
import re
import shlex
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from dsbisect import __version__
from dsbisect.render import nextstep
from dsbisect.render import gridnumbers
from dsbisect.render import numbers as render_numbers
from dsbisect.core.compat import describe as describe_shims
from dsbisect.envs.facts import describe_env, describe_host, size
from dsbisect.forensics.crash import Crash, read_crash
from dsbisect.core.files import existing_dir
from dsbisect.render.grid import ICON, RANK, STYLE, Cell, Grid, GridView, Variant, cell, grid, line, named
from dsbisect.render.grid import markdown as grid_tables_markdown
from dsbisect.render.grid import md as _md
from dsbisect.launch.launchers import line_for
from dsbisect.core.model import Answer, Outcome, Stage
from dsbisect.render.nextstep import NextStep
from dsbisect.core.outside import clip, safe, safe_text
from dsbisect.core.paths import unlocal
from dsbisect.core.redact import redact_tree
from dsbisect.records.proof import ProofVerdict
from dsbisect.records.run import Host, InputFile, RunRecord
from dsbisect.records.results import Result, Step

__all__ = ["ICON", "RANK", "STYLE", "Cell", "Grid", "bisect_markdown", "bisect_renderable", "cell", "envs_table",
           "grid", "grid_json", "grid_markdown", "grid_renderable", "named"]

CELL = 120  # characters of a detail in a Markdown table (the whole is the run's: show)
SHOW_LIMIT = 64 * 1024  # a kept copy of a command's file is shown in the Markdown below this size
LANG = {".py": "python", ".json": "json", ".yaml": "yaml", ".yml": "yaml", ".sh": "bash", ".toml": "toml",
        ".cfg": "ini", ".ini": "ini"}


# ------------------------------------------------------------------ terminal


def grid_renderable(g: Grid, title: str = "", piped: bool | None = None,
                    lines: Sequence[tuple[str, int]] = (), reproduce: str = "") -> Group:
    """One table per case, the reasons, the all-skip lines, then the environment; ``lines``
    ((text, indent): the store's bisections and their answers) last.  ``piped`` None: decided
    by the console it is printed on (not a terminal: signatures whole, one a line)."""
    env = environment_lines(g) + [h for h in host_lines(_runs(g)) if not h.startswith("host: not recorded")]
    again = [("Reproduce with:", 0), (reproduce, 2)] if reproduce else []
    return Group(GridView(g, title, piped), _Lines(manual_lines(_runs(g)), piped, "yellow"), _Lines(env, piped, "dim"),
                 _Answers(lines, piped), _Answers(again, piped, bold=False))


class _Answers:
    """(text, indent) lines under a blank one: a heading at indent 0 in bold."""

    def __init__(self, lines: Sequence[tuple[str, int]], piped: bool | None, bold: bool = True):
        self.lines, self.piped, self.bold = lines, piped, bold

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        piped = self.piped if self.piped is not None else not console.is_terminal
        for text, indent in self.lines:
            if indent == 0:
                yield Text("")
            yield line(text, piped, style="bold" if indent == 0 and self.bold else "", indent=indent)


class _Lines:
    """Plain lines that keep ``line``'s piped/terminal behaviour."""

    def __init__(self, lines: list[str], piped: bool | None, style: str = ""):
        self.lines, self.piped, self.style = lines, piped, style

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        piped = self.piped if self.piped is not None else not console.is_terminal
        for ln in self.lines:
            yield line(ln, piped, style=self.style)


def environment_lines(g: Grid) -> list[str]:
    seen = []
    for r in _runs(g):
        if r.facts.versions or r.facts.fingerprint:  # a skip before any import: its python
            text = describe_env(r.facts)
            if text not in seen:
                seen.append(text)
    return seen[:4] + index_lines(_runs(g)) + shadow_lines(_runs(g))


def index_lines(runs: list[RunRecord]) -> list[str]:
    """Where the runs' packages came from (``RunFacts.index``, one line each way)."""
    found = dict.fromkeys(r.facts.index for r in runs if r.facts.index)
    return [f"package index: {i}" for i in found]


def _runs(g: Grid) -> list[RunRecord]:
    return [r for c in g.cells for r in c.runs]


def run_hosts(runs: list[RunRecord]) -> list[Host]:
    """The machines the runs ran on, as each run recorded it (never the machine reporting)."""
    seen: list[Host] = []
    for r in runs:
        h = r.facts.host
        if h and h not in seen:
            seen.append(h)
    return seen


def host_lines(runs: list[RunRecord]) -> list[str]:
    hs = run_hosts(runs)
    if not hs:
        return ["host: not recorded (runs made by a dsbisect before 0.1.1)"] if any(
            r.manual is None for r in runs) else []
    lines = list(dict.fromkeys(describe_host(h) for h in hs[:4]))
    if len(hs) > 4:
        lines.append(f"… and {len(hs) - 4} more hosts")
    return lines


def shadow_lines(runs: list[RunRecord]) -> list[str]:
    """Base packages that point venvs replaced: worth knowing when compiled ones are involved."""
    shadows = {}
    for r in runs:
        for item in r.facts.shadowed or ():
            if isinstance(item, tuple) and len(item) == 3:  # name, base version, point version
                name, base, point = map(str, item)
                shadows.setdefault(name, (base, set()))[1].add(point)
    return [f"point venvs shadow the base's {n} {b} with {', '.join(sorted(ps))}" for n, (b, ps) in sorted(shadows.items())]


def envs_table(envs: list) -> Table:
    """``dsbisect envs list``: the cached venvs (``envs.CachedEnv``), a requirement a line and
    every cell folded rather than cut, so that at 80 columns nothing shown is lost."""
    table = Table(header_style="bold", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    rows = []
    for e in envs:
        shadows = "\n".join(f"{n} {b}→{p}" for n, b, p in e.shadowed)
        reqs = "\n".join((*e.requirements, *((f"@{e.source}",) if e.source else ())))
        rows.append((f"{e.key}\n{e.mode}", reqs, shadows, f"{e.bytes / 1e6:.0f}", f"{e.seconds:.1f} s"))
    for i, col in enumerate(("key, mode", "requirements", "shadows", "MB", "built in")):
        widest = max((len(line) for row in rows for line in row[i].splitlines() if not line.startswith("@")),
                     default=0)
        table.add_column(col, overflow="fold", width=max(9, min(widest, 32)) if i < 2 else None)
    for row in rows:
        table.add_row(*(safe_text(x) for x in row))
    return table


# ------------------------------------------------------------------ markdown


def grid_markdown(g: Grid, title: str, compat: tuple[str, ...] = (), above: Sequence[str] = (),
                  reproduce: str = "") -> str:
    """A GitHub issue body: ``above`` (Markdown lines: the bisections' answers), the tables, the
    command and its files, how to reproduce, the environment, the failures' tracebacks and the
    hangs' stacks."""
    lines = [f"### {title}", "", *above] + grid_tables_markdown(g) + [""]
    lines += ["Reproduce with:", "", _fence(reproduce), ""] if reproduce else []
    lines += [f"- {ln}" for ln in manual_lines(_runs(g))] + [""]
    lines += inputs_markdown(_runs(g))
    lines += ["**Environment**", ""] + [f"- {ln}" for ln in environment_lines(g) + host_lines(_runs(g))]
    lines.append(f"- dsbisect {__version__}")
    lines += [f"- compat shim in use (a possible confounder): {shim}" for shim in describe_shims(compat)]
    lines += [""] + topology_markdown(_runs(g))
    lines += tracebacks_markdown([c.shown for c in g.cells if c.outcome is Outcome.FAIL])
    for c in g.cells:
        if c.outcome is Outcome.HANG:
            lines += [_stack_details(c.shown), ""]
    return _join(lines)


MAX_TRACEBACKS = 6  # of an issue body: one per distinct exception


def tracebacks_markdown(failed: list[RunRecord]) -> list[str]:
    """The failed runs' tracebacks, each in a collapsed block: the rank that raised first, whole,
    and a line for each other rank that raised (one block per distinct exception)."""
    out: list[str] = []
    seen: set[str] = set()
    for run in failed:
        folder = existing_dir(run.run_dir)
        found = read_crash(folder) if folder is not None else None
        if found is None or found.first is None or found.first.error in seen or len(seen) >= MAX_TRACEBACKS:
            continue
        seen.add(found.first.error)
        out += [traceback_details(run.id, run.point.label, found), ""]
    return out


def traceback_details(run_id: int, point: str, found: Crash) -> str:
    """One ``<details>`` block: ``Traceback of run 6 (dsb-toy 1.1.0): rank 0 raised first (…)``."""
    others = "".join(f"\n- {_md(o)}" for o in found.other_lines())
    return (f"<details><summary>Traceback of run {run_id} ({html.escape(point, quote=False)}): {html.escape(found.heading, quote=False)}"
            f"</summary>\n\n{_fence(chr(10).join(found.first.lines), 'pytb')}\n{others}\n\n</details>")


def _join(lines: list[str]) -> str:
    """The Markdown, redacted, its paths as a published report shows them (``paths.unlocal``),
    with no run of blank lines (blocks are single items: their content is left as it is)."""
    out: list[str] = []
    for ln in lines:
        ln = ln.rstrip("\n") if ln.strip() else ""
        if ln or (out and out[-1]):
            out.append(ln)
    return unlocal(safe("\n".join(out).rstrip() + "\n"))


def inputs_markdown(runs: list[RunRecord]) -> list[str]:
    """The command the runs ran (``RunFacts.command``) and the files it names (``RunFacts.inputs``):
    a kept copy under 64 KB in a collapsed block, else its name and hash."""
    commands: dict[str, list[str]] = {}
    inputs: dict[tuple, tuple[InputFile, RunRecord]] = {}
    for r in runs:
        cmd = r.facts.command
        if cmd:
            commands.setdefault(shlex.join(str(a) for a in cmd), []).append(r.case_name)
        for item in r.facts.inputs or ():
            if item.path:
                inputs.setdefault((item.path, item.sha256), (item, r))
    out: list[str] = []
    if commands:
        out += ["**Command**", ""]
        for cmd, cases in commands.items():
            if len(commands) > 1:
                out += [", ".join(f"`{c}`" for c in dict.fromkeys(cases)) + ":", ""]
            out += [_fence(cmd, "sh"), ""]
    if inputs:
        out += ["**Script and config files**", ""]
        for item, r in inputs.values():
            block = _input_markdown(item, r)
            out += ["", block, ""] if block.startswith("<details>") else [block]
        out.append("")
    return out


def _input_markdown(item: InputFile, run: RunRecord) -> str:
    path = item.path or ""
    sha = item.sha256 or "?"
    n = item.bytes  # None: an odd record, no size
    about = f"{size(n) if n else '? bytes'}, sha256 {sha[:16]}"
    text, why = _read_copy(item, run)
    if text is None:
        return f"- `{path}` ({size(n) if n else '? bytes'}, sha256 {sha}): {why}"
    return (f"<details><summary>{html.escape(path)} ({about})</summary>\n\n"
            f"{_fence(text, LANG.get(Path(path).suffix.lower(), ''))}\n\n</details>")


def _read_copy(item: InputFile, run: RunRecord) -> tuple[str | None, str]:
    """The kept copy's text, or None and why it is not shown."""
    copy = item.copy
    if not copy:
        return None, "no copy kept"
    if not run.run_dir:
        return None, "the run's folder is not recorded"
    base = Path(run.run_dir).resolve()
    path = (base / str(copy)).resolve()
    if not path.is_relative_to(base):
        return None, "its copy lies outside the run folder: not read"
    try:
        n = path.stat().st_size
        if n >= SHOW_LIMIT:
            return None, f"over {size(SHOW_LIMIT)}: not shown (a copy is in run {run.id}'s folder)"
        return path.read_bytes().decode("utf-8"), ""
    except UnicodeDecodeError:
        return None, f"not text: not shown (a copy is in run {run.id}'s folder)"
    except OSError:
        return None, "its copy is gone from the run folder"


def _fence(text: str, lang: str = "") -> str:
    ticks = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def topology_markdown(runs: list[RunRecord]) -> list[str]:
    """Each recorded host's ``nvidia-smi topo -m``, collapsed."""
    out = []
    for h in run_hosts(runs)[:4]:
        if h.topology:
            name = html.escape(h.name or "the host")
            out += [(f"<details><summary>GPU topology of {name} (nvidia-smi topo -m)</summary>\n\n"
                     f"{_fence(h.topology)}\n\n</details>"), ""]
    return out


def _stack_details(run: RunRecord) -> str:
    from dsbisect.forensics.stuck import analyze, render_stack

    if existing_dir(run.run_dir) is None:
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
    return (f"<details><summary>Stacks of hung run {run.id} ({html.escape(run.point.label)})</summary>\n\n"
            f"{_fence(text)}\n\n</details>")


# ---------------------------------------------------------------------- json


# Kept in run.json and the store (issue 38) but not yet in the pinned ``--format json`` of a run
# (tests/cli/test_contract.py): a bisection's JSON carries the numbers it used under "numbers".
_UNPINNED = {"evidence": ("readings", "readings_dropped"), "environment": ("conditions",)}


def _pinned(part: str, d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in _UNPINNED[part]}


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
        "evidence": _pinned("evidence", r.evidence.to_json()),
        "environment": _pinned("environment", r.facts.to_json()),
        "manual": r.evidence.manual,  # good/bad/skip: marked by hand (dsbisect mark), not run by dsbisect
    }


def grid_json(g: Grid, compat: tuple[str, ...] = ()) -> dict:
    label_of = {(i, v.name): v.label for v in g.variants for i in v.run_ids}
    return redact_tree({
        "dsbisect": __version__,
        "hosts": [h.to_json() for h in run_hosts(_runs(g))],
        "compat": list(compat),
        "cases": list(g.cases),
        "grid": [
            {"point": label, "cells": {case: {"outcome": c.outcome.value,
                                              "counts": {o.value: n for o, n in c.counts},
                                              "seconds": round(c.seconds, 3),
                                              "run": c.shown.id} | gridnumbers.cell_json(c)
                              for case, c in row.items()}}
            for label, row in g.rows
        ],
        "variants": [variant_json(v) for v in g.variants],
        "runs": [run_json(r) | {"variant": label_of.get((r.id, r.case_name), r.case_name)} for r in _all_runs(g)],
    })


def variant_json(v: Variant) -> dict:
    return {"case": v.label, "name": v.name, "case_key": v.case_key, "differs": list(v.differs),
            "earlier_inputs": v.earlier, "run_ids": list(v.run_ids), "same_as": list(v.same_as)}


def _all_runs(g: Grid) -> list[RunRecord]:
    """Every run of the grid: those of its cells in the grid's order, then those a later attempt stands for."""
    shown = _runs(g)
    ids = {(r.id, r.case_name) for r in shown}
    return shown + [r for r in g.runs if (r.id, r.case_name) not in ids]


# ------------------------------------------------------------------ bisection


def manual_lines(runs: list[RunRecord]) -> list[str]:
    """One line per run marked by hand: its result was given, not run by dsbisect."""
    return [f"#{r.id} {r.case_name} · {r.point.label}: {r.outcome.value.upper()} (marked by hand"
            + (f": {r.manual.note})" if r.manual.note else ")") for r in runs if r.manual]


def _step_cell(step: Step) -> Text:
    counts = ", ".join(f"{o.value} {n}" for o, n in _counts(step))
    text = step.outcome.value.upper()
    if len(step.tally.run_ids) > 1:
        text += f" ({counts})"
    return Text(text + _by_hand(step), style=STYLE[step.outcome])


def _counts(step: Step) -> list[tuple[Outcome, int]]:
    """The step's outcomes in the order its runs first showed them (the recorded tally's order when read back)."""
    if step.runs:
        return list(Counter(r.outcome for r in step.runs).items())
    return list(step.tally.counts)


def _by_hand(step: Step) -> str:
    return " (marked by hand)" if step.tally.manual else ""


def _run_ids(step: Step) -> str:
    ids = list(step.tally.run_ids)
    if len(ids) > 3:
        return f"#{ids[0]}…#{ids[-1]} ({len(ids)})"
    return " ".join(f"#{i}" for i in ids)


def _point(step: Step, width: int) -> Text:
    return safe_text(step.label if step.stage is Stage.RELEASE else f"{step.label} {step.subject[:width]}")


def bisect_table(result: Result, detail: bool = True) -> Table:
    """The steps; ``detail``: with each step's reason in a column (a wide terminal)."""
    req = result.request
    table = Table(header_style="bold", title=safe_text(f"dsbisect bisect {req.package} {req.good} {req.bad}"))
    for col in ("stage", "point", "outcome", "verdict", "runs", "seconds") + (("detail",) if detail else ()):
        table.add_column(col, overflow="fold")
    for s in result.steps:
        row = [Text(s.stage.value), _point(s, 50), _step_cell(s), Text(s.verdict.value), Text(_run_ids(s)),
               Text(f"{s.seconds:.1f}")]
        table.add_row(*row, *((safe_text(clip_words(s.detail or "", 160)),) if detail else ()))
    return table


class BisectView:
    """The bisection for a terminal or a pipe: below 120 columns, or piped, each step's reason
    goes under the table on lines of its own (whole when piped) instead of a narrow column."""

    def __init__(self, result: Result, command: str, piped: bool | None = None, after: NextStep | None = None):
        self.result, self.command, self.piped, self.after = result, command, piped, after

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        piped = self.piped if self.piped is not None else not console.is_terminal
        wide = not piped and options.max_width >= 120
        result = self.result
        yield bisect_table(result, detail=wide)
        if not wide:
            for s in result.steps:
                if s.detail and s.outcome is not Outcome.PASS:
                    yield line(f"{s.label} {s.outcome.value.upper()} {_run_ids(s)}:", piped, style=STYLE[s.outcome])
                    yield line(s.detail, piped, indent=2)
        style = {Answer.FOUND: "bold green", Answer.AMBIGUOUS: "bold yellow"}.get(result.verdict, "bold red")
        doubt = _proof_doubt(result)
        for i, text in enumerate(bisect_summary(result)):
            yield line(text, piped, style=style if i == 0 else ("bold yellow" if text == doubt else ""))
        for text in _bisect_env(result):
            yield line(text, piped, style="dim")
        yield Text("Reproduce with:")
        yield line(self.command, piped, indent=2)
        for text in nextstep.lines(self.after) if self.after else ():
            yield line(text.strip(), piped, indent=2) if text.startswith(" ") else line(text, piped, style="bold")


def bisect_summary(result: Result) -> list[str]:
    """The final block, as plain lines (terminal and Markdown share it)."""
    req = result.request
    bad_word, good_word = req.mode.first_new, req.mode.last_old
    lines = [f"verdict: {result.verdict.value}"]
    if result.message:
        lines.append(result.message)
    lines += render_numbers.lines(getattr(result, "numbers", None))
    if result.regression is not None and result.regression.describe():
        lines.append(result.regression.describe())
    lines += [d for d in result.different if d not in result.message]
    if result.last_good:
        lines.append(f"{good_word} release: {req.package} {result.last_good}")
    if result.first_bad:
        lines.append(f"{bad_word} release: {req.package} {result.first_bad}")
    if result.commit:
        c = result.commit
        lines.append(f"{good_word} commit: {c.last_good}")
        if c.first_bad:
            lines.append(f"{bad_word} commit: {c.first_bad} {c.subject}")
            if result.proof is not None:  # the revert proof, right under the commit it is about
                lines.append(result.proof.describe())
        elif c.verdict is not Answer.UNFINISHED:  # an unfinished search's message names what is left
            lines.append(f"commit range left ambiguous by untestable commits: {', '.join(h[:10] for h in c.maybe)}")
        lines.append(f"commits between the releases: {c.count}" if result.last_good else f"commits in the range: {c.count}")
    if result.commit_message:
        lines.append(result.commit_message)
    if result.confirm is not None and result.confirm.confirmed:
        lines.append(f"confirmed: {result.confirm.describe()}")
    lines += [c.describe() for c in getattr(result, "confidence", ()) if c.sure]  # at the cap: the message says it
    if result.good_end:
        lines.append(result.good_end)
    lines += [f"not tested: {c}" for c in result.caveats]  # the answer may lie there
    first = _first_bad_step(result)
    said = first.detail or first.outcome.value if first is not None else ""
    if first is not None and getattr(result, "numbers", None) is None and not any(said in ln for ln in lines):  # once: the regression's line may say it
        lines.append(f"at the {bad_word.split()[1]} point: {said}")
    return [safe(ln) for ln in lines]


def _proof_doubt(result: Result) -> str | None:
    """The proof's line when it did not prove the commit (said loudly; the answer stands)."""
    p = result.proof
    return safe(p.describe()) if p is not None and p.verdict is not ProofVerdict.PROVEN else None


def _first_bad_step(result: Result) -> Step | None:
    want = result.commit.first_bad if result.commit and result.commit.first_bad else None
    for s in reversed(result.steps):
        if want and s.commit == want and s.stage is not Stage.PROVE:
            return s
        if not want and s.stage is Stage.RELEASE and s.version == result.first_bad:
            return s
    return None


def _bisect_runs(result: Result) -> list[RunRecord]:
    return result.runs


def _bisect_env(result: Result) -> list[str]:
    facts = next((r.facts for r in _bisect_runs(result) if r.facts.versions), None)
    req = result.request
    lines = []
    if facts:
        lines.append(describe_env(facts))
    pins = list(dict.fromkeys(req.case.pins + req.pins))
    if pins:
        lines.append("held pins: " + ", ".join(pins))
    lines += [f"compat shim (a possible confounder): {s}" for s in describe_shims(req.case.compat)]
    lines += index_lines(_bisect_runs(result)) + shadow_lines(_bisect_runs(result))
    lines += host_lines(_bisect_runs(result))
    ranks = line_for(req.case).ranks(req.case, cuda=bool(facts) and facts.accelerator == "cuda")
    lines.append(f"dsbisect {__version__}; case {req.case.name} ({ranks.describe()}, "
                 f"collective timeout {req.case.collective_timeout:g} s)")
    return [safe(ln) for ln in lines]


def bisect_renderable(result: Result, command: str, piped: bool | None = None,
                      after: NextStep | None = None) -> Group:
    """``after``: the way on from a release answer (nextstep), shown under the command."""
    return Group(BisectView(result, command, piped, after))


def bisect_markdown(result: Result, command: str, after: NextStep | None = None) -> str:
    req = result.request
    lines = [f"### dsbisect: {req.package} {req.good} → {req.bad} ({req.mode.value}, "
             + f"regress on {_rule(result)})", ""]
    lines += ["| stage | point | outcome | verdict | runs | seconds | detail |", "|---|---|---|---|---|---|---|"]
    for s in result.steps:
        point = s.label if s.stage is Stage.RELEASE else f"`{s.label}` {_md(s.subject[:60])}"
        lines.append(f"| {s.stage.value} | {point} | {ICON[s.outcome]} {s.outcome.value.upper()}{_by_hand(s)} | {s.verdict.value} | "
                     f"{_run_ids(s)} | {s.seconds:.1f} | {_md(clip_words(s.detail or '', CELL))} |")
    lines += [""] + render_numbers.markdown(result.numbers)
    doubt = _proof_doubt(result)
    lines += ["**Result**", ""] + [f"- **{ln}**" if ln == doubt else f"- {ln}" for ln in bisect_summary(result)]
    lines += ["", "Reproduce with:", "", _fence(command), ""]
    if after is not None:
        lines += ["Next: find the commit", "", _fence(f"{after.clone}\n{after.rerun}", "bash"), ""]
        lines += [f"Changes between the releases: {after.compare}", ""] if after.compare else []
    lines += inputs_markdown(_bisect_runs(result))
    lines += ["**Environment**", ""] + [f"- {ln}" for ln in _bisect_env(result)] + [""]
    lines += topology_markdown(_bisect_runs(result))
    first = _first_bad_step(result)
    if first is not None and first.runs and first.outcome is Outcome.HANG:
        lines.append(_stack_details(next(r for r in first.runs if r.outcome is Outcome.HANG)))
    if first is not None and first.outcome is Outcome.FAIL:
        lines += tracebacks_markdown([r for r in first.runs if r.outcome is Outcome.FAIL][:1])
    return _join(lines)


def _rule(result: Result) -> str:
    regression = result.regression
    if regression is None or regression.asked is regression.regress_on:
        return result.request.regress_on.value
    return f"{regression.regress_on.value}, from {regression.asked.value}"


clip_words = clip  # the one cut at a word's end (outside.clip)
