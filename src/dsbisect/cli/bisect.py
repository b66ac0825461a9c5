"""``dsbisect bisect`` (releases, then commits; or two environments) and ``dsbisect versions``
(the releases a bisection would test)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Optional

import typer

from dsbisect.bisect.jobs import BisectRequest, CaseChoice, EnvPair, Invocation, SearchChoice, releases
from dsbisect.bisect.marks import invocation
from dsbisect.bisect.span import CommitSpan
from dsbisect.cli.app import HelpCommand, KeepsWords, app, user_errors
from dsbisect.cli.github import check_github, emit_github
from dsbisect.cli.groups import grouped
from dsbisect.cli.options import MAX_COUNT, RepeatOpt, SettingsOpts, Shown, SourceOpts
from dsbisect.cli.output import Format, emit, frontend, out, reproduce_line, say_error, say_notes, write_output
from dsbisect.core.model import Accelerator, RegressOn
from dsbisect.core.outside import safe_text
from dsbisect.core.redact import redact
from dsbisect.envdiff.jobs import Bisected, bisect as run_bisection


@dataclass(frozen=True)
class CaseOpts(CaseChoice):
    case: Annotated[Optional[str], typer.Option("--case", help="A case of the matrix file.")] = None
    script: Annotated[Optional[Path], typer.Option("--script", help="Run this script instead of a case.")] = None
    matrix: Annotated[Path, typer.Option("--matrix", help="Matrix file that defines --case.")] = Path("matrix.yaml")
    pin: Annotated[Optional[list[str]], typer.Option("--pin", help="Hold another package, e.g. transformers==4.39.2 (repeatable).")] = None
    nproc: Annotated[Optional[int], typer.Option("--nproc", min=1, max=1024, help="Ranks of --script (default 2) or of -- python x.py (default: one process, run as given, as git bisect run would; N > 1: N ranks under a launcher). A launcher line, e.g. deepspeed --num_gpus 2, says its own.")] = None
    accelerator: Annotated[Accelerator, typer.Option("--accelerator", help="Where the ranks of --script or -- COMMAND run: cpu, cuda, or auto (cuda when this machine has the GPUs); a --case says its own.")] = Accelerator.AUTO


@dataclass(frozen=True)
class SearchOpts(SearchChoice):
    regress_on: Annotated[RegressOn, typer.Option("--regress-on", help="What counts as bad: auto (what the bad end shows: a hang or a failure), hang, fail, or any.")] = RegressOn.AUTO
    any_failure: Annotated[bool, typer.Option("--any-failure", help="Count every failure of that kind as bad, not only the bad end's own (by default one that fails differently is stepped around).")] = False
    find_fix: Annotated[bool, typer.Option("--find-fix", help="Find the first release that fixed it instead.")] = False
    fixed_in: Annotated[bool, typer.Option("--fixed-in", help="Then: is it fixed in the latest release? If so, which release fixed it (more runs).")] = False
    fixed_in_upto: Annotated[Optional[str], typer.Option("--fixed-in-upto", metavar="VERSION", help="--fixed-in up to this release, not the latest.")] = None
    repeat: RepeatOpt = 1
    confirm: Annotated[int, typer.Option("--confirm", min=1, max=MAX_COUNT, help="At the end, run the last good and first bad points until each has this many runs; the answer stands only if all agree.")] = 1
    signature: Annotated[Optional[str], typer.Option("--signature", help="Only hangs/failures whose signature contains this are bad.")] = None
    confidence: Annotated[Optional[float], typer.Option("--confidence", metavar="P", help="For a flaky regression: a probabilistic bisection, one run per probe where it tells most, until one boundary holds probability P (e.g. 0.95; between 0.5 and 1); a point that fails once is bad. Not with --repeat or --confirm.")] = None
    git_repo: Annotated[Optional[Path], typer.Option("--git-repo", help="A clone of the package's repository: go on into the commits.")] = None
    verify_commit_ends: Annotated[bool, typer.Option("--verify-commit-ends/--no-verify-commit-ends", help="Build and test both tags from source before the commit search.")] = True
    metric: Annotated[Optional[str], typer.Option("--metric", help="Bisect a number: peak_rss, wall_time, loss@step50...")] = None
    worse_if: Annotated[Optional[str], typer.Option("--worse-if", help="'lower by 5%', 'higher by 200 MB', 'differs by 1%'.")] = None
    metric_pattern: Annotated[Optional[str], typer.Option("--metric-pattern", help="Read --metric from lines matching this; (?P<value>...) is the number.")] = None
    prove: Annotated[bool, typer.Option("--prove/--no-prove", help="After the commit search: revert the first bad commit on top of the first bad release and run that (one more build and run).")] = True


@dataclass(frozen=True)
class PairOpts(EnvPair):
    good_env: Annotated[Optional[str], typer.Option("--good-env", metavar="ENV", help="Instead of PACKAGE GOOD BAD: an environment that works (a freeze, uv.lock, pylock.toml, a venv; SPEC@DATE; git:REV:PATH).")] = None
    bad_env: Annotated[Optional[str], typer.Option("--bad-env", metavar="ENV", help="The broken environment (as --good-env; default: the one dsbisect runs in).")] = None
    hold: Annotated[Optional[list[str]], typer.Option("--hold", metavar="NAME", help="With --good-env: keep this package at the base's version, e.g. torch (repeatable).")] = None
    good_config: Annotated[Optional[Path], typer.Option("--good-config", metavar="FILE", help="A config that works (JSON, YAML, TOML).")] = None
    bad_config: Annotated[Optional[Path], typer.Option("--bad-config", metavar="FILE", help="The broken config, named by the command.")] = None
    good_vars: Annotated[Optional[Path], typer.Option("--good-vars", metavar="FILE", help="Variables that work (env > good.env).")] = None
    bad_vars: Annotated[Optional[Path], typer.Option("--bad-vars", metavar="FILE", help="Variables that are broken.")] = None
    good_command: Annotated[Optional[str], typer.Option("--good-command", metavar="LINE", help="The launch line that works, quoted.")] = None


@dataclass(frozen=True)
class SpanOpts(CommitSpan):
    commits: Annotated[Optional[str], typer.Option("--commits", help="Instead of GOOD BAD: the first-parent commits of --git-repo from OLD (good) to NEW (bad), no releases.")] = None
    max_runs: Annotated[Optional[int], typer.Option("--max-runs", min=1, max=MAX_COUNT, help="At most N new runs (runs the store holds are free), then 'unfinished' (exit 75); run it again to go on.")] = None
    deadline: Annotated[Optional[str], typer.Option("--deadline", metavar="DURATION", help="No new step after this long (5h, 90m), then 'unfinished' (exit 75); run it again to go on.")] = None


@dataclass(frozen=True)
class BisectOpts(BisectRequest):
    package: Annotated[Optional[str], typer.Argument(metavar="PACKAGE", help="The package whose releases move (deepspeed, transformers, accelerate, ...); not with --good-env.")] = None
    good: Annotated[Optional[str], typer.Argument(metavar="GOOD", help="A release that works (with --find-fix: the old broken one), or 'auto': found by walking back from BAD.")] = None
    bad: Annotated[Optional[str], typer.Argument(metavar="BAD", help="A later release that is broken (with --find-fix: the fixed one), or 'latest'.")] = None
    command: Annotated[Optional[list[str]], typer.Argument(metavar="[-- COMMAND...]", help="Your own command line, after --: a deepspeed/torchrun/accelerate launch line, python x.py, or any executable (exit 0 good, 125 skip, else bad).")] = None
    what: CaseOpts = field(default_factory=CaseOpts)
    search: SearchOpts = field(default_factory=SearchOpts)
    pre: Annotated[bool, typer.Option("--pre", help="Include pre-releases among the candidates.")] = False
    include_yanked: Annotated[bool, typer.Option("--include-yanked", help="Include yanked releases among the candidates.")] = False
    manual: Annotated[bool, typer.Option("--manual", help="Run nothing: build each point's venv, say how to run the case in it, and ask good/bad/skip.")] = False
    pair: PairOpts = field(default_factory=PairOpts)
    span: SpanOpts = field(default_factory=SpanOpts)


@app.command(cls=KeepsWords)
@grouped
def bisect(ctx: typer.Context, *, request: BisectOpts, settings: SettingsOpts, shown: Shown) -> None:
    """Find the first release of PACKAGE between GOOD and BAD that breaks the case (then the commit);
    or, with --good-env and --bad-env, which change between two environments breaks it, then its release and commit.

    \b
    Examples:
      dsbisect bisect deepspeed 0.17.6 0.18.9 --accelerator cpu \\
          -- deepspeed --num_gpus 2 train.py --deepspeed ds_config.json
      dsbisect bisect deepspeed 0.12.2 0.12.4 --case checkpoint_after_training
      dsbisect bisect transformers 4.36.2 4.39.2 --pin deepspeed==0.9.5 \\
          -- ./repro.sh
      dsbisect bisect --good-env good.txt --bad-env bad.txt -- python train.py
      dsbisect bisect deepspeed --commits nightly-last-green..HEAD --git-repo . \\
          --max-runs 12 -- python -m pytest tests/unit/runtime/test_x.py -k y
    """
    called = Invocation(tuple(invocation(ctx)), tuple(ctx.meta.get("dsbisect.words", [])))
    with user_errors():
        request.check(called)
        shown.check(github=True)
        if shown.fmt is Format.github:
            check_github(request.pair.given)
        done = run_bisection(request, called, settings, frontend(shown.quiet))
        show_bisected(shown, done, reproduce_line(fallback_line(request, done)))
        if done.exit_code:
            verdict, message = done.failure
            say_error(message, label=f"{verdict.value}:")
            raise typer.Exit(done.exit_code)


def fallback_line(request: BisectRequest, done: Bisected) -> str:
    """The bisect line to paste into an issue when dsbisect was not started by its own name."""
    if request.pair.given:
        return redact("dsbisect bisect " + shlex.join(done.result.request.argv))
    if request.span.given:
        return "dsbisect bisect " + shlex.join([request.package or "", "--commits", request.span.commits or ""])
    return "dsbisect bisect " + shlex.join([request.package or "", request.good or "", request.bad or ""])


def show_bisected(shown: Shown, done: Bisected, command: str) -> None:
    """The bisection's report on stdout in the chosen format (and the Markdown in ``-o`` for a
    table); a release answer's next step under it (not in JSON)."""
    from dsbisect.render import bisected

    if shown.fmt is Format.github:
        emit_github(done.result, command, shown.output)
        return
    after = bisected.next_step(done.result, command, done.index)
    if shown.fmt is Format.json:
        emit(bisected.as_json(done.result), shown.output)
    elif shown.fmt is Format.markdown:
        emit(bisected.as_markdown(done.result, command, after), shown.output)
    else:
        out.print(bisected.as_renderable(done.result, command, after))
        if shown.output:
            write_output(bisected.as_markdown(done.result, command, after), shown.output)


@app.command(cls=HelpCommand)
@grouped
def versions(
    *,
    package: Annotated[str, typer.Argument(help="A package name.")],
    good: Annotated[Optional[str], typer.Argument(help="From this release...")] = None,
    bad: Annotated[Optional[str], typer.Argument(help="...to this one, inclusive.")] = None,
    pre: Annotated[bool, typer.Option("--pre", help="Include pre-releases.")] = False,
    sources: SourceOpts,
) -> None:
    """List the releases a bisection of PACKAGE would test, oldest first."""
    with user_errors():
        found = releases(package, good, bad, sources, pre)
        say_notes(found.notes)
        for v in found.versions:
            out.print(safe_text(str(v)))
