"""The settings that differ between two ends -- two configs, two variable dumps, two command
lines -- read and checked before anything runs (``SettingsPlan``), and the word of the command
line that names the config, which each trial's config replaces (``envdiff.trialcase``).
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dsbisect.core.errors import InputError
from dsbisect.core.model import digest
from dsbisect.core.redact import remember, secret_values
from dsbisect.envdiff.settings import (
    Line,
    Setting,
    config_format,
    config_settings,
    flag_settings,
    parse_line,
    read_vars,
    var_settings,
)

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


def read_plan(pair, words: Sequence[str], cwd: Path) -> SettingsPlan | None:
    """``bisect``'s settings options (``jobs.EnvPair``) read and checked; None when none is given."""
    files = SettingsFiles(pair.good_config, pair.bad_config, pair.good_vars, pair.bad_vars, pair.good_command)
    if not files.given:
        return None
    if not words:
        raise InputError("give the command line that fails after --: each trial runs it with its settings")
    return read_settings(files, words, cwd)
