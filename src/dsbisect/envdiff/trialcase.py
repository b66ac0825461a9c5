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
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from dsbisect.envdiff.environments import Environment, diff
from dsbisect.envdiff.plan import EnvPlan, plan_envs
from dsbisect.envdiff.settingsplan import CONFIG_WORD, SettingsFiles, SettingsPlan
from dsbisect.envdiff.sources import EnvSpec, Origin, Resolved
from dsbisect.envs import gitrepo
from dsbisect.core.model import Case, Point, digest
from dsbisect.core.proc import UNSET
from dsbisect.envdiff.settings import (
    Setting,
    Where,
    config_format,
    flag_words,
)
from dsbisect.run.matrix import command_case

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
