"""One run in full, for ``dsbisect show RUN_ID``: outcome, env, signature, stacks, log tails."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Group
from rich.panel import Panel
from rich.rule import Rule
from rich.text import Text

from .facts import describe_env
from .files import existing_dir
from .grid import displayable
from .htmlsource import rank_tables
from .model import Outcome
from .forensics import analyze, render_stack
from .outside import safe_text
from .report import STYLE
from .rundir import RunDir, tail_text
from .records import RunRecord


def render_run(r: RunRecord, lines: int = 30) -> Group:
    r = displayable(r)
    parts: list = []
    head = Text.assemble(
        (f"run {r.id}  ", "bold"),
        (r.outcome.value.upper() if r.outcome else r.status.value, STYLE.get(r.outcome, "")),
        (" (marked by hand)" if r.manual else "", "yellow"),
        safe_text(f"  {r.case_name} · {r.point.label}"),
    )
    parts.append(head)
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
    if r.manual:  # dsbisect mark, bisect --manual: a result given, not a run of dsbisect
        rows.insert(0, ("marked", f"{r.manual.mark} by hand" + (f": {r.manual.note}" if r.manual.note else "")))
    for k, v in rows:
        parts.append(Text.assemble((f"  {k:<12}", "dim"), safe_text(v)))
    for note in r.evidence.listed("notes"):
        parts.append(safe_text(f"  note: {note}", style="yellow"))
    if r.evidence.escaped:
        parts.append(safe_text(f"  escaped the process tree, stopped by their tag: pid(s) "
                               f"{', '.join(map(str, r.evidence.escaped))}", style="yellow"))
    folder = existing_dir(r.run_dir)
    if folder is not None:
        parts += _deadlock_proof(folder)
        parts += rank_tables(r)  # the rank × sequence-number table of a hang
        parts += _stacks(folder, hung=r.outcome is Outcome.HANG)
        parts += _tails(folder, lines)
    return Group(*parts)


def _deadlock_proof(run_dir: Path) -> list:
    """The early deadlock verdict's proof and the two snapshots it stands on (``fr/proof.json``)."""
    path = RunDir(run_dir).deadlock_proof
    try:
        proof = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(proof, dict):
        return []
    lines = [str(proof.get("text", "")), ""]
    for snap in proof.get("snapshots") or []:
        if not isinstance(snap, dict):
            continue
        lines.append(f"request {snap.get('request')} at {snap.get('at')} s:")
        ranks = snap.get("ranks") if isinstance(snap.get("ranks"), dict) else {}
        for rank, state in sorted(ranks.items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else 0):
            lines.append(f"  rank {rank}: {state}")
    lines.append(f"(answers in {path.parent.relative_to(run_dir)}/rank<R>.<request>.json)")
    return [Panel(safe_text("\n".join(lines)), title="deadlock proof", title_align="left", border_style="red")]


def _stacks(run_dir: Path, hung: bool) -> list:
    """Where each rank was: for a hang, where it was stuck; otherwise only the last stacks seen
    (a snapshot taken when the output went quiet, which need not be where the run failed)."""
    sig = analyze(run_dir)
    if sig is None:
        return []
    out = []
    for st in sig.ranks:
        if not st.frames:
            continue
        if hung:
            title, body = f"rank {st.rank} stack ({', '.join(st.sources)})", render_stack(st)
        else:
            title = f"rank {st.rank}: last stack seen ({', '.join(st.sources)}), before the run ended"
            body = "\n".join(render_stack(st).splitlines()[1:])  # no claim about a collective it failed in
        out.append(Panel(safe_text(body), title=safe_text(title), title_align="left",
                         border_style="magenta" if hung else "dim"))
    return out


def _tails(run_dir: Path, lines: int) -> list:
    out = []
    run = RunDir(run_dir)
    for path in [*run.rank_logs(), run.launcher_log]:
        text = tail_text(path, 256 << 10)
        if text is None:
            continue
        text = "\n".join(text.rstrip("\n").split("\n")[-lines:]) if lines > 0 else ""  # a \r is shown, not a break
        # A rule and plain text, not a panel: long lines wrap instead of being cut at the edge.
        out += [Rule(safe_text(str(path.relative_to(run_dir))), align="left", style="dim"),
                safe_text(text, overflow="fold")]
    return out


