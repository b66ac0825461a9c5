"""One run in full, for ``dsbisect show RUN_ID``: outcome, env, signature, stacks, log tails."""

from __future__ import annotations

from pathlib import Path

from rich.console import Group
from rich.panel import Panel
from rich.text import Text

from .facts import describe_env
from .forensics import analyze, render_stack
from .report import STYLE
from .rundir import RunDir, tail_text
from .store import RunRecord


def render_run(r: RunRecord, lines: int = 30) -> Group:
    parts: list = []
    head = Text.assemble(
        (f"run {r.id}  ", "bold"),
        (r.outcome.value.upper() if r.outcome else r.status.value, STYLE.get(r.outcome, "")),
        f"  {r.case_name} · {r.point.label}",
    )
    parts.append(head)
    rows = [
        ("attempt", str(r.attempt)),
        ("exit code", "—" if r.exit_code is None else str(r.exit_code)),
        ("seconds", f"{r.seconds:.1f}" if r.seconds is not None else "—"),
        ("pins", "; ".join(r.point.requirements()) or "—"),
        ("environment", describe_env(r.facts) if r.facts.get("versions") else "—"),
        ("reason", r.reason or "—"),
        ("signature", r.signature or "—"),
        ("run folder", r.run_dir or "—"),
    ]
    if r.point.source:
        rows.insert(4, ("commit", f"{r.point.source.commit} {r.point.source.subject}"))
    for k, v in rows:
        parts.append(Text.assemble((f"  {k:<12}", "dim"), v))
    for note in r.evidence.get("notes", []):
        parts.append(Text(f"  note: {note}", style="yellow"))
    if r.run_dir and Path(r.run_dir).is_dir():
        parts += _stacks(Path(r.run_dir))
        parts += _tails(Path(r.run_dir), lines)
    return Group(*parts)


def _stacks(run_dir: Path) -> list:
    sig = analyze(run_dir)
    if sig is None:
        return []
    out = []
    for st in sig.ranks:
        if st.frames:
            title = f"rank {st.rank} stack ({', '.join(st.sources)})"
            out.append(Panel(render_stack(st), title=title, title_align="left", border_style="magenta"))
    return out


def _tails(run_dir: Path, lines: int) -> list:
    out = []
    run = RunDir(run_dir)
    for path in [*run.rank_logs(), run.launcher_log]:
        text = tail_text(path, 256 << 10)
        if text is None:
            continue
        text = "\n".join(text.splitlines()[-lines:])
        out.append(Panel(Text(text), title=str(path.relative_to(run_dir)), title_align="left", border_style="dim"))
    return out
