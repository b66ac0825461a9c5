"""``dsbisect diff``: what changed between two environments, running nothing."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from dsbisect.cli.app import HelpCommand, app, user_errors
from dsbisect.cli.groups import grouped
from dsbisect.cli.options import Shown, SourceOpts
from dsbisect.cli.output import Format, check_output, emit, out, write_output
from dsbisect.core.errors import InputError


@app.command("diff", cls=HelpCommand)
@grouped
def diff_envs(
    *,
    good: Annotated[str, typer.Argument(metavar="GOOD", help="The environment that works: a pip freeze / requirements file of == pins, uv.lock, pylock.toml, a venv folder, a python, or - (stdin); SPEC@DATE: a requirements file, pyproject.toml or 'pkg pkg>=1' as resolved on DATE (YYYY-MM-DD, or today); git:REV:PATH: a file as it was in a commit of this repository.")],
    bad: Annotated[str, typer.Argument(metavar="BAD", help="The environment that breaks (any of the same).")],
    python: Annotated[Optional[str], typer.Option("--python", help="The interpreter trials are made from: what its environment provides is noted (default: dsbisect's own).")] = None,
    shown: Shown,
    sources: SourceOpts,
) -> None:
    """Print what changed between two environments (changed, added, removed), running nothing.
    Exit 1 when they do not differ."""
    from dsbisect.render import envreport

    with user_errors():
        if shown.output:
            check_output(shown.output, "-o")
        if shown.fmt is Format.html:
            raise InputError("--format html is for dsbisect report and dsbisect show")
        d = envreport.compare(good, bad, python, sources.resolve())
        if shown.fmt is Format.json:
            emit(json.dumps(envreport.to_json(d), indent=2) + "\n", shown.output)
        elif shown.fmt is Format.markdown:
            emit(envreport.markdown(d), shown.output)
        else:
            out.print(envreport.table(d))
            if shown.output:
                write_output(envreport.markdown(d), shown.output, "-o")
