"""``dsbisect report`` (the grid of every recorded run again, with the bisections' answers; or the
HTML page) and ``dsbisect show`` (one run)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from dsbisect.cli.app import HelpCommand, app, user_errors
from dsbisect.cli.groups import grouped
from dsbisect.cli.options import CasesOpt, Shown, StoreOpt
from dsbisect.cli.output import Format, check_output, emit_html, out, print_grid, say, write_output
from dsbisect.core.errors import InputError
from dsbisect.render import pages


@app.command(cls=HelpCommand)
@grouped
def report(
    *,
    store: StoreOpt = Path(".dsbisect"),
    case: CasesOpt = None,
    bisection: Annotated[Optional[str], typer.Option("--bisection", metavar="KEY", help="Only this bisection (its key, or the start of it) and its runs.")] = None,
    html_file: Annotated[Optional[Path], typer.Option("--html", metavar="FILE", help="Also write the HTML report (ladders, rank views) to FILE; the Markdown links it.")] = None,
    shown: Shown,
) -> None:
    """Print the grid of every recorded run again, from the store."""
    with user_errors():
        shown.check(html=True)
        if html_file is not None:
            check_output(html_file, "--html")
        html = shown.fmt is Format.html or html_file is not None
        found = pages.store_report(store, tuple(case or ()), bisection, html, say)
        if html_file is not None:
            write_output(found.page, html_file, "--html")
        if shown.fmt is Format.html:
            emit_html(found.page, shown.output)
            return
        print_grid(found.records, "dsbisect report", shown, [], html_link=html_link(html_file, shown.output),
                   bisections=found.found)


def html_link(html_file: Path | None, markdown: Path | None) -> str:
    """The Markdown's line that points at the HTML page (relative to the Markdown's folder)."""
    if html_file is None:
        return ""
    target = Path(os.path.relpath(html_file.resolve(), (markdown.resolve().parent if markdown else Path.cwd())))
    return f"The whole report as one page (bisection ladders, rank × collective views of the hangs): [{target.name}]({target.as_posix()})"


@app.command(cls=HelpCommand)
def show(
    run_id: Annotated[int, typer.Argument(help="A run id, as printed in reports.")],
    store: StoreOpt = Path(".dsbisect"),
    lines: Annotated[int, typer.Option("--lines", min=0, help="Log lines to show per log.")] = 30,
    fmt: Annotated[Format, typer.Option("--format", metavar="table|html", help="table (the terminal) or html (one self-contained page).")] = Format.table,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the HTML page to this file.")] = None,
) -> None:
    """Print one run: outcome, environment, hang signature, stacks and log tails."""
    with user_errors():
        if fmt not in (Format.table, Format.html):
            raise InputError(f"--format {fmt.value}: show prints a table, or an HTML page with --format html")
        if output is not None:
            if fmt is not Format.html:
                raise InputError("-o needs --format html (the table is for the terminal)")
            check_output(output)
        if fmt is Format.html:
            emit_html(pages.run_html(store, run_id, lines), output)
            return
        out.print(pages.run_text(store, run_id, lines))
