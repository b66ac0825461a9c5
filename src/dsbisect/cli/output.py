"""What the commands print: stdout is the report, stderr progress and errors.

No text printed is ever read as markup or emoji codes: what dsbisect styles, it styles with
``Text``; outside text (a path, a case name, a reason) is made safe first.  Also here: the
report formats, the ``-o`` file (checked before any work, written after), the grid that ``run``
and ``report`` print, the frontend a job talks to the user through, and the command line that
reproduces a report.
"""

from __future__ import annotations

import json
import shlex
import sys
import typing
from pathlib import Path

import typer
from rich.console import Console
from rich.text import Text

from dsbisect.cli import writeguard
from dsbisect.cli.options import Format, Shown
from dsbisect.core import outputs
from dsbisect.core.outside import safe_text
from dsbisect.core.redact import redact
from dsbisect.render import report as rep
from dsbisect.render.progress import ProgressUI, err  # stderr: progress and errors share one console
from dsbisect.run.settings import Frontend

if typing.TYPE_CHECKING:
    from dsbisect.core.model import Case
    from dsbisect.records.run import RunRecord
    from dsbisect.render.answers import Answered

out = Console(soft_wrap=True, markup=False, emoji=False, highlight=False)


def say_error(message: str, label: str = "error:") -> None:
    """One red-labelled line on stderr; the message is outside text (safe, never markup)."""
    err.print(Text.assemble((label, "bold red"), " " if message else "", safe_text(message)))


def say(text: str) -> None:
    """A line of progress or a note on stderr (outside text: safe, never markup)."""
    err.print(safe_text(text))


def say_notes(notes: typing.Iterable[str]) -> None:
    """What of the user's pip/uv settings dsbisect leaves out, once the input is checked (the
    commands that open a runner say it through their progress lines)."""
    for note in notes:
        say(f"note: {note}")


def frontend(quiet: bool = False) -> Frontend:
    """How a job talks to the user here: progress on stderr (none with ``quiet``), notes, and
    questions (``bisect --manual``) asked on stderr."""
    return Frontend(display=lambda total: ProgressUI(quiet, total=total), say=say,
                    ask=lambda text: typer.prompt(text, err=True))


def check_output(path: Path, flag: str = "--output") -> None:
    """A file we may write: in a writable folder, and never the store's, an input or another output."""
    writeguard.check_output(path, flag)


def write_output(text: str, path: Path, flag: str = "--output") -> None:
    outputs.write_text(path, text, flag)


def emit(text: str, output: Path | None) -> None:
    out.print(text, markup=False, highlight=False, end="" if text.endswith("\n") else "\n")
    if output:
        write_output(text, output)


def emit_html(page: str, output: Path | None) -> None:
    """The page into -o (its name said on stderr), else on stdout for a pipe."""
    if output is None:
        emit(page, None)
        return
    write_output(page, output)
    say(f"HTML report: {output}")


def print_grid(records: typing.Sequence[RunRecord], title: str, shown: Shown, cases: typing.Sequence[Case],
               html_link: str = "", bisections: typing.Sequence[Answered] | None = None, reproduce: str = "") -> None:
    """The grid; ``bisections`` (``report``'s): their answers above it; ``reproduce``: the
    command line that runs it again, under it (not in JSON)."""
    from dsbisect.render import answers

    from dsbisect.render.gridnumbers import with_metrics

    g = with_metrics(rep.grid(list(records)), {c.name: c.metric for c in cases if c.metric})
    compat = tuple(dict.fromkeys(s for c in cases for s in c.compat))
    found = list(bisections or [])
    markdown = lambda: rep.grid_markdown(g, title, compat, answers.markdown_lines(found), reproduce) + (  # noqa: E731
        f"\n{html_link}\n" if html_link else "")
    if shown.fmt is Format.json:
        data = rep.grid_json(g, compat) | ({"bisections": answers.to_json(found)} if bisections is not None else {})
        emit(json.dumps(data, indent=2) + "\n", shown.output)
    elif shown.fmt is Format.markdown:
        emit(markdown(), shown.output)
    else:
        out.print(rep.grid_renderable(g, title, lines=answers.terminal_lines(found), reproduce=reproduce))
        if shown.output:
            write_output(markdown(), shown.output)


def reproduce_args(argv: list[str]) -> list[str]:
    """The command line without the options that only shape the output."""
    kept, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("--format", "-o", "--output"):
            skip = True
            continue
        if a in ("-q", "--quiet") or a.startswith(("--format=", "--output=")):
            continue
        kept.append(a)
    return kept


def reproduce_line(fallback: str) -> str:
    """The command line as typed, without the options that only shape the output (credentials in
    URLs hidden); ``fallback`` when dsbisect was not started as ``dsbisect`` (a test, an import)."""
    if sys.argv and "dsbisect" in sys.argv[0]:
        return redact("dsbisect " + shlex.join(reproduce_args(sys.argv[1:])))
    return fallback
