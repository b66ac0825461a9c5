"""``dsbisect mark`` (a result obtained elsewhere, recorded as a run), ``dsbisect log`` (a
bisection's decisions as mark lines) and ``dsbisect replay`` (a log's marks recorded)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from dsbisect.bisect import marking
from dsbisect.bisect.jobs import CaseChoice
from dsbisect.bisect.marks import LogLine, Planned
from dsbisect.cli.app import CLICK_ERROR, HelpCommand, app, user_errors
from dsbisect.cli.groups import build, grouped
from dsbisect.cli.options import LimitOpts, NodeOpts, StoreOpt
from dsbisect.cli.output import emit, say
from dsbisect.core.errors import DsbisectError, InputError
from dsbisect.core.model import Accelerator, Verdict
from dsbisect.core.outside import safe


@dataclass(frozen=True)
class MarkedCaseOpts(CaseChoice):
    case: Annotated[str | None, typer.Option("--case", metavar="NAME", help="A case of the matrix file.")] = None
    script: Annotated[Path | None, typer.Option("--script", metavar="FILE", help="The case of this script (as bisect --script).")] = None
    matrix: Annotated[Path, typer.Option("--matrix", metavar="FILE", help="Matrix file that defines --case.")] = Path("matrix.yaml")
    pin: Annotated[list[str] | None, typer.Option("--pin", metavar="REQ", help="A requirement the bisection held, e.g. transformers==4.39.2 (repeatable).")] = None
    nproc: Annotated[int, typer.Option("--nproc", min=1, max=1024, help="Ranks of --script or -- python x.py (as bisect).")] = 2
    accelerator: Annotated[Accelerator, typer.Option("--accelerator", help="Where the ranks of --script or -- COMMAND ran (as bisect).")] = Accelerator.AUTO


@dataclass(frozen=True)
class MarkOpts(marking.MarkRequest):
    verdict: Annotated[Verdict, typer.Argument(metavar="good|bad|skip", help="What the point did, as a bisection would take it (bad: the regression shows).")]
    args: Annotated[list[str] | None, typer.Argument(metavar="POINT... [-- COMMAND...]", help="The point, as PACKAGE==VERSION words (several versions of one package: one mark each); then, after --, the command line of a case given as one (as bisect takes it).")] = None
    what: MarkedCaseOpts = field(default_factory=MarkedCaseOpts)
    commit: Annotated[str | None, typer.Option("--commit", metavar="HASH", help="The point is this commit of the package (a commit step's point); POINT names the release it leads to.")] = None
    git_repo: Annotated[Path | None, typer.Option("--git-repo", metavar="CLONE", help="Resolve a short --commit in this clone.")] = None
    note: Annotated[str | None, typer.Option("--note", metavar="TEXT", help="What you saw, e.g. 'hang at step 812 on 64 GPUs'.")] = None


@app.command(cls=HelpCommand)
@grouped
def mark(*, request: MarkOpts, store: StoreOpt = Path(".dsbisect"), limits: LimitOpts, nodes: NodeOpts) -> None:
    """Record a result obtained elsewhere (your 64-GPU job) as a run of the case at POINT; a
    bisection of that case uses it like any run, and every report shows it as marked by hand.

    \b
    Examples:
      dsbisect mark bad deepspeed==0.12.4 --case checkpoint_after_training \\
          --note 'hang at step 812'
      dsbisect mark good deepspeed==0.12.2 deepspeed==0.12.3 \\
          --pin transformers==4.39.2 -- deepspeed --num_gpus 8 train.py
      dsbisect mark bad deepspeed==0.12.4 --commit 2afa1c7f --git-repo ../DeepSpeed \\
          --case checkpoint_after_training
    """
    with user_errors():
        marking.mark(request, store, limits, nodes, say)


@app.command(cls=HelpCommand)
def log(
    key: Annotated[str | None, typer.Argument(metavar="[KEY]", help="The bisection whose key starts with this (default: the last one).")] = None,
    store: StoreOpt = Path(".dsbisect"),
) -> None:
    """Print a bisection's decisions, one `dsbisect mark` line per run it used, for `dsbisect replay`."""
    with user_errors():
        emit(safe(marking.log(store, key)), None)


@app.command(cls=HelpCommand)
def replay(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="A log written by `dsbisect log` (mark lines; # comments).")],
    store: StoreOpt = Path(".dsbisect"),
) -> None:
    """Record every mark of a log into the store (marks it already holds are not doubled): the
    bisection of the log's header then gives the same answer without running anything."""
    with user_errors():
        marking.replay(file, store, lambda line: replayed_plan(line, file), say)


def replayed_plan(line: LogLine, file: Path) -> Planned:
    """A log's mark line, read by `mark`'s own option parser and planned by the same code as
    `mark` (nothing recorded); its errors name the file and line."""
    command = typer.main.get_command(app).commands["mark"]
    try:
        with command.make_context("mark", list(line.args)) as ctx:
            p = ctx.params
        return marking.plan_mark(build(MarkOpts, p), build(LimitOpts, p), build(NodeOpts, p))
    except CLICK_ERROR as e:
        raise InputError(f"{file}:{line.number}: {' '.join(e.format_message().split())}") from None
    except DsbisectError as e:
        raise InputError(f"{file}:{line.number}: {e}") from None
