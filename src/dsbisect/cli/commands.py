"""The command line: parse, call, print, map errors to exit codes.

stdout is the report; stderr is progress and errors.  A DsbisectError becomes one red
line and its exit code (0 done, 1 domain failure, 2 bad input, 130 interrupted).

Every command is a plain Typer function.  Options that several commands share are declared
once, as ``Annotated`` aliases (``OfflineOpt``, ``TimeoutOpt``...) that the signatures name;
a command gathers them into the frozen bundles below (``IndexArgs``, ``EnvArgs``...), which
check them and turn them into what the layers below take.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import signal
import sys
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperCommand, TyperGroup

from dsbisect import __version__
from dsbisect.run import matrix as matrix_mod
from dsbisect.render import report as rep
from dsbisect.core.disk import is_full, message as disk_message
from dsbisect.cli import writeguard
from dsbisect.core import outputs
from dsbisect.core.errors import DsbisectError, ExternalFailure, InputError, Stopped, signal_of
from dsbisect.core.files import read_small_text
from dsbisect.core.outside import safe, safe_text
from dsbisect.core.redact import redact, remember, secret_values
from dsbisect.bisect.marks import Mark, invocation
from dsbisect.core.model import (
    Accelerator,
    BaseMode,
    Case,
    EnvOptions,
    IndexOptions,
    LauncherBackend,
    RegressOn,
)
from dsbisect.run.session import cache_root, index_options, open_runner

if typing.TYPE_CHECKING:
    from dsbisect.envdiff.engine import EnvResult
    from dsbisect.records.results import Result

# Click's own error classes, whether typer vendors click or not.
_CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


class CompactHelp:
    """``--help`` laid out by ``helptext``: at 80 columns no option name, default or example is
    cut, as typer's table cuts them."""

    def format_help(self, ctx, formatter) -> None:
        from dsbisect.cli import helptext

        console = Console(highlight=False, markup=False, emoji=False)
        console.print(helptext.render(self, ctx, console.width, order=tuple(_PANELS)))


class HelpCommand(CompactHelp, TyperCommand):
    pass


class HelpGroup(CompactHelp, TyperGroup):
    pass


class OneLineErrors(CompactHelp, TyperGroup):
    """Usage errors (a bad option value, an unknown option) as one line and exit 2, like every
    other input error, instead of Click's usage box."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        _plain_metavars(self)
        argv = list(args[0] if args and args[0] is not None else kwargs.get("args") or sys.argv[1:])
        remember(secret_values({}, argv))  # a --hub_token's value is masked in all this command shows
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        bad = next((i for i, a in enumerate(argv) if "\0" in str(a)), None)
        if bad is not None:
            say_error(f"argument {bad + 1} ({str(argv[bad])!r}) holds a NUL byte, which no program can be given")
            sys.exit(2)
        try:
            with stop_on_signals():
                code = super().main(*args, standalone_mode=False, **kwargs)
        except _CLICK_ERROR as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # bare `dsbisect`: the help, as asked
                e.show()
            else:
                message = " ".join(e.format_message().replace("Value error, ", "").split()).rstrip(".")
                say_error(f"{message} (see --help)")
            sys.exit(e.exit_code)
        except typer.Abort:
            say_error("", label="aborted")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


_METAVARS = {"store": "DIR", "cache_dir": "DIR", "find_links": "DIR", "matrix": "FILE", "script": "FILE",
             "output": "FILE", "hostfile": "FILE", "base_snapshot": "FILE", "git_repo": "CLONE", "dest": "DIR",
             "case": "NAME", "python": "PYTHON", "partition": "NAME", "slurm_arg": "ARG", "extra": "REQ",
             "signature": "TEXT", "commits": "OLD..NEW", "package": "NAME", "platform_tag": "TAG",
             "python_version": "X.Y", "master_addr": "HOST", "include": "SPEC", "exclude": "SPEC", "pin": "REQ",
             "nproc": "N", "repeat": "N", "confirm": "N", "jobs": "N", "num_nodes": "N", "slurm_time": "MINUTES",
             "gpus_per_job": "N", "lines": "N", "older_than": "DAYS", "index_url": "URL", "extra_index_url": "URL"}
# The options shown apart in --help, by panel (typer's rich_help_panel), in this order after
# the few most people need; a command with few options shows them all in one panel.
_PANELS = {"What counts as bad; flaky runs": ("any_failure", "signature", "repeat", "confirm", "confidence"),
           "Commits": ("verify_commit_ends", "prove"),
           "Two environments": ("good_env", "bad_env", "hold"),
           "Timeouts": ("timeout", "collective_timeout", "idle_timeout", "no_early_hang"),
           "Where packages come from": ("offline", "find_links", "index_url", "extra_index_url", "pre",
                                        "include_yanked"),
           "Venvs": ("cache_dir", "python", "base"),
           "How runs are made: at once, by hand, on Slurm": ("jobs", "manual", "executor", "partition",
                                                             "slurm_time", "gpus_per_job", "slurm_arg"),
           "Multi-node": ("hostfile", "num_nodes", "launcher_backend", "master_addr", "include", "exclude")}
_ONE_PANEL = 10  # options (--help too) up to which a command shows them in one panel


def _plain_metavars(command) -> None:
    """--case NAME, --find-links DIR, --timeout SECONDS: what to give, not a Python type; the
    options of a command with many in their panels."""
    params = getattr(command, "params", [])
    many = sum(p.param_type_name == "option" for p in params) >= _ONE_PANEL
    for param in params:
        panel = next((p for p, names in _PANELS.items() if param.name in names), None)
        if param.param_type_name == "option":
            param.rich_help_panel = panel if many else None
        if param.param_type_name == "option" and not param.is_flag and not getattr(param, "metavar", None):
            desc = getattr(param, "type_descriptor", None)  # typer >= 0.2x; older ones keep click's param.type
            listed = (desc.choices or ()) if desc is not None and desc.is_choice else \
                getattr(getattr(param, "type", None), "choices", ())
            choices = [getattr(c, "value", c) for c in listed]
            param.metavar = _METAVARS.get(param.name) or ("|".join(map(str, choices)) if choices else
                                                          "SECONDS" if "timeout" in param.name else
                                                          param.name.upper().replace("_", "-"))
    for sub in getattr(command, "commands", {}).values():
        _plain_metavars(sub)


app = typer.Typer(cls=OneLineErrors, add_completion=True, no_args_is_help=True, rich_markup_mode="rich",
                  help="Find the release (and commit) of DeepSpeed, Transformers or Accelerate that broke a distributed job.",
                  epilog="\b\nExamples:\n  dsbisect run matrix.yaml\n  dsbisect bisect deepspeed 0.12.2 0.12.4 --case NAME\n"
                         "  dsbisect bisect deepspeed 0.17.6 0.18.9 --accelerator cpu \\\n"
                         "      -- deepspeed --num_gpus 2 train.py --deepspeed ds_config.json\n"
                         "  dsbisect COMMAND --help     (its options)")
envs_app = typer.Typer(cls=HelpGroup, no_args_is_help=True, help="List or prune the cached point venvs.")
app.add_typer(envs_app, name="envs")

# No text printed is ever read as markup or emoji codes: what dsbisect styles, it styles with Text.
out = Console(soft_wrap=True, markup=False, emoji=False, highlight=False)
from dsbisect.render.progress import ProgressUI, err  # noqa: E402 - stderr: progress and errors share one console


def say_error(message: str, label: str = "error:") -> None:
    """One red-labelled line on stderr; the message is outside text (safe, never markup)."""
    err.print(Text.assemble((label, "bold red"), " " if message else "", safe_text(message)))


def say(text: str) -> None:
    """A line of progress or a note on stderr (outside text: safe, never markup)."""
    err.print(safe_text(text))


class Format(str, Enum):
    table = "table"
    markdown = "markdown"
    json = "json"
    html = "html"  # dsbisect report and dsbisect show only (OutputArgs.check)


class ExecutorKind(str, Enum):
    local = "local"
    slurm = "slurm"


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP (a scheduler, a closed terminal) stop dsbisect as Ctrl-C does: every
    run's processes are stopped and the runs recorded as interrupted before it exits."""

    def stop(signum, frame):
        raise Stopped(signum)

    before = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


@contextmanager
def user_errors() -> Iterator[None]:
    try:
        yield
    except DsbisectError as e:
        say_error(str(e))
        raise typer.Exit(e.exit_code) from None
    except KeyboardInterrupt as e:
        signum = signal_of(e)
        say_error(f"by {signal.Signals(signum).name}; every run's processes were stopped", label="interrupted")
        raise typer.Exit(128 + signum) from None
    except OSError as e:  # a write to a full disk that no layer below said in its own words
        if not is_full(e):
            raise
        say_error(disk_message(e.filename))
        raise typer.Exit(1) from None


# ------------------------------------------------------------------ options

StoreOpt = Annotated[Path, typer.Option("--store", help="Folder of the SQLite store and run logs.", envvar="DSBISECT_STORE", readable=False)]  # dsbisect says "permission denied" itself
CasesOpt = Annotated[Optional[list[str]], typer.Option("--case", help="Only this case (repeatable).")]
MAX_ID = 2**63 - 1  # SQLite's largest integer: a larger run id names no run
MAX_COUNT = 100_000  # a --repeat, --confirm or --jobs beyond this is a typo, not a plan
RepeatOpt = Annotated[int, typer.Option("--repeat", min=1, max=MAX_COUNT, help="Runs per point (for intermittent hangs); bad if any run is bad.")]
CacheOpt = Annotated[Optional[Path], typer.Option("--cache-dir", "--env-root", help="Where venvs, wheels and uv's cache live (default: the user cache dir; on a cluster, shared storage).", envvar="DSBISECT_CACHE_DIR")]


# Options that several commands share: each declared once, as an Annotated alias that the
# commands' signatures name; a command gathers them into the frozen bundles below
# (``IndexArgs(offline, find_links, index_url, extra_index_url)``...), which do the checking.

OfflineOpt = Annotated[bool, typer.Option("--offline", help="No network: packages come from --find-links only.")]
FindLinksOpt = Annotated[Optional[list[Path]], typer.Option("--find-links", metavar="DIR", help="A local wheelhouse (repeatable).")]
IndexUrlOpt = Annotated[Optional[str], typer.Option("--index-url", metavar="URL", help="Package index (PEP 503/691 simple API).", envvar="DSBISECT_INDEX_URL")]
ExtraIndexUrlOpt = Annotated[Optional[list[str]], typer.Option("--extra-index-url", metavar="URL", help="Extra package index (repeatable).")]

PythonOpt = Annotated[Optional[str], typer.Option("--python", help="Interpreter (and, layered, environment) the point venvs are made from.")]
BaseOpt = Annotated[Optional[BaseMode], typer.Option("--base", help="How point venvs see that environment (default from matrix.yaml, else auto).")]

TimeoutOpt = Annotated[Optional[float], typer.Option("--timeout", help="Wall time a run may take (overrides the matrix).")]
CollectiveTimeoutOpt = Annotated[Optional[float], typer.Option("--collective-timeout", help="The ranks' collective timeout: the default of torch's process groups and of deepspeed.init_distributed (a script that sets its own keeps it).")]
IdleTimeoutOpt = Annotated[Optional[float], typer.Option("--idle-timeout", help="A hang when no log grows and no rank's stack moves for this long.")]
NoEarlyHangOpt = Annotated[bool, typer.Option("--no-early-hang", help="Wait for the collective timeout even when the ranks' state proves a deadlock.")]

HostfileOpt = Annotated[Optional[Path], typer.Option("--hostfile", help="Multi-node: the deepspeed launcher's hostfile (overrides the matrix).")]
NumNodesOpt = Annotated[Optional[int], typer.Option("--num-nodes", min=1, max=MAX_COUNT, help="Multi-node: use the first N hosts of the hostfile.")]
LauncherBackendOpt = Annotated[Optional[LauncherBackend], typer.Option("--launcher-backend", help="Multi-node back end of the deepspeed launcher.")]
MasterAddrOpt = Annotated[Optional[str], typer.Option("--master-addr", help="Multi-node: address of the node of rank 0.")]
IncludeOpt = Annotated[Optional[str], typer.Option("--include", help="The deepspeed launcher's --include, e.g. 'node1@node2:0,1'.")]
ExcludeOpt = Annotated[Optional[str], typer.Option("--exclude", help="The deepspeed launcher's --exclude.")]

JobsOpt = Annotated[Optional[int], typer.Option("--jobs", "-j", min=1, max=MAX_COUNT, help="Points at once (default: one per free GPU slice, or per nproc CPU cores; 8 Slurm jobs with --executor slurm).")]
ExecutorOpt = Annotated[ExecutorKind, typer.Option("--executor", help="Where runs go: here, or one Slurm job per run (sbatch).")]
PartitionOpt = Annotated[Optional[str], typer.Option("--partition", help="Slurm partition of the jobs (--executor slurm).")]
SlurmTimeOpt = Annotated[Optional[int], typer.Option("--slurm-time", min=1, max=10**7, help="Slurm time limit per job, minutes (default: the case timeout + 30).")]
GpusPerJobOpt = Annotated[Optional[int], typer.Option("--gpus-per-job", min=0, max=MAX_COUNT, help="GPUs per node of each Slurm job (default: nproc for accelerator: cuda, else 0).")]
SlurmArgOpt = Annotated[Optional[list[str]], typer.Option("--slurm-arg", help="Another sbatch argument, e.g. --slurm-arg=--account=abc (repeatable).")]

FormatOpt = Annotated[Format, typer.Option("--format", help="Report format on stdout.")]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Also write the report to this file.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")]


class _Picked:
    """A bundle made from a dict of a command's parsed parameters (those of a replayed mark line)."""

    @classmethod
    def pick(cls, params: dict):
        return cls(**{f.name: params[f.name] for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class IndexArgs(_Picked):
    """Where packages come from."""

    offline: bool = False
    find_links: Optional[list[Path]] = None
    index_url: Optional[str] = None
    extra_index_url: Optional[list[str]] = None

    def options(self) -> IndexOptions:
        """The index settings, resolved (``notes``: the pip/uv settings left out, said by the
        command once its input is checked, so that bad input stays one line)."""
        return index_options(self.offline, self.find_links, self.index_url, self.extra_index_url)


@dataclass(frozen=True)
class EnvArgs(_Picked):
    """Where point venvs live and what they are made from."""

    cache_dir: Optional[Path] = None
    python: Optional[str] = None
    base: Optional[BaseMode] = None

    def options(self, defaults: EnvOptions) -> EnvOptions:
        """The venv options (the interpreter checked now, before anything is created)."""
        from dsbisect.envs.base import find_python

        opts = dataclasses.replace(defaults, python=self.python or defaults.python, base=self.base or defaults.base)
        if opts.python:
            find_python(opts.python)
        return opts


@dataclass(frozen=True)
class TimeoutArgs(_Picked):
    """Per-run limits that override the matrix's."""

    timeout: Optional[float] = None
    collective_timeout: Optional[float] = None
    idle_timeout: Optional[float] = None
    no_early_hang: bool = False

    def apply(self, case: Case) -> Case:
        for flag, value in (("--timeout", self.timeout), ("--collective-timeout", self.collective_timeout),
                            ("--idle-timeout", self.idle_timeout)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise InputError(f"{flag} {value:g}: expected a number of seconds greater than 0")
        case = case.with_timeouts(self.timeout, self.collective_timeout, self.idle_timeout)
        return dataclasses.replace(case, early_hang=False) if self.no_early_hang else case


@dataclass(frozen=True)
class NodeArgs(_Picked):
    """Multi-node options for the deepspeed launcher (override the matrix)."""

    hostfile: Optional[Path] = None
    num_nodes: Optional[int] = None
    launcher_backend: Optional[LauncherBackend] = None
    master_addr: Optional[str] = None
    include: Optional[str] = None
    exclude: Optional[str] = None

    def apply(self, case: Case) -> Case:
        return matrix_mod.with_nodes(
            case, "command line", hostfile=self.hostfile.resolve() if self.hostfile else None,
            num_nodes=self.num_nodes, backend=self.launcher_backend, master_addr=self.master_addr,
            include=self.include, exclude=self.exclude)


@dataclass(frozen=True)
class ExecArgs(_Picked):
    """How many points at once, and where they run."""

    jobs: Optional[int] = None
    executor: ExecutorKind = ExecutorKind.local
    partition: Optional[str] = None
    slurm_time: Optional[int] = None
    gpus_per_job: Optional[int] = None
    slurm_arg: Optional[list[str]] = None

    def executor_for(self):
        """None (run here), or the Slurm executor with the command line's job settings."""
        if self.executor is ExecutorKind.local:
            if self.partition or self.slurm_time or self.gpus_per_job is not None or self.slurm_arg:
                raise InputError("--partition, --slurm-time, --gpus-per-job and --slurm-arg need --executor slurm")
            return None
        from dsbisect.run.slurm import SlurmExecutor, SlurmOptions

        return SlurmExecutor(SlurmOptions(partition=self.partition, time=self.slurm_time, gpus=self.gpus_per_job,
                                          args=tuple(self.slurm_arg or ()), jobs=self.jobs or 8))


@dataclass(frozen=True)
class OutputArgs(_Picked):
    fmt: Format = Format.table
    output: Optional[Path] = None
    quiet: bool = False

    def check(self, html: bool = False) -> None:
        """--output checked before anything runs (a bisection's hours are not lost to a typo)."""
        if self.fmt is Format.html and not html:
            raise InputError("--format html is for dsbisect report and dsbisect show; run dsbisect report "
                             "--format html -o FILE when this is done")
        if self.output is not None:
            check_output(self.output)


@dataclass(frozen=True)
class RunArgs:
    """The bundles of a command that runs points (`run`, `bisect`), handed on as one."""

    limits: TimeoutArgs
    index: IndexArgs
    envs: EnvArgs
    where: ExecArgs
    nodes: NodeArgs
    shown: OutputArgs


def _say_notes(index: IndexOptions) -> None:
    """What of the user's pip/uv settings dsbisect leaves out, once the input is checked (the
    commands that open a runner say it through their progress lines)."""
    for note in index.notes:
        say(f"note: {note}")


def check_output(path: Path, flag: str = "--output") -> None:
    """A file we may write: in a writable folder, and never the store's, an input or another output."""
    writeguard.check_output(path, flag)


def write_output(text: str, path: Path, flag: str = "--output") -> None:
    outputs.write_text(path, text, flag)


def emit(text: str, output: Path | None) -> None:
    out.print(text, markup=False, highlight=False, end="" if text.endswith("\n") else "\n")
    if output:
        write_output(text, output)


# ---------------------------------------------------------------------- run


@app.command(cls=HelpCommand)
def run(
    args: Annotated[Optional[list[str]], typer.Argument(metavar="[MATRIX | -- COMMAND...]", help="The matrix file (default matrix.yaml), or, with --versions/--pin, after --, your own command line.")] = None,
    case: CasesOpt = None,
    versions: Annotated[Optional[list[str]], typer.Option("--versions", metavar="PKG=V1,V2", help="With -- COMMAND: the versions of a package to run it at (repeatable: every combination); with MATRIX: instead of its cases' own.")] = None,
    pin: Annotated[Optional[list[str]], typer.Option("--pin", metavar="REQ", help="A requirement held in every point, e.g. deepspeed==0.12.4 (repeatable; with MATRIX: besides its cases' pins).")] = None,
    nproc: Annotated[int, typer.Option("--nproc", min=1, max=1024, help="Ranks of -- python x.py (a launcher line, e.g. torchrun --nproc-per-node 2, says its own).")] = 2,
    accelerator: Annotated[Accelerator, typer.Option("--accelerator", help="Where the ranks of -- COMMAND run: cpu, cuda, or auto (cuda when this machine has the GPUs).")] = Accelerator.AUTO,
    rerun: Annotated[bool, typer.Option("--rerun", help="Run points again even if the store has them.")] = False,
    repeat: RepeatOpt = 1,
    store: StoreOpt = Path(".dsbisect"),
    timeout: TimeoutOpt = None,
    collective_timeout: CollectiveTimeoutOpt = None,
    idle_timeout: IdleTimeoutOpt = None,
    no_early_hang: NoEarlyHangOpt = False,
    offline: OfflineOpt = False,
    find_links: FindLinksOpt = None,
    index_url: IndexUrlOpt = None,
    extra_index_url: ExtraIndexUrlOpt = None,
    cache_dir: CacheOpt = None,
    python: PythonOpt = None,
    base: BaseOpt = None,
    jobs: JobsOpt = None,
    executor: ExecutorOpt = ExecutorKind.local,
    partition: PartitionOpt = None,
    slurm_time: SlurmTimeOpt = None,
    gpus_per_job: GpusPerJobOpt = None,
    slurm_arg: SlurmArgOpt = None,
    hostfile: HostfileOpt = None,
    num_nodes: NumNodesOpt = None,
    launcher_backend: LauncherBackendOpt = None,
    master_addr: MasterAddrOpt = None,
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
    fmt: FormatOpt = Format.table,
    output: OutputOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Run every case of MATRIX at every version point, or your own command at --versions/--pin,
    and print the pass/fail/hang/skip grid."""
    limits = TimeoutArgs(timeout, collective_timeout, idle_timeout, no_early_hang)
    index = IndexArgs(offline, find_links, index_url, extra_index_url)
    envs = EnvArgs(cache_dir, python, base)
    where = ExecArgs(jobs, executor, partition, slurm_time, gpus_per_job, slurm_arg)
    nodes = NodeArgs(hostfile, num_nodes, launcher_backend, master_addr, include, exclude)
    shown = OutputArgs(fmt, output, quiet)
    from dsbisect.envs.versions import check_points

    with user_errors():
        shown.check()
        narrowing = (versions or pin) and len(args or []) == 1 and Path(args[0]).suffix in (".yaml", ".yml")
        if narrowing:  # a matrix at other versions: a YAML file is never a command line
            m = matrix_mod.load(Path(args[0]))
            cases = matrix_mod.narrowed(m.select(case), versions or [], pin or [])
            env_defaults = m.env
            title = redact("dsbisect run " + shlex.join([m.path.name, *(w for v in versions or [] for w in ("--versions", v)),
                                                         *(w for p in pin or [] for w in ("--pin", p))]))
        elif versions or pin:
            the_case = matrix_mod.command_points(args or [], Path.cwd(), versions or [], pin or [], nproc,
                                                 accelerator)
            cases, env_defaults = [the_case], EnvOptions()
            title = _run_title(versions or [], pin or [], accelerator, nproc if the_case.command is None else None,
                               args or [])
        else:
            if len(args or []) > 1:
                raise InputError("a command line needs --versions or --pin (and -- before it)")
            if not args and not Path("matrix.yaml").exists():  # nothing named what to run: say what to give
                raise InputError("give a MATRIX file, or --versions PKG=V1,V2 (or --pin REQ) and -- COMMAND: what to "
                                 "run (no matrix.yaml here)")
            m = matrix_mod.load(Path(args[0]) if args else Path("matrix.yaml"))
            cases, env_defaults, title = m.select(case), m.env, f"dsbisect run {m.path.name}"
        cases = [nodes.apply(limits.apply(c)) for c in cases]
        executor = where.executor_for()
        idx = index.options()
        env_options = envs.options(env_defaults)
        check_points(cases, idx)
        ui = ProgressUI(shown.quiet, total=sum(len(c.points) for c in cases) * repeat)
        runner = open_runner(store, envs.cache_dir, env_options, idx, ui, rerun=rerun, jobs=where.jobs,
                             executor=executor)
        records = []
        if executor is None:  # points skipped at once for want of GPUs are no part of the time left
            ui.expect_unrunnable(sum(len(c.points) for c in cases if not runner.enough_gpus(c)) * repeat)
        with ui.running():
            for c in cases:
                _note_slots(runner, c, ui)
                for rs in runner.run_many(c, list(c.points), want=repeat):  # a run of another name, one key: c's too
                    records += [r if r.case_name == c.name else dataclasses.replace(r, case_name=c.name) for r in rs]
        _print_grid(records, title, shown, cases, reproduce=_run_reproduce(title))


def _run_title(versions: list[str], pins: list[str], accelerator: Accelerator, nproc: int | None,
               command: list[str]) -> str:
    """``dsbisect run --versions … --pin … --accelerator … -- COMMAND``: a line that runs it again
    (``nproc`` for a ``python x.py`` line, whose ranks dsbisect starts)."""
    words = [w for v in versions for w in ("--versions", v)] + [w for p in pins for w in ("--pin", p)]
    words += ["--accelerator", accelerator.value] if accelerator is not Accelerator.AUTO else []
    words += ["--nproc", str(nproc)] if nproc is not None else []
    return redact("dsbisect run " + shlex.join([*words, "--", *command]))


def _run_reproduce(title: str) -> str:
    """The command line as typed (without the options that only shape the output), else the title."""
    if sys.argv and "dsbisect" in sys.argv[0]:
        return redact("dsbisect " + shlex.join(reproduce_args(sys.argv[1:])))
    return title


def _note_slots(runner, case: Case, ui: ProgressUI) -> None:
    slots = runner.slots(case)
    if runner.executor is not None:
        ui("note", f"{case.name}: up to {len(slots)} Slurm job(s) at once")
        return
    _, said = runner.memory_plan(case)
    if len(slots) > 1 or said:
        where = ", ".join(",".join(map(str, s.devices)) for s in slots if s.devices) or "CPU"
        many = f"{len(slots)} points at once" if len(slots) > 1 else "1 point at a time"
        ui("note", f"{case.name}: {many} ({where}{'; ' + said if said else ''})")
    cores = os.cpu_count() or 1
    if runner.accelerator(case) is Accelerator.CPU and len(slots) * case.nproc > cores:
        ui("note", f"{case.name}: {len(slots)} jobs x {case.nproc} ranks on {cores} cores: oversubscribed")


def _print_grid(records, title: str, shown: OutputArgs, cases: list[Case], html_link: str = "",
                bisections: list | None = None, reproduce: str = "") -> None:
    """The grid; ``bisections`` (``answers.Answered``, for ``report``): their answers above it;
    ``reproduce``: the command line that runs it again, under it (not in JSON)."""
    from dsbisect.render import answers

    g = rep.grid(records)
    compat = tuple(dict.fromkeys(s for c in cases for s in c.compat))
    found = bisections or []
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


# ------------------------------------------------------------------- report


@app.command(cls=HelpCommand)
def report(
    store: StoreOpt = Path(".dsbisect"),
    case: CasesOpt = None,
    bisection: Annotated[Optional[str], typer.Option("--bisection", metavar="KEY", help="Only this bisection (its key, or the start of it) and its runs.")] = None,
    html_file: Annotated[Optional[Path], typer.Option("--html", metavar="FILE", help="Also write the HTML report (ladders, rank views) to FILE; the Markdown links it.")] = None,
    fmt: FormatOpt = Format.table,
    output: OutputOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Print the grid of every recorded run again, from the store."""
    shown = OutputArgs(fmt, output, quiet)
    with user_errors():
        shown.check(html=True)
        if html_file is not None:
            check_output(html_file, "--html")
        the_store = _open_store(store)
        records = [r for r in rep.named(the_store.runs(case), the_store.case_names(), case or ())
                   if not case or r.case_name in case]
        for note in the_store.notes:  # rows of the index that could not be read, named
            say(note)
        key = _bisection_key(the_store, bisection)
        if key is not None:
            from dsbisect.render.htmlsource import bisection_runs

            records = bisection_runs(the_store, key, records)
        if not records:
            raise DsbisectError(f"no runs recorded in {store}" + (f" for {', '.join(case)}" if case else "")
                                + (f" for bisection {key}" if key else ""))
        if shown.fmt is Format.html or html_file is not None:
            page = _html_page(the_store, records, key, tuple(case or ()))
            if html_file is not None:
                write_output(page, html_file, "--html")
            if shown.fmt is Format.html:
                _emit_html(page, shown.output)
                return
        from dsbisect.render.answers import answered

        found = answered([b for b in the_store.bisections() if key is None or b.key == key], case or ())
        _print_grid(records, "dsbisect report", shown, [], html_link=_html_link(html_file, shown.output),
                    bisections=found)


def _bisection_key(store, prefix: str | None) -> str | None:
    if prefix is None:
        return None
    from dsbisect.render.htmlsource import find_bisection

    return find_bisection(store, prefix)


def _html_page(store, records, key: str | None, cases: tuple[str, ...]) -> str:
    from dsbisect.render.htmlreport import render
    from dsbisect.render.htmlsource import store_page

    title = "dsbisect report" + (f" · bisection {key}" if key else "")
    return render(store_page(store, records, key, title=title, cases=cases))


def _emit_html(page: str, output: Path | None) -> None:
    """The page into -o (its name said on stderr), else on stdout for a pipe."""
    if output is None:
        emit(page, None)
        return
    write_output(page, output)
    say(f"HTML report: {output}")


def _html_link(html_file: Path | None, markdown: Path | None) -> str:
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
    from dsbisect.render.show import render_run

    with user_errors():
        if fmt not in (Format.table, Format.html):
            raise InputError(f"--format {fmt.value}: show prints a table, or an HTML page with --format html")
        if output is not None:
            if fmt is not Format.html:
                raise InputError("-o needs --format html (the table is for the terminal)")
            check_output(output)
        the_store = _open_store(store)
        record = the_store.run(run_id) if 0 < run_id <= MAX_ID else None
        if record is None:
            raise InputError(f"no run {run_id} in {store}")
        if fmt is Format.html:
            from dsbisect.render.htmlreport import render
            from dsbisect.render.htmlsource import one_run_page

            _emit_html(render(one_run_page(record, the_store.dir, lines)), output)
            return
        out.print(render_run(record, lines))


def _open_store(store: Path):
    """The store, read-only: reports work on a store one may not write (a shared or committed one)."""
    from dsbisect.store.store import Store, check_store_path

    return Store(check_store_path(store, writable=False), readonly=True)


store_app = typer.Typer(cls=HelpGroup, no_args_is_help=True, help="Look after a store.")
app.add_typer(store_app, name="store")


@store_app.command("repair", cls=HelpCommand)
def store_repair(store: StoreOpt = Path(".dsbisect")) -> None:
    """Rebuild a lost or damaged dsbisect.sqlite3 from the records in the run folders."""
    from dsbisect.store.repair import repair

    with user_errors():
        rebuilt, moved = repair(store)
        rebuilt.close()
        if moved:
            say(f"the damaged database was moved to {moved}")
        for note in rebuilt.notes:
            say(note)


# --------------------------------------------------------------------- envs


@envs_app.command("list", cls=HelpCommand)
def envs_list(cache_dir: CacheOpt = None) -> None:
    """List the cached point venvs with their pins and size."""
    from dsbisect.envs.venvs import EnvManager

    with user_errors():
        out.print(rep.envs_table(EnvManager(cache_root(cache_dir)).existing()))


@envs_app.command("prune", cls=HelpCommand)
def envs_prune(
    cache_dir: CacheOpt = None,
    everything: Annotated[bool, typer.Option("--all", help="Every venv of the cache.")] = False,
    older_than: Annotated[Optional[float], typer.Option("--older-than", metavar="DAYS", min=0, help="Only venvs unused for this many days.")] = None,
) -> None:
    """Delete cached point venvs (--all, or those unused for --older-than days) and half-built ones.
    Venvs being built or run from are kept."""
    from dsbisect.envs.venvs import EnvManager

    with user_errors():
        if everything == (older_than is not None):
            raise InputError("say which venvs: --all, or --older-than DAYS")
        if older_than is not None and not math.isfinite(older_than):  # nan would prune every venv
            raise InputError(f"--older-than {older_than}: expected a number of days")
        root = cache_root(cache_dir)
        if not (root / "envs").is_dir():
            raise InputError(f"no venv cache in {root}")
        removed, busy = EnvManager(root).prune(older_than_s=older_than * 86400 if older_than is not None else None)
        say(f"removed {len(removed)} venv(s)" + (f"; kept {len(busy)} in use" if busy else ""))


# ------------------------------------------------------------------- bisect


class KeepsWords(HelpCommand):
    """A command that keeps its command line's words as given (``ctx.meta["dsbisect.words"]``):
    with --good-env, Click fills the optional PACKAGE GOOD BAD with the first words after ``--``,
    and only the words themselves say whether any came before it."""

    def parse_args(self, ctx, args):
        ctx.meta["dsbisect.words"] = list(args)
        return super().parse_args(ctx, args)


@app.command(cls=KeepsWords)
def bisect(
    ctx: typer.Context,
    package: Annotated[Optional[str], typer.Argument(metavar="PACKAGE", help="The package whose releases move (deepspeed, transformers, accelerate, ...); not with --good-env.")] = None,
    good: Annotated[Optional[str], typer.Argument(metavar="GOOD", help="A release that works (with --find-fix: the old broken one), or 'auto': found by walking back from BAD.")] = None,
    bad: Annotated[Optional[str], typer.Argument(metavar="BAD", help="A later release that is broken (with --find-fix: the fixed one), or 'latest'.")] = None,
    command: Annotated[Optional[list[str]], typer.Argument(metavar="[-- COMMAND...]", help="Your own command line, after --: a deepspeed/torchrun/accelerate launch line, python x.py, or any executable (exit 0 good, 125 skip, else bad).")] = None,
    case: Annotated[Optional[str], typer.Option("--case", help="A case of the matrix file.")] = None,
    script: Annotated[Optional[Path], typer.Option("--script", help="Run this script instead of a case.")] = None,
    matrix: Annotated[Path, typer.Option("--matrix", help="Matrix file that defines --case.")] = Path("matrix.yaml"),
    pin: Annotated[Optional[list[str]], typer.Option("--pin", help="Hold another package, e.g. transformers==4.39.2 (repeatable).")] = None,
    nproc: Annotated[int, typer.Option("--nproc", min=1, max=1024, help="Ranks of --script or -- python x.py (a launcher line, e.g. deepspeed --num_gpus 2, says its own).")] = 2,
    accelerator: Annotated[Accelerator, typer.Option("--accelerator", help="Where the ranks of --script or -- COMMAND run: cpu, cuda, or auto (cuda when this machine has the GPUs); a --case says its own.")] = Accelerator.AUTO,
    regress_on: Annotated[RegressOn, typer.Option("--regress-on", help="What counts as bad: auto (what the bad end shows: a hang or a failure), hang, fail, or any.")] = RegressOn.AUTO,
    any_failure: Annotated[bool, typer.Option("--any-failure", help="Count every failure of that kind as bad, not only the bad end's own (by default one that fails differently is stepped around).")] = False,
    find_fix: Annotated[bool, typer.Option("--find-fix", help="Find the first release that fixed it instead.")] = False,
    repeat: RepeatOpt = 1,
    confirm: Annotated[int, typer.Option("--confirm", min=1, max=MAX_COUNT, help="At the end, run the last good and first bad points until each has this many runs; the answer stands only if all agree.")] = 1,
    signature: Annotated[Optional[str], typer.Option("--signature", help="Only hangs/failures whose signature contains this are bad.")] = None,
    confidence: Annotated[Optional[float], typer.Option("--confidence", metavar="P", help="For a flaky regression: a probabilistic bisection, one run per probe where it tells most, until one boundary holds probability P (e.g. 0.95; between 0.5 and 1); a point that fails once is bad. Not with --repeat or --confirm.")] = None,
    git_repo: Annotated[Optional[Path], typer.Option("--git-repo", help="A clone of the package's repository: go on into the commits.")] = None,
    verify_commit_ends: Annotated[bool, typer.Option("--verify-commit-ends/--no-verify-commit-ends", help="Build and test both tags from source before the commit search.")] = True,
    prove: Annotated[bool, typer.Option("--prove/--no-prove", help="After the commit search: revert the first bad commit on top of the first bad release and run that (one more build and run).")] = True,
    pre: Annotated[bool, typer.Option("--pre", help="Include pre-releases among the candidates.")] = False,
    include_yanked: Annotated[bool, typer.Option("--include-yanked", help="Include yanked releases among the candidates.")] = False,
    manual: Annotated[bool, typer.Option("--manual", help="Run nothing: build each point's venv, say how to run the case in it, and ask good/bad/skip.")] = False,
    good_env: Annotated[Optional[Path], typer.Option("--good-env", metavar="ENV", help="Instead of PACKAGE GOOD BAD: an environment that works (pip freeze, requirements of == pins, uv.lock, pylock.toml, a venv or its python); with --bad-env.")] = None,
    bad_env: Annotated[Optional[Path], typer.Option("--bad-env", metavar="ENV", help="The environment that is broken: which change(s) do it (level 1), which release of each (level 2), which commit (level 3, --git-repo).")] = None,
    hold: Annotated[Optional[list[str]], typer.Option("--hold", metavar="NAME", help="With --good-env: keep this package at the base's version instead of bisecting its change, e.g. torch (repeatable).")] = None,
    store: StoreOpt = Path(".dsbisect"),
    timeout: TimeoutOpt = None,
    collective_timeout: CollectiveTimeoutOpt = None,
    idle_timeout: IdleTimeoutOpt = None,
    no_early_hang: NoEarlyHangOpt = False,
    offline: OfflineOpt = False,
    find_links: FindLinksOpt = None,
    index_url: IndexUrlOpt = None,
    extra_index_url: ExtraIndexUrlOpt = None,
    cache_dir: CacheOpt = None,
    python: PythonOpt = None,
    base: BaseOpt = None,
    jobs: JobsOpt = None,
    executor: ExecutorOpt = ExecutorKind.local,
    partition: PartitionOpt = None,
    slurm_time: SlurmTimeOpt = None,
    gpus_per_job: GpusPerJobOpt = None,
    slurm_arg: SlurmArgOpt = None,
    hostfile: HostfileOpt = None,
    num_nodes: NumNodesOpt = None,
    launcher_backend: LauncherBackendOpt = None,
    master_addr: MasterAddrOpt = None,
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
    fmt: FormatOpt = Format.table,
    output: OutputOpt = None,
    quiet: QuietOpt = False,
) -> None:
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
    """
    from dsbisect.records.results import Request

    shared = RunArgs(TimeoutArgs(timeout, collective_timeout, idle_timeout, no_early_hang),
                     IndexArgs(offline, find_links, index_url, extra_index_url), EnvArgs(cache_dir, python, base),
                     ExecArgs(jobs, executor, partition, slurm_time, gpus_per_job, slurm_arg),
                     NodeArgs(hostfile, num_nodes, launcher_backend, master_addr, include, exclude),
                     OutputArgs(fmt, output, quiet))
    case_opts = dict(case=case, script=script, matrix=matrix, nproc=nproc, accelerator=accelerator)
    with user_errors():
        _check_confidence(confidence, repeat, confirm, good, good_env is not None or bad_env is not None or bool(hold))
    if good_env is not None or bad_env is not None or hold:
        return _bisect_envs(ctx, good_env, bad_env, hold or [],
                            [w for w in (package, good, bad) if w is not None] + (command or []), case_opts,
                            dict(regress_on=regress_on, find_fix=find_fix, repeat=repeat, confirm=confirm,
                                 signature=signature, git_repo=git_repo, verify_commit_ends=verify_commit_ends,
                                 any_failure=any_failure, prove=prove),
                            bool(pin or pre or include_yanked), manual, store, shared)
    with user_errors():
        shared.shown.check()
        if package is None or good is None or bad is None:
            raise InputError("give PACKAGE GOOD BAD (or --good-env and --bad-env)")
        the_case, env_defaults = _bisect_case(command=command, **case_opts)
        the_case = shared.nodes.apply(shared.limits.apply(the_case))
        run_where = shared.where.executor_for()
        if signature is not None and not signature.strip():
            raise InputError("--signature needs some text")
        req = Request(package=package, good=good, bad=bad, case=the_case,
                      pins=matrix_mod.check_pins(pin or [], package), regress_on=regress_on, find_fix=find_fix,
                      repeat=repeat, signature=signature, pre=pre, git_repo=git_repo,
                      verify_commit_ends=verify_commit_ends, confirm=confirm, include_yanked=include_yanked,
                      prove=prove, argv=tuple(invocation(ctx)), any_failure=any_failure, confidence=confidence)
        _bisect_releases(req, env_defaults, run_where, manual, store, shared, _reproduce_command(package, good, bad))


def _bisect_releases(req, env_defaults: EnvOptions, executor, manual: bool, store: Path, shared: RunArgs,
                     command: str) -> None:
    """`bisect PACKAGE GOOD BAD`: the release (then commit) bisection of ``req``, checked before
    the store or the cache is touched, and its report (``command``: the line that reproduces it)."""
    from dsbisect.bisect.bisection import Bisection, plan

    idx = shared.index.options()
    env_options = shared.envs.options(env_defaults)
    planned = plan(req, idx)  # everything checked before the store or the cache is touched
    if req.bad == "latest":
        req = dataclasses.replace(req, bad=planned.versions[-1])
        say(f"latest release of {req.package}: {req.bad}")
    ui = ProgressUI(shared.shown.quiet)
    runner = open_runner(store, shared.envs.cache_dir, env_options, idx, ui, jobs=shared.where.jobs,
                         executor=_manual_executor(shared.where, ui) if manual else executor)
    req = dataclasses.replace(req, width=len(runner.slots(req.case)))
    with ui.running():
        result = Bisection(runner, idx, req).run(planned)
    _show_result(shared.shown, result, command, _next_step(result, command, idx))
    if result.exit_code:
        say_error(result.message, label=f"{result.verdict.value}:")
        raise typer.Exit(result.exit_code)


def _check_confidence(p: float | None, repeat: int, confirm: int, good: str | None, envs: bool) -> None:
    """--confidence P: a probability strictly between 0.5 and 1, and a search of its own."""
    if p is None:
        return
    if not 0.5 < p < 1:
        raise InputError(f"--confidence {p:g}: give a probability between 0.5 and 1 (exclusive), e.g. 0.95")
    if repeat > 1 or confirm > 1:
        which = "--repeat" if repeat > 1 else "--confirm"
        raise InputError(f"--confidence and {which} do not go together: --confidence decides how often to run "
                         "each point itself")
    if envs:
        raise InputError("--confidence is for PACKAGE GOOD BAD, not --good-env/--bad-env")
    if good == "auto":
        raise InputError("--confidence needs a GOOD release: 'auto' walks back on single runs, which a flaky "
                         "regression would fool")


def _bisect_envs(ctx: typer.Context, good_env: Path | None, bad_env: Path | None, hold: list[str], words: list[str],
                 case_opts: dict, search: dict, release_only: bool, manual: bool, store: Path, shared: RunArgs) -> None:
    """`bisect --good-env A --bad-env B`: the environment bisection (envbisect), checked first."""
    from dsbisect.envdiff.engine import EnvBisection, EnvRequest, plan_envs
    from dsbisect.envdiff.environments import read_environment

    with user_errors():
        if good_env is None or bad_env is None:
            raise InputError("give both --good-env and --bad-env" if good_env or bad_env else "--hold needs --good-env and --bad-env")
        limits, index, envs, where, nodes, shown = (shared.limits, shared.index, shared.envs, shared.where,
                                                    shared.nodes, shared.shown)
        given = ctx.meta.get("dsbisect.words", [])
        after = given[given.index("--") + 1:] if "--" in given else []
        if len(words) > len(after):
            raise InputError("give either PACKAGE GOOD BAD or --good-env and --bad-env, not both")
        shown.check()
        if release_only:
            raise InputError("--pin, --pre and --include-yanked are for PACKAGE GOOD BAD; the environments pin "
                             "everything (--hold NAME keeps the base's version of a package)")
        the_case, env_defaults = _bisect_case(command=words or None, **case_opts)
        the_case = nodes.apply(limits.apply(the_case))
        executor = where.executor_for()
        if search["signature"] is not None and not search["signature"].strip():
            raise InputError("--signature needs some text")
        inv = invocation(ctx)  # Click's PACKAGE GOOD BAD (the command's first words) first, then the options
        argv = (inv[:inv.index("--")] if "--" in inv else inv)[min(3, len(words)):] + (["--", *words] if words else [])
        req = EnvRequest(read_environment(good_env), read_environment(bad_env), the_case,
                         hold=tuple(dict.fromkeys(hold)), argv=tuple(argv), **search)
        idx, env_options = index.options(), envs.options(env_defaults)
        planned = plan_envs(req, idx, env_options, cache_root(envs.cache_dir))  # nothing created before this
        ui = ProgressUI(shown.quiet)
        runner = open_runner(store, envs.cache_dir, env_options, idx, ui, jobs=where.jobs,
                             executor=_manual_executor(where, ui) if manual else executor)
        req = dataclasses.replace(req, width=len(runner.slots(the_case)))
        for note in planned.notes:
            say(f"note: {note}")
        with ui.running():
            result = EnvBisection(runner, idx, req, planned).run()
        command = redact("dsbisect " + shlex.join(reproduce_args(sys.argv[1:]))) if sys.argv and "dsbisect" in sys.argv[0] \
            else redact("dsbisect bisect " + shlex.join(argv))
        _show_result(shown, result, command)
        if result.exit_code:
            verdict, message = result.failure
            say_error(message, label=f"{verdict.value}:")
            raise typer.Exit(result.exit_code)


def _show_result(shown: OutputArgs, result: Result | EnvResult, command: str, after=None) -> None:
    """A bisection's report (of releases, or of environments) on stdout in the chosen format (and
    the Markdown in ``-o`` for a table); ``after``: a release answer's next step (not in JSON)."""
    from dsbisect.render import chainreport
    from dsbisect.envdiff.engine import EnvResult
    from dsbisect.records.results import dumps

    env = isinstance(result, EnvResult)
    markdown = chainreport.env_markdown if env else (lambda r, c: rep.bisect_markdown(r, c, after))
    if shown.fmt is Format.json:
        emit((json.dumps(result.to_json(), indent=2) if env else dumps(result)) + "\n", shown.output)
    elif shown.fmt is Format.markdown:
        emit(markdown(result, command), shown.output)
    else:
        out.print(chainreport.env_renderable(result, command) if env else
                  rep.bisect_renderable(result, command, after=after))
        if shown.output:
            write_output(markdown(result, command), shown.output)


def _next_step(result: Result, command: str, idx):
    """What to do after a found release pair (nextstep): the clone (from a margin before the last
    good release's upload date on the index, when it says) and the compare link."""
    from dsbisect.render import nextstep
    from dsbisect.envs.versions import released

    if nextstep.next_step(result, command, None) is None:
        return None  # no index read for an answer that has no next step
    try:
        when = released(result.request.package, result.last_good, idx)
    except (InputError, ExternalFailure):  # no index (offline, gone since the search): the clone keeps the whole history
        when = None
    return nextstep.next_step(result, command, when)


def _reproduce_command(package: str, good: str, bad: str) -> str:
    """The command line to paste into an issue (credentials in URLs hidden)."""
    if sys.argv and "dsbisect" in sys.argv[0]:
        return redact("dsbisect " + shlex.join(reproduce_args(sys.argv[1:])))
    return "dsbisect bisect " + shlex.join([package, good, bad])


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


def _bisect_case(case: str | None, script: Path | None, matrix: Path, nproc: int,
                 accelerator: Accelerator, command: list[str] | None) -> tuple[Case, EnvOptions]:
    if sum(bool(x) for x in (case, script, command)) > 1:
        raise InputError("give one of --case, --script or -- COMMAND")
    if command:
        return matrix_mod.command_case(command, Path.cwd(), nproc=nproc, accelerator=accelerator), EnvOptions()
    if script:
        return matrix_mod.script_case(script, nproc, accelerator), EnvOptions()
    if case is None and not matrix.exists():  # nothing named what to run: say what to give
        raise InputError(f"give --case NAME, --script FILE or -- COMMAND: what to run (no {matrix} here to take "
                         "its one case from)")
    m = matrix_mod.load(matrix)
    return m.only_case(case), m.env


@app.command(cls=HelpCommand)
def versions(
    package: Annotated[str, typer.Argument(help="A package name.")],
    good: Annotated[Optional[str], typer.Argument(help="From this release...")] = None,
    bad: Annotated[Optional[str], typer.Argument(help="...to this one, inclusive.")] = None,
    pre: Annotated[bool, typer.Option("--pre", help="Include pre-releases.")] = False,
    offline: OfflineOpt = False,
    find_links: FindLinksOpt = None,
    index_url: IndexUrlOpt = None,
    extra_index_url: ExtraIndexUrlOpt = None,
) -> None:
    """List the releases a bisection of PACKAGE would test, oldest first."""
    index = IndexArgs(offline, find_links, index_url, extra_index_url)
    from dsbisect.envs.versions import LATEST, candidates, listed

    with user_errors():
        idx = index.options()
        if good is None and bad is not None:
            raise InputError("give both GOOD and BAD, or neither")
        rels = listed(package, idx, pre) if good is None else candidates(package, good, bad or LATEST, idx, pre)
        _say_notes(idx)
        for v in rels:
            out.print(safe_text(str(v)))


# ------------------------------------------------------- mark, log, replay
# (commands that record results obtained elsewhere and replay a bisection's decisions)


@app.command(cls=HelpCommand)
def mark(
    verdict: Annotated[Mark, typer.Argument(metavar="good|bad|skip", help="What the point did, as a bisection would take it (bad: the regression shows).")],
    args: Annotated[list[str] | None, typer.Argument(metavar="POINT... [-- COMMAND...]", help="The point, as PACKAGE==VERSION words (several versions of one package: one mark each); then, after --, the command line of a case given as one (as bisect takes it).")] = None,
    case: Annotated[str | None, typer.Option("--case", metavar="NAME", help="A case of the matrix file.")] = None,
    script: Annotated[Path | None, typer.Option("--script", metavar="FILE", help="The case of this script (as bisect --script).")] = None,
    matrix: Annotated[Path, typer.Option("--matrix", metavar="FILE", help="Matrix file that defines --case.")] = Path("matrix.yaml"),
    pin: Annotated[list[str] | None, typer.Option("--pin", metavar="REQ", help="A requirement the bisection held, e.g. transformers==4.39.2 (repeatable).")] = None,
    nproc: Annotated[int, typer.Option("--nproc", min=1, max=1024, help="Ranks of --script or -- python x.py (as bisect).")] = 2,
    accelerator: Annotated[Accelerator, typer.Option("--accelerator", help="Where the ranks of --script or -- COMMAND ran (as bisect).")] = Accelerator.AUTO,
    commit: Annotated[str | None, typer.Option("--commit", metavar="HASH", help="The point is this commit of the package (a commit step's point); POINT names the release it leads to.")] = None,
    git_repo: Annotated[Path | None, typer.Option("--git-repo", metavar="CLONE", help="Resolve a short --commit in this clone.")] = None,
    note: Annotated[str | None, typer.Option("--note", metavar="TEXT", help="What you saw, e.g. 'hang at step 812 on 64 GPUs'.")] = None,
    store: StoreOpt = Path(".dsbisect"),
    timeout: TimeoutOpt = None,
    collective_timeout: CollectiveTimeoutOpt = None,
    idle_timeout: IdleTimeoutOpt = None,
    no_early_hang: NoEarlyHangOpt = False,
    hostfile: HostfileOpt = None,
    num_nodes: NumNodesOpt = None,
    launcher_backend: LauncherBackendOpt = None,
    master_addr: MasterAddrOpt = None,
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
) -> None:
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
    from dsbisect.bisect.marks import record

    limits = TimeoutArgs(timeout, collective_timeout, idle_timeout, no_early_hang)
    nodes = NodeArgs(hostfile, num_nodes, launcher_backend, master_addr, include, exclude)
    with user_errors():
        plan = _mark_plan(verdict, args, case, script, matrix, pin, nproc, accelerator, commit, git_repo, note,
                          limits, nodes)
        _check_marked(plan, store, released=commit is None)
        the_store = _marks_store(store)
        for point in plan.points:
            r = record(the_store, plan.case, point, plan.mark, plan.note)
            say(f"run {r.id}: {plan.case.name} · {point.label} marked {plan.mark.value} by hand")


def _mark_plan(verdict, args, case, script, matrix, pin, nproc, accelerator, commit, git_repo, note,
               limits: TimeoutArgs, nodes: NodeArgs):
    """What a mark's command line (or a replayed line) names: the case, as bisect makes it, and the points."""
    from dsbisect.envs import facts
    from dsbisect.bisect.marks import Planned, commit_source, parse_items, points_for, split_args

    items, command = split_args(list(args or []))
    versions = parse_items(items)
    if git_repo and not commit:
        raise InputError("--git-repo resolves a --commit: give --commit HASH too")
    the_case, _ = _bisect_case(case, script, matrix, nproc, accelerator, command or None)
    the_case = nodes.apply(limits.apply(the_case))
    if the_case.gpu_overrides:  # keyed as this machine's runs of the case are
        the_case = the_case.for_gpu(next(iter(facts.gpus()), None))
    source = commit_source(versions[0][0], commit, git_repo) if commit else None
    points = points_for(the_case, versions, matrix_mod.check_pins(pin or []), source)
    return Planned(the_case, tuple(points), Mark(verdict), " ".join((note or "").split()))


def _check_marked(plan, store: Path, released: bool) -> None:
    """Before anything is recorded: every marked version is one that the case's bisections in the
    store test, and (``released``: not a commit) a release the index knows, when it can tell."""
    from dsbisect.envs import versions
    from dsbisect.bisect.marks import bisected_ranges, not_released, out_of_range
    from dsbisect.run.session import index_options
    from dsbisect.store.store import DB, Store, store_dir

    folder = store_dir(store)
    st = Store(folder, readonly=True) if (folder / DB).is_file() else None
    for point in plan.points:
        for name, version in point.versions:
            ranges = bisected_ranges(st, plan.case.name, name) if st is not None else []
            why = out_of_range(name, version, plan.case.name, ranges)
            if not why and not ranges and released:
                why = not_released(name, version, versions.release_list(name, index_options(False, None, None, None)))
            if why:
                raise InputError(why)


def _marks_store(store: Path):
    from dsbisect.run.session import make_shared
    from dsbisect.store.store import Store, check_store_path

    folder = check_store_path(store)
    make_shared(folder)
    the_store = Store(folder)
    for n in the_store.notes:
        say(n)
    return the_store


@app.command(cls=HelpCommand)
def log(
    key: Annotated[str | None, typer.Argument(metavar="[KEY]", help="The bisection whose key starts with this (default: the last one).")] = None,
    store: StoreOpt = Path(".dsbisect"),
) -> None:
    """Print a bisection's decisions, one `dsbisect mark` line per run it used, for `dsbisect replay`."""
    from dsbisect.bisect.marks import find_bisection, log_text

    with user_errors():
        the_store = _open_store(store)
        emit(safe(log_text(the_store, find_bisection(the_store, key))), None)


@app.command(cls=HelpCommand)
def replay(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="A log written by `dsbisect log` (mark lines; # comments).")],
    store: StoreOpt = Path(".dsbisect"),
) -> None:
    """Record every mark of a log into the store (marks it already holds are not doubled): the
    bisection of the log's header then gives the same answer without running anything."""
    from dsbisect.bisect.marks import already, parse_log, record

    with user_errors():
        try:
            text = read_small_text(file)
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"{file}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
        plans = [(line, _replayed_plan(line, file)) for line in parse_log(text, str(file))]  # all checked first
        the_store = _marks_store(store)
        there = already(the_store, [(line.number, p) for line, p in plans])
        made = 0
        for line, plan in plans:
            for i, point in enumerate(plan.points):
                if (line.number, i) not in there:
                    record(the_store, plan.case, point, plan.mark, plan.note or line.comment,
                           extra={"replayed": f"{file.name}:{line.number}"})
                    made += 1
        say(f"{made} mark(s) recorded in {the_store.dir}" + (f"; {len(there)} already there" if there else ""))


def _replayed_plan(line, file: Path):
    """A log's mark line, read by `mark`'s own option parser and planned by the same code as
    `mark` (nothing recorded); its errors name the file and line."""
    command = typer.main.get_command(app).commands["mark"]
    try:
        with command.make_context("mark", list(line.args)) as ctx:
            p = ctx.params
        return _mark_plan(p["verdict"], p["args"], p["case"], p["script"], p["matrix"], p["pin"], p["nproc"],
                          p["accelerator"], p["commit"], p["git_repo"], p["note"], TimeoutArgs.pick(p),
                          NodeArgs.pick(p))
    except _CLICK_ERROR as e:
        raise InputError(f"{file}:{line.number}: {' '.join(e.format_message().split())}") from None
    except DsbisectError as e:
        raise InputError(f"{file}:{line.number}: {e}") from None


def _manual_executor(where: ExecArgs, ui: ProgressUI):
    """`bisect --manual`: each point's venv built here, the user runs it and answers."""
    from dsbisect.bisect.marks import ManualExecutor

    if where.executor is not ExecutorKind.local:
        raise InputError("--manual asks you about each point: it cannot go with --executor slurm")

    def ask(text: str) -> str:
        with ui.paused():
            return typer.prompt(text, err=True)

    return ManualExecutor(ask=ask, say=lambda text: err.print(safe_text(text)))



@app.command("run-one", hidden=True, cls=HelpCommand)
def run_one(
    spec: Annotated[Path, typer.Argument(help="The job.json that `--executor slurm` wrote.")],
) -> None:
    """Do one run here, as a Slurm job of `--executor slurm` does (progress on stderr)."""
    from dsbisect.run.slurm import run_job

    with user_errors():
        record = run_job(spec, ProgressUI())
        say(f"run {record.id}: {record.outcome.value}" + (f" ({record.reason})" if record.reason else ""))


@app.command("diff", cls=HelpCommand)
def diff_envs(
    good: Annotated[Path, typer.Argument(metavar="GOOD", help="The environment that works: a pip freeze / requirements file of == pins, uv.lock, pylock.toml, a venv folder, a python, or - (stdin).")],
    bad: Annotated[Path, typer.Argument(metavar="BAD", help="The environment that breaks (any of the same).")],
    python: Annotated[Optional[str], typer.Option("--python", help="The interpreter trials are made from: what its environment provides is noted (default: dsbisect's own).")] = None,
    fmt: FormatOpt = Format.table,
    output: OutputOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Print what changed between two environments (changed, added, removed), running nothing.
    Exit 1 when they do not differ."""
    shown = OutputArgs(fmt, output, quiet)
    from dsbisect.render import envreport

    with user_errors():
        if shown.output:
            check_output(shown.output, "-o")
        if shown.fmt is Format.html:
            raise InputError("--format html is for dsbisect report and dsbisect show")
        d = envreport.compare(good, bad, python)
        if shown.fmt is Format.json:
            emit(json.dumps(envreport.to_json(d), indent=2) + "\n", shown.output)
        elif shown.fmt is Format.markdown:
            emit(envreport.markdown(d), shown.output)
        else:
            out.print(envreport.table(d))
            if shown.output:
                write_output(envreport.markdown(d), shown.output, "-o")


@app.command("snapshot-base", cls=HelpCommand)
def snapshot_base(
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the snapshot (JSON).")],
    python: Annotated[Optional[str], typer.Option("--python", help="The interpreter whose environment to describe.")] = None,
) -> None:
    """Write what this (compute node's) base environment holds, for `prefetch --base-snapshot`."""
    from dsbisect.offline.prefetch import snapshot

    with user_errors():
        check_output(output)
        data = snapshot(python)
        write_output(json.dumps(data), output)
        say(f"{len(data['dists'])} distributions of {data['python']} (python {data['python_version']}, "
            f"{data['platform']}) written to {output}")


@app.command(cls=HelpCommand)
def prefetch(
    matrix: Annotated[Optional[Path], typer.Argument(help="The matrix file (default matrix.yaml; with --no-cases, read only when there).")] = None,
    dest: Annotated[Path, typer.Option("--dest", help="The wheelhouse folder to fill.")] = Path("wheelhouse"),
    case: CasesOpt = None,
    versions: Annotated[Optional[list[str]], typer.Option("--versions", metavar="PKG=V1,V2", help="As run's with MATRIX: the cases at these versions of a package instead of their own (repeatable).")] = None,
    with_candidates: Annotated[bool, typer.Option("--with-candidates", help="Also every release between the lowest and highest version of each axis (with --good-env: of each change).")] = False,
    python_version: Annotated[Optional[str], typer.Option("--python-version", help="The target's Python, e.g. 3.12.")] = None,
    platform_tag: Annotated[Optional[list[str]], typer.Option("--platform", help="The target's platform tags, e.g. manylinux_2_17_x86_64 (repeatable).")] = None,
    base_snapshot: Annotated[Optional[Path], typer.Option("--base-snapshot", help="The target's base (from `dsbisect snapshot-base`): only what it lacks is fetched.")] = None,
    tool: Annotated[bool, typer.Option("--tool", help="Also dsbisect's own dependencies.")] = False,
    cases_too: Annotated[bool, typer.Option("--cases/--no-cases", help="Fetch what the cases need (default), or only --tool/--commits.")] = True,
    extra: Annotated[Optional[list[str]], typer.Option("--extra", help="Another requirement to fetch, e.g. 'setuptools<75' for building commits offline (repeatable).")] = None,
    git_repo: Annotated[Optional[Path], typer.Option("--git-repo", help="Build wheels of commits of this clone (with --commits).")] = None,
    commits: Annotated[Optional[str], typer.Option("--commits", help="Tags or hashes; every first-parent commit in between (with --git-repo).")] = None,
    package: Annotated[str, typer.Option("--package", help="The package the clone builds (with --git-repo).")] = "deepspeed",
    good_env: Annotated[Optional[Path], typer.Option("--good-env", metavar="ENV", help="With --bad-env: what `bisect --good-env/--bad-env` installs: every pin of both (level 1); with --with-candidates every release between each change's two versions (level 2). The matrix's cases only with --case.")] = None,
    bad_env: Annotated[Optional[Path], typer.Option("--bad-env", metavar="ENV", help="The broken environment (with --good-env).")] = None,
    hold: Annotated[Optional[list[str]], typer.Option("--hold", metavar="NAME", help="As bisect's: keep this package at the target base's version, not fetched (repeatable).")] = None,
    cache_dir: CacheOpt = None,
    offline: OfflineOpt = False,
    find_links: FindLinksOpt = None,
    index_url: IndexUrlOpt = None,
    extra_index_url: ExtraIndexUrlOpt = None,
) -> None:
    """Download (and build) everything the matrix's points (or two environments) need into a wheelhouse for --offline use."""
    from dsbisect.envs import gitrepo
    from dsbisect.envs.venvs import EnvManager
    from dsbisect.offline.prefetch import (
        Prefetcher,
        Target,
        commit_ends,
        env_fetch,
        env_holding,
        load_snapshot,
        points_to_fetch,
    )

    index = IndexArgs(offline, find_links, index_url, extra_index_url)

    with user_errors():
        if not cases_too and case:
            raise InputError("--case names cases to fetch: it cannot go with --no-cases")
        envs = _prefetch_envs(good_env, bad_env, hold or [])
        cases_too = cases_too and (bool(case) or envs is None)  # an env bisection runs no axis point
        m = _prefetch_matrix(matrix, cases_too)
        cases = m.select(case) if m is not None else []
        if versions:
            if not cases_too:
                raise InputError("--versions changes the cases' points: it cannot go with --no-cases")
            cases = matrix_mod.narrowed(cases, versions, [])
        if index.offline:
            raise InputError("prefetch downloads what --offline runs need: it cannot run --offline itself")
        writeguard.check_output(dest, "--dest", folder=True)
        idx = index.options()
        extras = matrix_mod.check_pins(extra or [], flag="--extra")
        if (git_repo or commits) and not (git_repo and commits and ".." in commits):
            raise InputError("--git-repo and --commits OLD..NEW go together")
        repo = gitrepo.check_repo(git_repo) if git_repo else None
        ends = commit_ends(repo, commits) if repo else None  # checked, then created
        target = Target(python_version, tuple(platform_tag or ()), load_snapshot(base_snapshot) if base_snapshot else None)
        points = points_to_fetch(cases, idx, with_candidates) if cases_too else []
        indented = lambda s: say(f"  {s}")  # noqa: E731
        env_options = m.env if m is not None else EnvOptions()
        fetch = env_fetch(*envs, env_holding(*envs, tuple(dict.fromkeys(hold or ())), target, env_options.python),
                          idx, with_candidates) if envs else None
        _say_notes(idx)
        pf = Prefetcher(EnvManager(cache_root(cache_dir), env_options, idx, log=indented), dest, target, log=indented)
        try:
            _prefetch_fill(pf, points, envs, fetch, tool, extras)
            if repo:
                pf.commits(repo, package, *ends)
        finally:
            pf.close()
        say(f"{len(pf.added)} file(s) added; {pf.dest} holds {pf.size() / 1e6:.1f} MB")
        for name in pf.added:
            out.print(safe_text(name))


def _prefetch_fill(pf, points, envs, fetch, tool: bool, extras) -> None:
    """Fetch into ``pf``'s wheelhouse what the points, the two environments, dsbisect itself
    (``tool``) and the ``--extra`` requirements need."""
    for p in points:
        say(f"{p.label}")
        pf.point(p)
    if fetch is not None:
        say(f"{envs[0].source} -> {envs[1].source}")
        for label in pf.environments(fetch):
            say(f"  {label}: uv cannot install it in either environment's pins: not fetched")
    if tool:
        pf.tool()
    if extras:
        pf.requirements(extras)


def _prefetch_envs(good_env: Path | None, bad_env: Path | None, hold: list[str]):
    """The two environments of `prefetch --good-env/--bad-env`, read; None without them."""
    from dsbisect.envdiff.environments import read_environment

    if good_env is None or bad_env is None:
        if good_env or bad_env:
            raise InputError("give both --good-env and --bad-env")
        if hold:
            raise InputError("--hold needs --good-env and --bad-env")
        return None
    return read_environment(good_env), read_environment(bad_env)


def _prefetch_matrix(matrix: Path | None, cases_too: bool):
    """The matrix prefetch reads: the one named, else matrix.yaml; with --no-cases (only --tool,
    --extra, --commits), matrix.yaml only for its settings, and only when there."""
    if matrix is None and not cases_too and not Path("matrix.yaml").is_file():
        return None
    return matrix_mod.load(matrix or Path("matrix.yaml"))


def version_callback(value: bool) -> None:
    if value:
        out.print(f"dsbisect {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Print the version.")] = False,
    shared_group: Annotated[Optional[str], typer.Option("--shared-group", metavar="GROUP", envvar="DSBISECT_SHARED_GROUP", help="Make stores, run folders and venvs readable and writable by this group (default: private to you).")] = None,
) -> None:
    """What dsbisect writes (store, logs, stacks, venvs) is private to the user unless a group shares it."""
    from dsbisect.run.session import share_with

    with user_errors():
        share_with(shared_group)


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()
