"""``dsbisect workaround``: which documented setting (or small group of them) makes the failing
command pass at the bad point (envdiff.workaround); each found one run twice, and labelled a
workaround, not a fix (render.workaround)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from dsbisect.cli.app import KeepsWords, app, user_errors
from dsbisect.cli.groups import grouped
from dsbisect.cli.options import SettingsOpts, Shown
from dsbisect.cli.output import Format, emit, emit_html, frontend, out, write_output
from dsbisect.core.model import Accelerator
from dsbisect.envdiff.workaround import WorkaroundRequest, Workarounds, workaround_job
from dsbisect.render import workaround as report


@dataclass(frozen=True)
class WorkaroundOpts(WorkaroundRequest):
    command: Annotated[Optional[list[str]], typer.Argument(metavar="-- COMMAND...", help="The command line that fails at the bad point.")] = None
    config: Annotated[Optional[Path], typer.Option("--config", metavar="FILE", help="The config the command names (DeepSpeed JSON, accelerate YAML): its documented keys are tried too.")] = None
    pin: Annotated[Optional[list[str]], typer.Option("--pin", metavar="REQ", help="The bad point, e.g. deepspeed==0.18.9 (repeatable; default: this environment).")] = None
    knob: Annotated[Optional[list[str]], typer.Option("--knob", metavar="WHERE:KEY=VALUE", help="Your own candidate, tried after the list: env:NAME=VALUE, config:a.b=VALUE or flag:--name=VALUE, an option of the command line (repeatable).")] = None
    only_own: Annotated[bool, typer.Option("--only-own", help="Try only the --knob candidates, not the documented list.")] = False
    repeat: Annotated[int, typer.Option("--repeat", min=1, max=20, help="Runs of each knob, stopped at the first that does not pass; it works when every one passes.")] = 2
    accelerator: Annotated[Accelerator, typer.Option("--accelerator", help="Where the ranks run: cpu, cuda, or auto.")] = Accelerator.AUTO
    max_group: Annotated[int, typer.Option("--max-group", min=1, max=3, metavar="N", help="Knobs set together at most: pairs (2), triples (3), or one at a time (1); groups are tried while no smaller one works.")] = 2
    max_group_runs: Annotated[int, typer.Option("--max-group-runs", min=0, metavar="RUNS", help="Runs spent on groups at most (a group stops at its first run that does not pass).")] = 30
    every_group: Annotated[bool, typer.Option("--every-group", help="Try the groups even when a smaller one works (never one with a working one inside).")] = False


@app.command(cls=KeepsWords)
@grouped
def workaround(*, request: WorkaroundOpts, settings: SettingsOpts, shown: Shown) -> None:
    """Try documented settings (NCCL/gloo variables, DeepSpeed ZeRO keys, accelerate's dataloader
    switches: the list and its sources are in docs/how-to/settings.md) one at a time, then in pairs,
    on a command that fails, each run --repeat times (or until a run does not pass), and report those
    that make it pass:
    workarounds, not fixes. Exit 0 when one works, 1 when none does or the command does not fail."""
    with user_errors():
        shown.check(html=True)
        found = workaround_job(request, settings, frontend(shown.quiet))
        _show(found, shown)
        if found.exit_code:
            raise typer.Exit(found.exit_code)


def _show(w: Workarounds, shown: Shown) -> None:
    if shown.fmt is Format.json:
        emit(json.dumps(w.to_json(), indent=2) + "\n", shown.output)
    elif shown.fmt is Format.markdown:
        emit(report.markdown(w), shown.output)
    elif shown.fmt is Format.html:
        emit_html(report.html(w), shown.output)
    else:
        for line in report.lines(w):
            out.print(line, markup=False, highlight=False)
        if shown.output:
            write_output(report.markdown(w), shown.output)
