"""``dsbisect run`` (a matrix, or a command at versions, as a pass/fail/hang/skip grid) and
``dsbisect run-one`` (one run of a Slurm job)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from dsbisect.cli.app import HelpCommand, app, user_errors
from dsbisect.cli.groups import grouped
from dsbisect.cli.options import CasesOpt, RepeatOpt, SettingsOpts, Shown
from dsbisect.cli.output import frontend, print_grid, reproduce_line, say
from dsbisect.core.model import Accelerator
from dsbisect.render.progress import ProgressUI
from dsbisect.run.sweep import SweepRequest, sweep, title as sweep_title


@dataclass(frozen=True)
class SweepOpts(SweepRequest):
    args: Annotated[Optional[list[str]], typer.Argument(metavar="[MATRIX | -- COMMAND...]", help="The matrix file (default matrix.yaml), or, with --versions/--pin, after --, your own command line.")] = None
    case: CasesOpt = None
    versions: Annotated[Optional[list[str]], typer.Option("--versions", metavar="PKG=V1,V2", help="With -- COMMAND: the versions of a package to run it at (repeatable: every combination); with MATRIX: instead of its cases' own.")] = None
    pin: Annotated[Optional[list[str]], typer.Option("--pin", metavar="REQ", help="A requirement held in every point, e.g. deepspeed==0.12.4 (repeatable; with MATRIX: besides its cases' pins).")] = None
    nproc: Annotated[Optional[int], typer.Option("--nproc", min=1, max=1024, help="Ranks of -- python x.py (default: one process, run as given; N > 1: N ranks under a launcher). A launcher line, e.g. torchrun --nproc-per-node 2, says its own.")] = None
    accelerator: Annotated[Accelerator, typer.Option("--accelerator", help="Where the ranks of -- COMMAND run: cpu, cuda, or auto (cuda when this machine has the GPUs).")] = Accelerator.AUTO
    rerun: Annotated[bool, typer.Option("--rerun", help="Run points again even if the store has them.")] = False
    repeat: RepeatOpt = 1


@app.command(cls=HelpCommand)
@grouped
def run(*, request: SweepOpts, settings: SettingsOpts, shown: Shown) -> None:
    """Run every case of MATRIX at every version point, or your own command at --versions/--pin,
    and print the pass/fail/hang/skip grid."""
    with user_errors():
        shown.check()
        swept = sweep(request, settings, frontend(shown.quiet))
        title = sweep_title(request, swept, settings.limits)
        print_grid(swept.records, title, shown, swept.cases, reproduce=reproduce_line(title))


@app.command("run-one", hidden=True, cls=HelpCommand)
def run_one(
    spec: Annotated[Path, typer.Argument(help="The job.json that `--executor slurm` wrote.")],
) -> None:
    """Do one run here, as a Slurm job of `--executor slurm` does (progress on stderr)."""
    from dsbisect.run.slurm import run_job

    with user_errors():
        record = run_job(spec, ProgressUI())
        say(f"run {record.id}: {record.outcome.value}" + (f" ({record.reason})" if record.reason else ""))
