"""One run in full, for ``dsbisect show RUN_ID``: outcome, the command and its files, env,
signature, the failing rank's traceback, stacks, log tails.

Every line is whole when piped (a pipe or a file gets no cut at 80 columns: a log line's file
name and line number are at its end) and wraps on a terminal; outside text goes through
``outside.safe`` (redacted, inert).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from dsbisect.forensics.crash import Crash, read_crash
from dsbisect.forensics.proofrecord import ProofRecord
from dsbisect.envs.facts import describe_env, size
from dsbisect.core.files import PROOF_LIMIT, existing_dir, read_small
from dsbisect.render.grid import displayable, line
from dsbisect.render.htmlsource import rank_tables
from dsbisect.core.model import Outcome
from dsbisect.forensics.stuck import analyze, render_stack
from dsbisect.core.outside import safe_text
from dsbisect.render.report import STYLE
from dsbisect.core.rundir import RunDir, tail_text
from dsbisect.records.run import RunRecord


class RunView:
    """``render_run``'s renderable: ``piped`` None: decided by the console it is printed on."""

    def __init__(self, r: RunRecord, lines: int, piped: bool | None):
        self.run, self.lines, self.piped = displayable(r), lines, piped

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        piped = self.piped if self.piped is not None else not console.is_terminal
        yield from _head(self.run, piped)
        folder = existing_dir(self.run.run_dir)
        if folder is not None:
            yield from _folder_parts(self.run, folder, self.lines, piped)


def render_run(r: RunRecord, lines: int = 30, piped: bool | None = None) -> RunView:
    return RunView(r, lines, piped)


def _whole(t: Text, piped: bool) -> Text:
    """``t`` kept on one line when piped (never cut), folded under the terminal's width."""
    if piped:
        t.no_wrap, t.overflow = True, "ignore"
    else:
        t.no_wrap, t.overflow = False, "fold"
    return t


def _head(r: RunRecord, piped: bool) -> list:
    parts: list = [_whole(Text.assemble(
        (f"run {r.id}  ", "bold"),
        (r.outcome.value.upper() if r.outcome else r.status.value, STYLE.get(r.outcome, "")),
        (" (marked by hand)" if r.manual else "", "yellow"),
        safe_text(f"  {r.case_name} · {r.point.label}"),
    ), piped)]
    for k, v in _rows(r):
        parts.append(_whole(Text.assemble((f"  {k:<12}", "dim"), safe_text(v)), piped))
    for note in r.evidence.listed("notes"):
        parts.append(_whole(safe_text(f"  note: {note}", style="yellow"), piped))
    if r.evidence.escaped:
        parts.append(_whole(safe_text(f"  escaped the process tree, stopped by their tag: pid(s) "
                                      f"{', '.join(map(str, r.evidence.escaped))}", style="yellow"), piped))
    return parts


def _rows(r: RunRecord) -> list[tuple[str, str]]:
    rows = [
        ("attempt", str(r.attempt)),
        ("exit code", "—" if r.exit_code is None else str(r.exit_code)),
        ("seconds", f"{r.seconds:.1f}" if r.seconds is not None else "—"),
        ("pins", "; ".join(r.point.requirements()) or "—"),
        ("environment", describe_env(r.facts) if r.facts.versions else "—"),
        ("reason", r.reason or "—"),
        ("signature", r.signature or "—"),
        ("run folder", r.run_dir or "—"),
    ]
    if r.point.source:
        rows.insert(4, ("commit", f"{r.point.source.commit} {r.point.source.subject}"))
    ran = [("command", shlex.join(str(a) for a in r.facts.command))] if r.facts.command else []
    rows = ran + [("file", f) for f in _files(r)] + rows  # the line the user gave, and the files it names
    if r.manual:  # dsbisect mark, bisect --manual: a result given, not a run of dsbisect
        rows.insert(0, ("marked", f"{r.manual.mark.value} by hand" + (f": {r.manual.note}" if r.manual.note else "")))
    return rows


def _files(r: RunRecord) -> list[str]:
    """The files the command named, as recorded: path, size, digest and the kept copy."""
    out = []
    for item in r.facts.inputs or ():
        n = item.bytes
        copy = f", a copy in {item.copy}" if item.copy else ""
        out.append(f"{item.path} ({size(n) if n else '? bytes'}, sha256 {(item.sha256 or '?')[:16]}{copy})")
    return out


def _folder_parts(r: RunRecord, folder: Path, lines: int, piped: bool) -> list:
    hung = r.outcome is Outcome.HANG
    found = read_crash(folder) if r.outcome is Outcome.FAIL else Crash(None, ())
    parts = _deadlock_proof(folder, piped)
    parts += rank_tables(r)  # the rank × sequence-number table of a hang
    parts += _traceback(found, piped)
    parts += _stacks(folder, hung, r.started, found.first is not None, piped)
    parts += _tails(folder, lines, piped)
    return parts


def _heading(text: str, piped: bool, style: str):
    """A section's heading line, whole (a rule would cut a long log name at the edge)."""
    return line(f"── {text} ──", piped, style=style)


def _traceback(found: Crash, piped: bool) -> list:
    """The traceback of the rank that raised first, whole; a line for each other rank's."""
    if found.first is None:
        return []
    out: list = [_heading(f"traceback: {found.heading}", piped, "bold red")]
    out += [line(ln, piped) for ln in found.first.lines]
    out += [line(ln, piped, style="dim") for ln in found.other_lines()]
    return out


def _deadlock_proof(run_dir: Path, piped: bool) -> list:
    """The early deadlock verdict's proof and the two snapshots it stands on (``fr/proof.json``)."""
    path = RunDir(run_dir).deadlock_proof
    try:
        proof = ProofRecord.from_json(json.loads(read_small(path, PROOF_LIMIT)))
    except (OSError, ValueError):
        return []
    if proof is None:
        return []
    lines = [proof.text, ""]
    for snap in proof.snapshots:
        lines.append(f"request {snap.request} at {snap.at} s:")
        lines += [f"  rank {rank}: {state}" for rank, state in snap.by_rank()]
    lines.append(f"(answers in {path.parent.relative_to(run_dir)}/rank<R>.<request>.json)")
    return [_heading("deadlock proof", piped, "bold red"), *(line(ln, piped) for ln in lines)]


def _stacks(run_dir: Path, hung: bool, started: float, traceback: bool, piped: bool) -> list:
    """Where each rank was: for a hang, where it was stuck.  A run that ended otherwise shows
    no stack when a traceback says where it failed; else each rank's last stack sampled, under
    a heading that says when (a snapshot taken when the output went quiet, maybe while an op
    compiled: not where the run ended)."""
    if traceback and not hung:
        return []
    sig = analyze(run_dir)
    if sig is None:
        return []
    out: list = []
    for st in sig.ranks:
        if not st.frames:
            continue
        if hung:
            title, body = f"rank {st.rank} stack ({', '.join(st.sources)})", render_stack(st)
        else:
            at = _sampled_at(run_dir, st.rank, started)
            title = (f"rank {st.rank}: a stack sampled {at}before the run ended ({', '.join(st.sources)}); "
                     "not necessarily where it failed")
            body = "\n".join(render_stack(st).splitlines()[1:])  # no claim about a collective it failed in
        out.append(_heading(title, piped, "magenta" if hung else "dim"))
        out += [line(ln, piped) for ln in body.splitlines()]
    return out


def _sampled_at(run_dir: Path, rank: int, started: float) -> str:
    """``12 s into the run, `` from the newest stack file of the rank ("" when none is dated)."""
    times = []
    for path in RunDir(run_dir).stacks.glob(f"*rank{rank}.*"):
        try:
            times.append(path.stat().st_mtime)
        except OSError:
            continue
    if not times or not started:
        return ""
    return f"{max(0.0, max(times) - started):.0f} s into the run, "


def _tails(run_dir: Path, lines: int, piped: bool) -> list:
    out: list = []
    run = RunDir(run_dir)
    for path in [*run.rank_logs(), run.launcher_log]:
        text = tail_text(path, 256 << 10)
        if text is None:
            continue
        shown = text.rstrip("\n").split("\n")[-lines:] if lines > 0 else []  # a \r is shown, not a break
        # A rule and lines, not a panel: each line whole when piped, wrapped on a terminal.
        out.append(_heading(str(path.relative_to(run_dir)), piped, "dim"))
        out += [line(ln, piped) for ln in shown]
    return out
