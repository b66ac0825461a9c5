"""The files the running command may write, checked against what it reads and keeps.

One door for every command that writes a file it was asked to (``-o``, ``--html``,
``--dest``): the command's own parameters say what is at stake (its ``--store``; every file
it names, and the scripts and files of a matrix it names; the venvs it compares),
``core.outputs`` decides.  Read from the click context of the command
being run, so that a command calls ``check_output(path, flag)`` and nothing else.  The cache's
point venvs are found by their marker (``core.outputs``), wherever the cache is.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import typer

from dsbisect.core import outputs
from dsbisect.run.settings import matrix_files

OUTPUTS = {"output": "--output", "html_file": "--html", "dest": "--dest"}
KEPT = {"store": "--store"}  # dsbisect's own folder: nothing is written into it (its venvs: by their marker)
READ_IN_PART = ("git_repo", "find_links", "cache_dir")  # a clone, a wheelhouse, a cache: a report may go there


def _values(value: object) -> Iterator[object]:
    if isinstance(value, (list, tuple)):
        yield from value
    elif value is not None:
        yield value


ENVS = ("good_env", "bad_env", "good", "bad")  # an ENV is a word (a date, git:REV:PATH) or a venv; diff names them GOOD BAD


def _current_context():
    """The click context of the command being run (typer's click, vendored or not), or None."""
    click_context = next(c for c in typer.Context.__mro__ if c.__module__.endswith(".core"))
    click_globals = importlib.import_module(click_context.__module__.rsplit(".", 1)[0] + ".globals")
    return click_globals.get_current_context(silent=True)


def guarded(params: dict | None = None) -> outputs.Guarded:
    """What the current command's outputs must keep away from (``params``: its parsed
    parameters; default: those of the click context being run)."""
    if params is None:
        ctx = _current_context()
        params = dict(ctx.params) if ctx is not None else {}
    stores, inputs, dirs, outs = [], [], [], []
    for name, value in params.items():
        for v in _values(value):
            if name in OUTPUTS and isinstance(v, (str, Path)):
                outs.append((OUTPUTS[name], Path(v)))
            elif name in KEPT and isinstance(v, (str, Path)):
                stores.append((KEPT[name], Path(v)))
            elif name not in READ_IN_PART:
                inputs += outputs.existing_files([v])
                if isinstance(v, Path) and v.is_dir() or name in ENVS and isinstance(v, str) and Path(v).is_dir():
                    dirs.append(Path(v))  # --good-env/--bad-env are words (a date, git:REV:PATH) or a venv
    for f in list(inputs):
        if f.suffix in (".yaml", ".yml"):
            inputs += matrix_files(f)
    return outputs.Guarded(tuple(stores), tuple(dict.fromkeys(inputs)), tuple(dirs), tuple(outs))


def check_output(path: Path, flag: str = "--output", folder: bool = False) -> None:
    """An InputError (one line, exit 2) unless the current command may write ``path``."""
    found = guarded()
    others = list(found.outputs)
    mine = next((o for o in others if o[1] == Path(path)), None)
    if mine is not None:  # this output itself; another of the same name is a clash
        others.remove(mine)
    found = outputs.Guarded(found.stores, found.inputs, found.input_dirs, tuple(others))
    outputs.check_target(path, flag, found, folder=folder)
