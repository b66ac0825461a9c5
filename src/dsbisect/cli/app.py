"""The Typer app: its groups, its ``--help`` layout, the one mapping of errors to exit codes, and
``main``.

A DsbisectError becomes one red line and its exit code (0 done, 1 domain failure, 2 bad input,
130 interrupted); a usage error (a bad option value, an unknown option) one line and exit 2;
SIGTERM and SIGHUP stop dsbisect as Ctrl-C does.  The commands register themselves on ``app``
from their family's module (``cli/__init__`` imports them all).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Optional

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup

from dsbisect import __version__
from dsbisect.cli import helptext
from dsbisect.cli.output import out, say, say_error
from dsbisect.core.disk import is_full, message as disk_message
from dsbisect.core.errors import DsbisectError, Stopped, signal_of
from dsbisect.core.redact import remember, secret_values
from dsbisect.core.tell import listening
from dsbisect.run.session import share_with

# Click's own error classes, whether typer vendors click or not.
CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")

METAVARS = {"store": "DIR", "cache_dir": "DIR", "find_links": "DIR", "matrix": "FILE", "script": "FILE",
            "output": "FILE", "hostfile": "FILE", "base_snapshot": "FILE", "git_repo": "CLONE", "dest": "DIR",
            "case": "NAME", "python": "PYTHON", "partition": "NAME", "slurm_arg": "ARG", "extra": "REQ",
            "signature": "TEXT", "commits": "OLD..NEW", "package": "NAME", "platform_tag": "TAG",
            "python_version": "X.Y", "master_addr": "HOST", "include": "SPEC", "exclude": "SPEC", "pin": "REQ",
            "nproc": "N", "max_runs": "N", "repeat": "N", "confirm": "N", "jobs": "N", "num_nodes": "N",
            "slurm_time": "MINUTES", "gpus_per_job": "N", "lines": "N", "older_than": "DAYS", "index_url": "URL",
            "extra_index_url": "URL", "metric": "NAME", "worse_if": "RULE", "metric_pattern": "REGEX"}
# The options shown apart in --help, by panel (typer's rich_help_panel), in this order after
# the few most people need; a command with few options shows them all in one panel.
PANELS = {"What counts as bad; flaky runs": ("any_failure", "signature", "repeat", "confirm", "confidence"),
          "A number that got worse (docs/how-to/numbers.md)": ("metric", "worse_if", "metric_pattern"),
          "Commits": ("commits", "max_runs", "deadline", "verify_commit_ends", "prove"),
          "Two environments, or settings (docs/how-to/settings.md)": ("good_env", "bad_env", "hold", "good_config",
                                                                      "bad_config", "good_vars", "bad_vars",
                                                                      "good_command"),
          "Timeouts": ("timeout", "collective_timeout", "idle_timeout", "no_early_hang"),
          "Where packages come from": ("offline", "find_links", "index_url", "extra_index_url", "pre",
                                       "include_yanked"),
          "Venvs": ("cache_dir", "python", "base"),
          "How runs are made: at once, by hand, on Slurm": ("jobs", "manual", "executor", "partition",
                                                            "slurm_time", "gpus_per_job", "slurm_arg"),
          "Multi-node": ("hostfile", "num_nodes", "launcher_backend", "master_addr", "include", "exclude")}
ONE_PANEL = 10  # options (--help too) up to which a command shows them in one panel


class CompactHelp:
    """``--help`` laid out by ``helptext``: at 80 columns no option name, default or example is
    cut, as typer's table cuts them."""

    def format_help(self, ctx, formatter) -> None:
        console = Console(highlight=False, markup=False, emoji=False)
        console.print(helptext.render(self, ctx, console.width, order=tuple(PANELS)))


class HelpCommand(CompactHelp, TyperCommand):
    pass


class HelpGroup(CompactHelp, TyperGroup):
    pass


class KeepsWords(HelpCommand):
    """A command that keeps its command line's words as given (``ctx.meta["dsbisect.words"]``):
    with --good-env, Click fills the optional PACKAGE GOOD BAD with the first words after ``--``,
    and only the words themselves say whether any came before it."""

    def parse_args(self, ctx, args):
        ctx.meta["dsbisect.words"] = list(args)
        return super().parse_args(ctx, args)


class OneLineErrors(CompactHelp, TyperGroup):
    """Usage errors (a bad option value, an unknown option) as one line and exit 2, like every
    other input error, instead of Click's usage box."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        plain_metavars(self)
        argv = list(args[0] if args and args[0] is not None else kwargs.get("args") or sys.argv[1:])
        remember(secret_values({}, argv))  # a --hub_token's value is masked in all this command shows
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        bad = next((i for i, a in enumerate(argv) if "\0" in str(a)), None)
        if bad is not None:
            say_error(f"argument {bad + 1} ({str(argv[bad])!r}) holds a NUL byte, which no program can be given")
            sys.exit(2)
        try:
            with stop_on_signals(), listening(say):  # a wait or a retry deep in a job: a line on stderr
                code = super().main(*args, standalone_mode=False, **kwargs)
        except CLICK_ERROR as e:
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


def plain_metavars(command) -> None:
    """--case NAME, --find-links DIR, --timeout SECONDS: what to give, not a Python type; the
    options of a command with many in their panels."""
    params = getattr(command, "params", [])
    many = sum(p.param_type_name == "option" for p in params) >= ONE_PANEL
    for param in params:
        panel = next((p for p, names in PANELS.items() if param.name in names), None)
        if param.param_type_name == "option":
            param.rich_help_panel = panel if many else None
        if param.param_type_name == "option" and not param.is_flag and not getattr(param, "metavar", None):
            param.metavar = METAVARS.get(param.name) or _metavar(param)
    for sub in getattr(command, "commands", {}).values():
        plain_metavars(sub)


def _metavar(param) -> str:
    """An option's choices (``table|markdown``), SECONDS for a timeout, else its name."""
    desc = getattr(param, "type_descriptor", None)  # typer >= 0.2x; older ones keep click's param.type
    listed = (desc.choices or ()) if desc is not None and desc.is_choice else \
        getattr(getattr(param, "type", None), "choices", ())
    choices = [getattr(c, "value", c) for c in listed]
    return ("|".join(map(str, choices)) if choices else
            "SECONDS" if "timeout" in param.name else param.name.upper().replace("_", "-"))


app = typer.Typer(cls=OneLineErrors, add_completion=True, no_args_is_help=True, rich_markup_mode="rich",
                  help="Find the release (and commit) of DeepSpeed, Transformers or Accelerate that broke a distributed job.",
                  epilog="\b\nExamples:\n  dsbisect run matrix.yaml\n  dsbisect bisect deepspeed 0.12.2 0.12.4 --case NAME\n"
                         "  dsbisect bisect deepspeed 0.17.6 0.18.9 --accelerator cpu \\\n"
                         "      -- deepspeed --num_gpus 2 train.py --deepspeed ds_config.json\n"
                         "  dsbisect COMMAND --help     (its options)")
envs_app = typer.Typer(cls=HelpGroup, no_args_is_help=True, help="List or prune the cached point venvs.")
app.add_typer(envs_app, name="envs")
store_app = typer.Typer(cls=HelpGroup, no_args_is_help=True, help="Look after a store.")
app.add_typer(store_app, name="store")


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
    """Errors as the user sees them: one line on stderr and the exit code (bugs keep their traceback)."""
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
    with user_errors():
        share_with(shared_group)


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()
