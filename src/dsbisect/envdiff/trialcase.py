"""The settings of a level-1 trial as the case it runs: the bad command line with the good
settings and those the trial applies, its config written out, its variables set or removed.

How a trial's config reaches the command: the command line after ``--`` is the user's own and
names the bad config (``--deepspeed broken.json``); each trial's config is written (the good file
with the trial's keys set as in the bad one, its format and comments kept: ruamel.yaml and
tomlkit round-trip) into the cache under a folder named by its digest, and the word that names
the config is replaced by that path.  Chosen over a placeholder (``{config}``) because the line
stays the one that fails, runnable as typed (the bad end runs it as given), and because the
file's digest is in the case's key (``inputs``): a trial's runs are reused by content.  The
run's record keeps a copy of it (``inputs/``), as of every file a command line names.  The
trial configs live in the cache, not the store: a config may carry a credential the job needs.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shlex
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dsbisect.core.errors import InputError
from dsbisect.envdiff.environments import Environment, diff
from dsbisect.envdiff.plan import EnvPlan, plan_envs
from dsbisect.envdiff.sources import EnvSpec, Origin, Resolved
from dsbisect.envs import gitrepo
from dsbisect.core.model import Case, Point, digest
from dsbisect.core.proc import UNSET
from dsbisect.core.redact import remember, secret_values
from dsbisect.envdiff.settings import (
    Line,
    Setting,
    Where,
    config_format,
    config_settings,
    flag_settings,
    flag_words,
    parse_line,
    read_vars,
    var_settings,
)
from dsbisect.run.matrix import command_case

CONFIG_WORD = "\0config"  # where a line names the config, while two lines are compared


@dataclass(frozen=True)
class SettingsFiles:
    """What the command line gave: two configs, two variable dumps, the good command line."""

    good_config: Path | None = None
    bad_config: Path | None = None
    good_vars: Path | None = None
    bad_vars: Path | None = None
    good_command: str | None = None  # the line that works; the bad one is the command after --

    @property
    def given(self) -> bool:
        return any(x is not None for x in dataclasses.astuple(self))

    def sources(self, good: bool) -> str:
        files = (self.good_config, self.good_vars) if good else (self.bad_config, self.bad_vars)
        said = [str(f) for f in files if f is not None]
        if self.good_command:
            said.append("--good-command" if good else "the command line")
        return " + ".join(said)


@dataclass(frozen=True)
class SettingsPlan:
    """The settings that differ and what a trial needs to apply them."""

    settings: tuple[Setting, ...]
    words: tuple[str, ...]  # the bad command line, the config's word as CONFIG_WORD
    cwd: Path
    good_config: Path | None = None
    bad_config: Path | None = None
    config_text: str = ""  # the good config's, as written
    good_line: Line | None = None
    bad_line: Line | None = None
    notes: tuple[str, ...] = ()

    def key_fields(self) -> dict:
        """What makes two requests the same: the settings (secrets masked) and the line."""
        return {"settings": [s.describe() for s in self.settings], "words": list(self.words),
                "config": digest(self.config_text) if self.good_config else None}


def read_settings(files: SettingsFiles, words: Sequence[str], cwd: Path) -> SettingsPlan:
    """Every file read and checked (InputError, exit 2: a missing or unparsable file, configs of
    two formats, a command line that does not name the config, no difference at all)."""
    _pairs(files)
    words, settings, notes, extra = list(words), [], [], {}
    if files.good_config is not None:
        settings += config_settings(files.good_config, files.bad_config)  # both read first: a missing file says so
        words = mark_config(words, cwd, files.good_config, files.bad_config)
        extra = {"good_config": files.good_config.resolve(), "bad_config": files.bad_config.resolve(),
                 "config_text": files.good_config.read_text()}
    if files.good_vars is not None:
        good, bad = read_vars(files.good_vars), read_vars(files.bad_vars)
        remember(secret_values(good) | secret_values(bad))  # masked in all this process shows and keeps
        found, left = var_settings(good, bad)
        settings += found
        if left:
            notes.append(f"variables of the shell and the session left out: {', '.join(left[:12])}"
                         + (" ..." if len(left) > 12 else ""))
    if files.good_command is not None:
        lines = _lines(files, words, cwd)
        settings += flag_settings(*lines)
        extra |= {"good_line": lines[0], "bad_line": lines[1]}
    if not settings:
        raise InputError(f"{files.sources(True)} and {files.sources(False)}: no difference in any setting")
    return SettingsPlan(tuple(settings), tuple(words), cwd, notes=tuple(notes), **extra)


def _pairs(files: SettingsFiles) -> None:
    for good, bad, name in ((files.good_config, files.bad_config, "config"), (files.good_vars, files.bad_vars, "vars")):
        if (good is None) != (bad is None):
            raise InputError(f"--good-{name} and --bad-{name} go together: give both")
    if files.good_config is not None:
        config_format(files.good_config)


def mark_config(words: list[str], cwd: Path, good: Path, bad: Path) -> list[str]:
    """The command line with the word naming the config (either one) as CONFIG_WORD."""
    targets = {p.resolve() for p in (good, bad) if p.exists()}
    out, found = [], False
    for w in words:
        head, eq, tail = w.partition("=") if w.startswith("-") else ("", "", w)
        if tail and (cwd / tail).resolve() in targets:
            out.append(f"{head}={CONFIG_WORD}" if eq else CONFIG_WORD)
            found = True
        else:
            out.append(w)
    if not found:
        raise InputError(f"the command line does not name {bad} (or {good}): dsbisect replaces that word "
                         "with each trial's config")
    return out


def _lines(files: SettingsFiles, words: list[str], cwd: Path) -> tuple[Line, Line]:
    try:
        good = shlex.split(files.good_command or "")
    except ValueError as e:
        raise InputError(f"--good-command: {e}") from None
    if not good:
        raise InputError("--good-command is empty: give the command line that works")
    if files.good_config is not None:
        good = mark_config(good, cwd, files.good_config, files.bad_config)
    return parse_line(good, "--good-command"), parse_line(words, "the command line")


# ---------------------------------------------------------------------- trials


class TrialCases:
    """The case of each trial (``case_of``, the probe's), by the variant its point carries."""

    def __init__(self, plan: SettingsPlan, base: Case, folder: Path):
        self.plan, self.base, self.folder = plan, base, folder
        self._applied: dict[str, frozenset[Setting]] = {}
        self._cases: dict[str, Case] = {}

    def variant(self, applied: Iterable[Setting]) -> str:
        """The point variant of a trial applying ``applied`` (registered for ``case_of``)."""
        chosen = frozenset(applied)
        name = digest(sorted(s.describe() for s in chosen)) if chosen else "settings: none"
        self._applied[name] = chosen
        return name

    def case_of(self, point: Point) -> Case:
        if point.variant not in self._cases:
            self._cases[point.variant] = self.case_for(self._applied[point.variant])
        return self._cases[point.variant]

    def case_for(self, applied: frozenset[Setting]) -> Case:
        plan, base = self.plan, self.base
        words = list(plan.words)
        if plan.good_line is not None:
            words = flag_words(plan.good_line, plan.bad_line, [s for s in applied if s.where is Where.FLAG])
        if plan.good_config is not None:
            path = str(self._config([s for s in applied if s.where is Where.CONFIG]))
            words = [w.replace(CONFIG_WORD, path) for w in words]
        made = command_case(words, plan.cwd, name=base.name, nproc=base.nproc, accelerator=base.accelerator)
        env_names = {s.name for s in plan.settings if s.where is Where.ENV}
        env = tuple((k, v) for k, v in base.env if k not in env_names) + tuple(
            (s.name, _value(s.bad if s in applied else s.good)) for s in plan.settings if s.where is Where.ENV)
        return dataclasses.replace(base, command=made.command, args=made.args, inputs=made.inputs, line=made.line,
                                   nproc=made.nproc if made.command else base.nproc,
                                   script=made.script, script_digest=made.script_digest, env=env)

    def _config(self, applied: list[Setting]) -> Path:
        """The good config, the bad one (all applied), or the good one edited, written once."""
        plan = self.plan
        every = [s for s in plan.settings if s.where is Where.CONFIG]
        if not applied:
            return plan.good_config
        if len(applied) == len(every) and plan.bad_config != plan.good_config:  # (a workaround's plan: the same)
            return plan.bad_config
        text = edited(plan.config_text, config_format(plan.good_config), [(s.path, s.bad) for s in applied])
        path = self.folder / digest(text)[:16] / plan.bad_config.name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
                f.write(text)
            os.replace(f.name, path)
        return path


def _value(text: str | None) -> str:
    return UNSET if text is None else text


# ---------------------------------------------------------------- config edits


def edited(text: str, fmt: str, changes: Sequence[tuple[tuple[str, ...], str | None]]) -> str:
    """``text`` (a config of ``fmt``) with each key path set to a JSON value, or removed (None);
    YAML and TOML keep their comments and layout (round-trip), JSON its indent."""
    if fmt == "json":
        data = json.loads(text)
        _apply(data, changes, dict)
        return json.dumps(data, indent=_indent(text)) + "\n"
    if fmt == "yaml":
        from ruamel.yaml import YAML

        y = YAML()
        y.preserve_quotes = True
        data = y.load(text)
        _apply(data, changes, dict)
        out = io.StringIO()
        y.dump(data, out)
        return out.getvalue()
    import tomlkit

    doc = tomlkit.parse(text)
    _apply(doc, changes, tomlkit.table)
    return tomlkit.dumps(doc)


def _apply(data, changes: Sequence[tuple[tuple[str, ...], str | None]], new_table) -> None:
    for path, value in changes:
        node = data
        for k in path[:-1]:
            if k not in node or not hasattr(node[k], "keys"):
                node[k] = new_table()
            node = node[k]
        if value is None:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = json.loads(value)


def _indent(text: str) -> int | None:
    for line in text.splitlines()[1:]:
        stripped = line.lstrip(" ")
        if stripped and len(stripped) < len(line):
            return len(line) - len(stripped)
    return None if "\n" not in text.strip() else 2


# ---------------------------------------------------------------------- requests


def read_plan(pair, words: Sequence[str], cwd: Path) -> SettingsPlan | None:
    """``bisect``'s settings options (``jobs.EnvPair``) read and checked; None when none is given."""
    files = SettingsFiles(pair.good_config, pair.bad_config, pair.good_vars, pair.bad_vars, pair.good_command)
    if not files.given:
        return None
    if not words:
        raise InputError("give the command line that fails after --: each trial runs it with its settings")
    return read_settings(files, words, cwd)


def no_packages(pair) -> tuple[Resolved, Resolved]:
    """Both ends of a bisection of settings alone: the environment dsbisect runs in, nothing pinned
    (the trials' venvs are the base's); named by the files that give the settings."""
    files = SettingsFiles(pair.good_config, pair.bad_config, pair.good_vars, pair.bad_vars, pair.good_command)
    spec = EnvSpec("", Origin.CURRENT)
    good, bad = (Resolved(spec, Environment(files.sources(side), ())) for side in (True, False))
    return good, bad


def plan_trials(req, index, options, cache_dir: Path) -> EnvPlan:
    """``plan_envs`` where the packages differ (nothing to resolve where they do not), with the
    settings after the package changes: one list of changes, one search."""
    if req.settings is None:
        return plan_envs(req, index, options, cache_dir)
    if diff(req.good_env, req.bad_env):
        planned = plan_envs(req, index, options, cache_dir)
    else:
        planned = EnvPlan((), (), (), gitrepo.check_repo(req.git_repo) if req.git_repo else None)
    return dataclasses.replace(planned, changes=(*planned.changes, *req.settings.settings),
                               notes=(*planned.notes, *req.settings.notes))
