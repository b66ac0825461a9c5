"""Changes that are settings, not packages: an environment variable, a key path of a config file
(JSON, YAML, TOML: ``zero_optimization.overlap_comm``) or a launcher flag, read from two files
(``env > good.env``; two configs; two command lines) and diffed as the level-1 search's changes.

A ``Setting`` stands beside ``environments.Change`` in one list: the search (``search.changes``)
sees only indices, the engine asks ``is_package`` where pins are concerned, and ``trialcase``
turns the settings a trial applies into the case it runs.  Values are kept as text: a config's
as JSON (``true``, ``4096``, ``"x"``), a variable's and a flag's as given; ``None`` is absent.
Pure but for the readers; every error is an ``InputError`` naming the file (exit 2).
"""

from __future__ import annotations

import enum
import json
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from dsbisect.core.errors import InputError
from dsbisect.core.files import read_small_text
from dsbisect.core.outside import clip
from dsbisect.core.redact import HIDDEN, secret_name
from dsbisect.envdiff.environments import Change, Kind
from dsbisect.envdiff.lockfiles import tomllib

CONFIG_FORMATS = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml"}
# Variables of the shell, the session and the environment's location, not settings of the job:
# two dumps taken apart differ in them whatever broke (PATH and the venv's are --good-env's business).
IGNORED_VARS = frozenset({
    "_", "PWD", "OLDPWD", "SHLVL", "HOME", "USER", "LOGNAME", "MAIL", "SHELL", "HOSTNAME", "TERM", "COLORTERM",
    "LS_COLORS", "PS1", "PS2", "DISPLAY", "LINES", "COLUMNS", "HISTFILE", "HISTSIZE", "STY", "WINDOW", "TZ_LOCAL",
    "PATH", "VIRTUAL_ENV", "VIRTUAL_ENV_PROMPT", "PYTHONHOME", "CONDA_PREFIX", "CONDA_DEFAULT_ENV",
    "CONDA_SHLVL", "CONDA_PROMPT_MODIFIER", "UV_PROJECT_ENVIRONMENT", "MOTD_SHOWN", "DBUS_SESSION_BUS_ADDRESS"})
IGNORED_PREFIXES = ("SSH_", "XDG_", "TMUX", "TERM_", "DSBISECT_", "BASH_FUNC_", "SLURM_", "PMI_", "OMPI_COMM_")
_VAR = re.compile(r"^(?:export\s+|declare -x\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_SHOWN = 48  # characters of a value a report shows


class Where(enum.Enum):
    ENV = "env"
    CONFIG = "config"
    FLAG = "flag"


@dataclass(frozen=True)
class Setting:
    """One setting that differs: ``good`` -> ``bad`` (text; None: absent on that side)."""

    where: Where
    path: tuple[str, ...]  # a config's key path; a variable's or a flag's name alone
    good: str | None
    bad: str | None

    @property
    def name(self) -> str:
        return ".".join(self.path)

    @property
    def kind(self) -> Kind:
        return Kind.of(self.good, self.bad)

    @property
    def secret(self) -> bool:
        return any(secret_name(p) for p in self.path)

    bisectable = False  # a setting is its own answer: no releases below it
    whole = False
    notes: tuple[str, ...] = ()

    def shown(self, value: str | None) -> str:
        if value is None:
            return "(unset)" if self.where is Where.ENV else "(absent)"
        if self.secret:
            return HIDDEN
        if self.where is Where.FLAG and value == "":
            return "(present)"
        return clip(value, _SHOWN) if value else "''"

    def describe(self) -> str:
        """``config zero_optimization.overlap_comm true -> false``, ``env NCCL_P2P_DISABLE (unset) -> 1``."""
        return f"{self.where.value} {self.name} {self.shown(self.good)} -> {self.shown(self.bad)}"


AnyChange = Change | Setting


def is_package(change: AnyChange) -> bool:
    return isinstance(change, Change)


_END_WORD = {Where.CONFIG: "config", Where.ENV: "vars", Where.FLAG: "command"}
END_WORDS = ("env", "config", "vars", "command", "settings")


def ends_word(changes: Iterable[AnyChange]) -> str:
    """What the two ends are called (``good config``, ``bad vars``): ``env`` where a package
    differs, else the one kind of setting that does (``config``, ``vars``, ``command``), else
    ``settings``."""
    kinds = {"env" if is_package(c) else _END_WORD[c.where] for c in changes}
    if not kinds or "env" in kinds:
        return "env"
    return kinds.pop() if len(kinds) == 1 else "settings"


def is_end_label(label: str) -> bool:
    """``good env``, ``bad config``, ...: a label of one of the two ends, not of a trial."""
    side, _, word = label.partition(" ")
    return side in ("good", "bad") and word in END_WORDS


def setting_json(s: Setting) -> dict:
    """A setting as ``env_diff.changes`` lists it: the keys of a package change, plus ``setting``."""
    return {"name": s.name, "kind": s.kind.value, "good": s.shown(s.good) if s.secret else s.good,
            "bad": s.shown(s.bad) if s.secret else s.bad, "bisectable": False, "describe": s.describe(),
            "setting": s.where.value}


def diff_settings(where: Where, good: Mapping[tuple[str, ...], str], bad: Mapping[tuple[str, ...], str]
                  ) -> tuple[Setting, ...]:
    """What differs between two flat maps of one kind, in the good side's order, then the added ones."""
    keys = list(dict.fromkeys([*good, *bad]))
    return tuple(Setting(where, k, good.get(k), bad.get(k)) for k in keys if good.get(k) != bad.get(k))


# ---------------------------------------------------------------------- reading


def _text(path: Path, what: str) -> str:
    try:
        return read_small_text(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file ({what})") from None
    except IsADirectoryError:
        raise InputError(f"{path}: a folder, not a file ({what})") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text ({what})") from None
    except OSError as e:
        raise InputError(f"{path}: cannot be read ({what}): {e.strerror or e}") from None


def read_vars(path: Path) -> dict[str, str]:
    """The variables of an ``env`` (or ``export -p``, or ``.env``) dump; a line that is not
    ``NAME=value`` continues the value before it (a value with a newline, as ``env`` prints it)."""
    out: dict[str, str] = {}
    last = None
    for n, line in enumerate(_text(path, "an environment dump: env > FILE").splitlines(), 1):
        m = _VAR.match(line)
        if m:
            last, value = m.group(1), m.group(2)
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            out[last] = value
        elif line.strip().startswith("#") or not line.strip() and last is None:
            continue
        elif last is None:
            raise InputError(f"{path}:{n}: not NAME=value (an environment dump: env > FILE)")
        else:
            out[last] += "\n" + line
    if not out:
        raise InputError(f"{path}: no variables (an environment dump: env > FILE)")
    return out


def ignored_var(name: str) -> bool:
    return name in IGNORED_VARS or name.startswith(IGNORED_PREFIXES)


def var_settings(good: Mapping[str, str], bad: Mapping[str, str]) -> tuple[tuple[Setting, ...], tuple[str, ...]]:
    """The variables that differ, less the shell's and the session's (named in the second part)."""
    g = {(k,): v for k, v in good.items() if not ignored_var(k)}
    b = {(k,): v for k, v in bad.items() if not ignored_var(k)}
    left = sorted({k for k in (*good, *bad) if ignored_var(k) and good.get(k) != bad.get(k)})
    return diff_settings(Where.ENV, g, b), tuple(left)


def config_format(path: Path) -> str:
    fmt = CONFIG_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise InputError(f"{path}: not a config dsbisect reads (.json, .yaml, .yml or .toml)")
    return fmt


def parse_config(path: Path, text: str | None = None) -> dict:
    """A config file's content as plain data (a mapping at the top); InputError ``file:line``."""
    fmt = config_format(path)
    text = _text(path, "a config file") if text is None else text
    try:
        if fmt == "json":
            data = json.loads(text)
        elif fmt == "yaml":
            data = yaml.safe_load(text)
        else:
            data = tomllib.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: not valid JSON: {e.msg}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise InputError(f"{path}:{mark.line + 1 if mark else 1}: not valid YAML: "
                         f"{getattr(e, 'problem', None) or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: not valid TOML: {e}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: the top of a config must be a mapping of keys (it is {type(data).__name__})")
    return data


def flatten(data: Mapping, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], str]:
    """Each leaf's key path -> its value as JSON text (a list is one leaf; an empty mapping too)."""
    out: dict[tuple[str, ...], str] = {}
    for k, v in data.items():
        path = (*prefix, str(k))
        if isinstance(v, Mapping) and v:
            out |= flatten(v, path)
        else:
            out[path] = json.dumps(v, sort_keys=True, default=str)
    return out


def config_settings(good: Path, bad: Path) -> tuple[Setting, ...]:
    """The key paths whose values differ between two configs of one format."""
    if config_format(good) != config_format(bad):
        raise InputError(f"{good} and {bad} are configs of different formats ({config_format(good)}, "
                         f"{config_format(bad)}): give two of one format")
    return diff_settings(Where.CONFIG, flatten(parse_config(good)), flatten(parse_config(bad)))


# ------------------------------------------------------------------ launch lines


@dataclass(frozen=True)
class Line:
    """A command line as options and positionals: ``segments[i]`` holds the options before the
    i-th positional (the last: after the last positional), each (name, value or "" for a switch)."""

    positionals: tuple[str, ...]
    segments: tuple[tuple[tuple[str, str], ...], ...]


def is_option(word: str) -> bool:
    """An option's word (``--x``, ``-x``, ``--x=1``), not a value such as ``-1`` or ``-``."""
    return word.startswith("-") and word not in ("-", "--") and not re.fullmatch(r"-\d[\d.e+-]*", word)


def parse_line(words: Iterable[str], where: str) -> Line:
    """Options as ``--name value``, ``--name=value`` or a switch (an option followed by another
    option or nothing); a word after an option is its value."""
    words, positionals, segments, current, i = list(words), [], [], [], 0
    while i < len(words):
        w = words[i]
        if is_option(w):
            name, eq, value = w.partition("=")
            if not eq and i + 1 < len(words) and not is_option(words[i + 1]):
                value, i = words[i + 1], i + 1
            if any(n == name for n, _ in current):
                raise InputError(f"{where}: {name} is given twice before the same word; dsbisect diffs one of each")
            current.append((name, value))
        else:
            positionals.append(w)
            segments.append(tuple(current))
            current = []
        i += 1
    segments.append(tuple(current))
    return Line(tuple(positionals), tuple(segments))


def flag_settings(good: Line, bad: Line) -> tuple[Setting, ...]:
    """The options that differ between two lines with the same positionals."""
    if good.positionals != bad.positionals:
        raise InputError("the good and the bad command line differ in more than options: "
                         f"{shlex.join(good.positionals)} vs {shlex.join(bad.positionals)} (a switch before the "
                         "script takes it as its value: write --switch after it, or --name=value)")
    out = []
    for i, (g, b) in enumerate(zip(good.segments, bad.segments)):
        out += diff_settings(Where.FLAG, {(str(i), n): v for n, v in g}, {(str(i), n): v for n, v in b})
    return tuple(Setting(s.where, s.path[1:], s.good, s.bad) if _once(s, out) else s for s in out)


def _once(s: Setting, all_: list[Setting]) -> bool:
    """A flag's name alone names it, unless it differs in two places of the line."""
    return sum(1 for x in all_ if x.path[1:] == s.path[1:]) == 1


def flag_words(good: Line, bad: Line, applied: Iterable[Setting]) -> list[str]:
    """The good line with the applied flag settings as in the bad line."""
    chosen = {s.path for s in applied}
    words: list[str] = []
    for i, (g, b) in enumerate(zip(good.segments, bad.segments)):
        bad_of, good_of = dict(b), dict(g)
        names = list(dict.fromkeys([*good_of, *bad_of]))
        for n in names:
            use_bad = (str(i), n) in chosen or (n,) in chosen and _segment_of(good, bad, n) == i
            value = bad_of.get(n) if use_bad else good_of.get(n)
            if value is not None:
                words += [n, value] if value else [n]
        if i < len(good.positionals):
            words.append(good.positionals[i])
    return words


def _segment_of(good: Line, bad: Line, name: str) -> int:
    """Where a flag named alone (it differs in one place) differs."""
    for i, (g, b) in enumerate(zip(good.segments, bad.segments)):
        if dict(g).get(name) != dict(b).get(name):
            return i
    return -1


def change_json(c: Change) -> dict:
    if not is_package(c):
        return setting_json(c)
    return {"name": c.name, "kind": c.kind.value, "good": c.good.requirement if c.good else None,
            "bad": c.bad.requirement if c.bad else None, "bisectable": c.bisectable, "describe": c.describe()}
