"""Where packages come from, resolved once: dsbisect's command line, then uv's settings, then pip's.

The release list, the installs (uv) and the builds (pip) must read one index configuration,
or the candidates come from a mirror while the installs come from elsewhere.  ``resolve``
reads what each tool would read and returns a ``Resolved``: the effective ``IndexOptions``
(complete: given with ``uv_args()`` to a uv that reads no configuration of its own, it gives
the same indexes), where each setting came from, and notes for the report.

Precedence, setting by setting:

1. the command line: ``--index-url`` replaces, ``--extra-index-url`` and ``--find-links``
   come first and add to what is configured, ``--offline``;
2. uv's own settings, combined as uv combines them (uv's docs, "Configuration files" and
   "Environment variables"; checked against uv 0.13 itself): the environment
   (``UV_DEFAULT_INDEX``, ``UV_INDEX``, ``UV_INDEX_URL``, ``UV_EXTRA_INDEX_URL``,
   ``UV_FIND_LINKS``, ``UV_OFFLINE``, ``UV_INDEX_STRATEGY``) before the configuration files
   (``UV_CONFIG_FILE`` alone if given, none with ``UV_NO_CONFIG``; else the nearest ``uv.toml``
   or ``pyproject.toml`` with ``[tool.uv]`` from the working directory up, then
   ``$XDG_CONFIG_HOME/uv/uv.toml`` (``~/.config/uv/uv.toml``), then the first
   ``$XDG_CONFIG_DIRS/uv/uv.toml`` (``/etc/xdg``) or ``/etc/uv/uv.toml``).  Strings and
   booleans: the nearer file wins; lists are joined, nearer first; ``[pip]`` wins over the
   top level.  uv takes the default index from the first of ``UV_DEFAULT_INDEX``,
   ``UV_INDEX_URL``, the files' ``[[index]]`` tables with ``default = true``, the files'
   ``index-url``;
3. pip's settings (pip's docs, "Configuration", and pip's ``configuration.py``): the
   environment (``PIP_INDEX_URL``, ``PIP_EXTRA_INDEX_URL``, ``PIP_FIND_LINKS``,
   ``PIP_NO_INDEX``) over ``PIP_CONFIG_FILE`` over ``$VIRTUAL_ENV/pip.conf`` over the user's
   files (``~/.config/pip/pip.conf`` over ``~/.pip/pip.conf``; not read when
   ``PIP_CONFIG_FILE`` names a file) over the global ones (``/etc/pip.conf`` over
   ``/etc/xdg/pip/pip.conf``); ``[install]`` over ``[global]`` whatever the file.  pip's
   settings count only when uv has none of its own about indexes: uv does the installs, and
   uv never reads pip's settings.  A pip setting left out this way is named in the notes.
"""

from __future__ import annotations

import configparser
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsbisect.core.errors import InputError
from dsbisect.core.files import read_small_text
from dsbisect.core.model import IndexOptions, IndexStrategy
from dsbisect.core.redact import redact

try:
    import tomllib as _toml
except ModuleNotFoundError:  # Python 3.10
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ModuleNotFoundError:
        _toml = None  # type: ignore[assignment]

PYPI = "https://pypi.org/simple/"
STRATEGIES = tuple(s.value for s in IndexStrategy)

# Environment variables that decide uv's indexes; ``uv_child_env`` removes them (the resolved
# options say it all), and UV_CONFIG_FILE since it outranks --no-config in uv.
UV_INDEX_ENV = ("UV_DEFAULT_INDEX", "UV_INDEX", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS",
                "UV_OFFLINE", "UV_CONFIG_FILE", "UV_NO_INDEX")
PIP_INDEX_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_CONFIG_FILE")

_UV_INDEX_KEYS = {"index-url", "extra-index-url", "find-links", "no-index", "index", "index-strategy", "offline"}
# Keys of a uv file that do not concern ``uv pip install`` (project-only, or dsbisect sets them).
_UV_QUIET_KEYS = {"cache-dir", "required-version", "sources", "dev-dependencies", "workspace", "managed",
                  "package", "conflicts", "default-groups", "dependency-groups", "environments",
                  "required-environments", "build-backend", "cache-keys", "override-dependencies",
                  "constraint-dependencies", "build-constraint-dependencies", "exclude-dependencies",
                  "python-downloads", "python-preference", "preview", "concurrent-downloads",
                  "concurrent-builds", "concurrent-installs", "python-install-mirror", "pypy-install-mirror",
                  "python-downloads-json-url", "publish-url", "trusted-publishing", "check-url",
                  "add-bounds", "audit"}
# pip.conf keys that decide whether an index can be reached at all (noted when dropped).
_PIP_NETWORK_KEYS = ("cert", "client-cert", "trusted-host", "proxy", "keyring-provider")
_TRUE = {"1", "true", "yes", "y", "on", "t"}
_FALSE = {"0", "false", "no", "n", "off", "f"}


# ------------------------------------------------------------------------- result


@dataclass(frozen=True)
class Resolved:
    """The effective index options and where each setting came from.

    ``index.index_url`` None means PyPI.  ``sources`` pairs each setting (``index_url``,
    ``extra_index_urls``, ``find_links``, ``offline``, ``index_strategy``) with where it came
    from: ``--index-url``, ``UV_INDEX_URL``, a uv file's path, ``PIP_INDEX_URL``,
    ``pip.conf ~/.config/pip/pip.conf``, or ``default``.  ``index.strategy`` is uv's
    (None: uv's default, ``first-index``), which ``IndexOptions`` does not carry.  ``notes``
    (credentials hidden) say what was left out and why; ``files`` are the configuration files read.
    """

    index: IndexOptions
    sources: tuple[tuple[str, str], ...]
    notes: tuple[str, ...] = ()
    files: tuple[str, ...] = ()

    @property
    def index_strategy(self) -> IndexStrategy | None:
        return self.index.strategy

    def source(self, setting: str) -> str:
        return dict(self.sources).get(setting, "default")

    def describe(self) -> str:
        """One line for reports, credentials hidden."""
        ix = self.index
        parts = []
        if ix.offline:
            parts.append(f"offline ({self.source('offline')})")
        else:
            parts.append(f"index {ix.index_url or PYPI} ({self.source('index_url')})")
            if ix.extra_index_urls:
                parts.append(f"extra {' '.join(ix.extra_index_urls)} ({self.source('extra_index_urls')})")
        if ix.find_links:
            parts.append(f"find-links {' '.join(ix.find_links)} ({self.source('find_links')})")
        if self.index_strategy and self.index_strategy is not IndexStrategy.FIRST_INDEX:
            parts.append(f"index-strategy {self.index_strategy.value} ({self.source('index_strategy')})")
        return redact("; ".join(parts))


def uv_child_env(env: Mapping[str, str], resolved: Resolved | None = None) -> dict[str, str]:
    """``env`` for a uv that must see only ``IndexOptions.uv_args()``: uv's index variables
    removed, its configuration files off (``UV_NO_CONFIG``), the resolved index strategy kept."""
    out = {k: v for k, v in env.items() if k not in UV_INDEX_ENV}
    out["UV_NO_CONFIG"] = "1"
    if resolved is not None and resolved.index_strategy:
        out["UV_INDEX_STRATEGY"] = resolved.index_strategy.value
    return out


def pip_child_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a pip that must see only ``IndexOptions.pip_args()``: pip's index variables
    removed and no configuration file read (pip adds its configured lists to the command line's)."""
    out = {k: v for k, v in env.items() if k not in PIP_INDEX_ENV}
    out["PIP_CONFIG_FILE"] = os.devnull
    return out


# ------------------------------------------------------------------------ resolve


@dataclass(frozen=True)
class _Entry:
    """One index as uv lists them: a default candidate, an extra, a flat (find-links) one."""

    url: str
    origin: str
    default: bool = False
    explicit: bool = False
    flat: bool = False
    name: str | None = None


@dataclass
class _Layer:
    """What one tool's settings say (uv's environment and files together, or pip's)."""

    entries: list[_Entry] = field(default_factory=list)
    find_links: list[tuple[str, str]] = field(default_factory=list)
    no_index: tuple[bool, str] | None = None

    def says_anything(self) -> bool:
        return bool([e for e in self.entries if not e.explicit] or self.find_links or self.no_index)

    def origins(self) -> set[str]:
        """Where this tool's settings were read (``PIP_INDEX_URL``, ``pip.conf ~/...``)."""
        return {e.origin for e in self.entries} | {o for _, o in self.find_links} | (
            {self.no_index[1]} if self.no_index else set())


def resolve(cli: IndexOptions, env: Mapping[str, str], cwd: Path, home: Path, *,
            etc: Path = Path("/etc")) -> Resolved:
    """The index settings dsbisect uses, from ``cli`` (the options given on its command line),
    then uv's environment and configuration files, then pip's (see the module's docstring).

    ``env``, ``cwd``, ``home`` and ``etc`` (the system configuration folder) are where the
    tools would look.  A malformed file or value raises ``InputError`` naming it.
    """
    cwd = Path(os.path.abspath(cwd))
    notes: list[str] = []
    files: list[str] = []
    uv, uv_offline, strategy = _uv_layer(env, cwd, home, etc, notes, files)
    pip = _pip_layer(env, cwd, home, etc, notes, files)
    if uv.says_anything():
        base = uv
        _note_pip_ignored(pip, uv, notes)
    else:
        base = pip
    default, extras, flat, links = _chosen(cli, base, notes)
    offline: tuple[bool, str] | None = (True, "--offline") if cli.offline else None
    if offline is None and uv_offline and uv_offline[0]:
        offline = uv_offline
    if offline is None and base.no_index and base.no_index[0]:
        offline = base.no_index
    _note_credentials(env, [*([default] if default else []), *extras, *flat], notes)
    used = [*([default.origin] if default else []), *(e.origin for e in extras), *(o for _, o in links),
            *([offline[1]] if offline else [])]
    if strategy is None and base is pip and set(used) & pip.origins() and (default or extras):
        strategy = (IndexStrategy.UNSAFE_BEST_MATCH, PIP_STRATEGY)  # pip's own way with several indexes: the best version of any
    index = IndexOptions(offline=bool(offline), find_links=tuple(v for v, _ in links),
                         index_url=default.url if default else None, extra_index_urls=tuple(e.url for e in extras),
                         strategy=IndexStrategy(strategy[0]) if strategy else None)
    sources = (
        ("index_url", default.origin if default else "default"),
        ("extra_index_urls", _origins(e.origin for e in extras)),
        ("find_links", _origins(o for _, o in links)),
        ("offline", offline[1] if offline else "default"),
        ("index_strategy", strategy[1] if strategy else "default"),
    )
    return Resolved(index=index, sources=sources, notes=tuple(redact(n) for n in dict.fromkeys(notes)),
                    files=tuple(dict.fromkeys(files)))


# Where the index strategy comes from when dsbisect decides it: pip's settings name several
# indexes, and pip takes the best version of any of them (uv's unsafe-best-match).
PIP_STRATEGY = "pip's settings, as pip would use them"


def _chosen(cli: IndexOptions, base: _Layer, notes: list[str]):
    """The default index, the extra indexes and the find-links of the command line over ``base``
    (the tool whose settings count), as uv combines them."""
    cli_entries = ([_Entry(cli.index_url, "--index-url", default=True)] if cli.index_url else []) + [
        _Entry(u, "--extra-index-url") for u in cli.extra_index_urls]
    entries = _first_per_name(cli_entries + base.entries)
    default = next((e for e in entries if e.default and not e.flat), None)
    for e in entries:
        if e.default and not e.flat and default is not None and not _same(e.url, default.url):
            notes.append(f"{e.origin}: default index {e.url} not used: {default.origin} comes first")
        if e.default and e.flat:
            notes.append(f"{e.origin}: the flat index {e.url} marked default is used as --find-links; "
                         "the default index stays " + (default.url if default else "PyPI"))
    extras = _unique([e for e in entries if not e.default and not e.explicit and not e.flat],
                     skip=default.url if default else PYPI)
    flat = [e for e in entries if e.flat and (e.default or not e.explicit)]
    links = _unique_pairs([(_link(v), o) for v, o in [(d, "--find-links") for d in cli.find_links]
                           + base.find_links + [(e.url, e.origin) for e in flat]])
    return default, extras, flat, links


def _note_credentials(env: Mapping[str, str], entries: list[_Entry], notes: list[str]) -> None:
    for e in entries:
        if e.name and any(f"UV_INDEX_{_env_name(e.name)}_{k}" in env for k in ("USERNAME", "PASSWORD")):
            notes.append(f"index {e.name!r} ({e.url}) takes credentials from UV_INDEX_{_env_name(e.name)}_*, "
                         "which uv gives only to a named index of its own configuration; "
                         "dsbisect passes the URL, so put them in ~/.netrc or the keyring")


def _note_pip_ignored(pip: _Layer, uv: _Layer, notes: list[str]) -> None:
    if not pip.says_anything():
        return
    why = _origins([e.origin for e in uv.entries if not e.explicit] + [o for _, o in uv.find_links]
                   + ([uv.no_index[1]] if uv.no_index else []))
    for e in pip.entries:
        what = "index-url" if e.default else "extra-index-url"
        notes.append(f"{e.origin}: {what} {e.url} ignored: uv has index settings of its own ({why}) and uv does the installs")
    for value, origin in pip.find_links:
        notes.append(f"{origin}: find-links {value} ignored: uv has index settings of its own ({why}) and uv does the installs")
    if pip.no_index:
        notes.append(f"{pip.no_index[1]}: no-index ignored: uv has index settings of its own ({why}) and uv does the installs")


# --------------------------------------------------------------------------- uv


def _uv_layer(env: Mapping[str, str], cwd: Path, home: Path, etc: Path, notes: list[str],
              files: list[str]) -> tuple[_Layer, tuple[bool, str] | None, tuple[str, str] | None]:
    """uv's settings: (indexes, find-links, no-index), offline, index strategy."""
    if env.get("UV_NO_INDEX"):
        notes.append("UV_NO_INDEX is not a uv setting (uv has only --no-index and no-index = true); ignored")
    opts = _uv_files(env, cwd, home, etc, notes)
    files += [o.where for o in opts]
    return _uv_settings(env, cwd, opts)


def _uv_files(env: Mapping[str, str], cwd: Path, home: Path, etc: Path, notes: list[str]) -> list[_UvOptions]:
    """The index settings of the configuration files uv reads, nearest first."""
    opts = []
    config_file = env.get("UV_CONFIG_FILE")
    if config_file:
        path = _abs(config_file, cwd)
        if not path.is_file():
            raise InputError(f"UV_CONFIG_FILE={config_file}: no such file")
        opts.append(_uv_file(path, home, strict=True, notes=notes))
    elif not _boolish(env, "UV_NO_CONFIG"):
        project = _uv_project(cwd, home, notes)
        if project:
            opts.append(project)
        xdg = env.get("XDG_CONFIG_HOME", "")
        user = (Path(xdg) if xdg and Path(xdg).is_absolute() else home / ".config") / "uv" / "uv.toml"
        if user.is_file():
            opts.append(_uv_file(user, home, strict=True, notes=notes))
        if not _boolish(env, "UV_NO_SYSTEM_CONFIG"):
            system = _uv_system(env, etc)
            if system:
                opts.append(_uv_file(system, home, strict=True, notes=notes))
    return [o for o in opts if o is not None]


def _uv_settings(env: Mapping[str, str], cwd: Path, opts: list[_UvOptions]):
    """uv's environment over its files ``opts``: (indexes, find-links, no-index), offline, index strategy."""
    named: dict[str, _Entry] = {}  # the first index of each name, nearest file first
    for sec in [o.pip for o in opts] + [o.top for o in opts]:
        for e in sec.get("index", []):
            if e.name:
                named.setdefault(e.name, e)
    layer = _Layer()
    default_index = env.get("UV_DEFAULT_INDEX", "").strip()
    if default_index:
        layer.entries.append(_index_arg(default_index, "UV_DEFAULT_INDEX", True, named, cwd))
    layer.entries += [_index_arg(v, "UV_INDEX", False, named, cwd) for v in env.get("UV_INDEX", "").split()]
    layer.entries += [_Entry(_loc(v, cwd), "UV_EXTRA_INDEX_URL") for v in env.get("UV_EXTRA_INDEX_URL", "").split()]
    if env.get("UV_INDEX_URL", "").strip():
        layer.entries.append(_Entry(_loc(env["UV_INDEX_URL"].strip(), cwd), "UV_INDEX_URL", default=True))
    layer.find_links += [(_loc(v.strip(), cwd), "UV_FIND_LINKS") for v in env.get("UV_FIND_LINKS", "").split(",")
                         if v.strip()]

    # The files: [pip] before the top level, nearer files before farther ones (uv's ``combine``).
    sections = [o.pip for o in opts] + [o.top for o in opts]
    layer.entries += [e for s in sections for e in s.get("index", [])]
    layer.entries += [e for s in sections for e in s.get("extra-index-url", [])]
    layer.entries += [s["index-url"] for s in sections if "index-url" in s][:1]
    layer.find_links += [pair for s in sections for pair in s.get("find-links", [])]
    layer.no_index = next((s["no-index"] for s in sections if "no-index" in s), None)

    offline = None
    if env.get("UV_OFFLINE", "").strip():
        offline = (_boolish(env, "UV_OFFLINE"), "UV_OFFLINE")
    else:
        offline = next((o.top["offline"] for o in opts if "offline" in o.top), None)
    strategy = None
    if env.get("UV_INDEX_STRATEGY", "").strip():
        value = env["UV_INDEX_STRATEGY"].strip()
        if value not in STRATEGIES:
            raise InputError(f"UV_INDEX_STRATEGY={value}: not one of {', '.join(STRATEGIES)}")
        strategy = (value, "UV_INDEX_STRATEGY")
    else:
        strategy = next((s["index-strategy"] for s in sections if "index-strategy" in s), None)
    return layer, offline, strategy


@dataclass
class _UvOptions:
    where: str
    top: dict[str, Any]
    pip: dict[str, Any]


def _uv_project(cwd: Path, home: Path, notes: list[str]) -> _UvOptions | None:
    """The nearest uv.toml, or pyproject.toml with a [tool.uv] table, from ``cwd`` up.

    As uv does: a uv.toml wins over the pyproject.toml beside it; a pyproject.toml without
    [tool.uv], or one uv cannot read (uv warns), is passed over and the search goes on."""
    for folder in (cwd, *cwd.parents):
        if (folder / "uv.toml").is_file():
            return _uv_file(folder / "uv.toml", home, strict=True, notes=notes)
        if (folder / "pyproject.toml").is_file():
            found = _uv_file(folder / "pyproject.toml", home, strict=False, notes=notes)
            if found is not None:
                return found
    return None


def _uv_system(env: Mapping[str, str], etc: Path) -> Path | None:
    """uv's system file: the first ``$XDG_CONFIG_DIRS/uv/uv.toml`` (default /etc/xdg), else /etc/uv/uv.toml."""
    dirs = env.get("XDG_CONFIG_DIRS") or str(etc / "xdg")
    for d in dirs.split(":"):
        if not d:
            break
        if (Path(d) / "uv" / "uv.toml").is_file():
            return Path(d) / "uv" / "uv.toml"
    path = etc / "uv" / "uv.toml"
    return path if path.is_file() else None


def _uv_file(path: Path, home: Path, *, strict: bool, notes: list[str]) -> _UvOptions | None:
    """The index settings of a uv.toml (``strict``: an error is an InputError, as uv fails on it)
    or of a pyproject.toml's [tool.uv] (None when it has none or uv would pass it over)."""
    where = _show(path, home)
    if _toml is None:
        raise InputError(f"{where}: reading uv's configuration needs Python 3.11 (tomllib) or the tomli package")
    try:
        data = _toml.loads(read_small_text(path))
    except OSError as e:
        raise InputError(f"{where}: cannot read it ({e.strerror or e})") from None
    except (_toml.TOMLDecodeError, UnicodeDecodeError) as e:
        if strict:
            raise InputError(f"{where}: not valid TOML ({_one_line(e)})") from None
        notes.append(f"{where} passed over, as uv does: not valid TOML ({_one_line(e)})")
        return None
    if not strict:
        tool = data.get("tool")
        data = tool.get("uv") if isinstance(tool, dict) else None
        if data is None:
            return None
        where = f"{where} [tool.uv]"
    try:
        if not isinstance(data, dict):
            raise _Bad("[tool.uv] must be a table")
        pip = data.get("pip", {})
        if not isinstance(pip, dict):
            raise _Bad("pip must be a table")
        top = _uv_options(data, where, path.parent, top=True)
        pip_opts = _uv_options(pip, where, path.parent, top=False)
    except _Bad as e:
        if strict:
            raise InputError(f"{where}: {e}") from None
        notes.append(f"{where} passed over, as uv does: {e}")
        return None
    dropped = [k for k in data if k not in _UV_INDEX_KEYS | _UV_QUIET_KEYS | {"pip"}]
    dropped += [f"pip.{k}" for k in pip if k not in _UV_INDEX_KEYS]
    if dropped:
        notes.append(f"{where}: {', '.join(dropped)} not applied: dsbisect runs uv with --no-config "
                     "(set them with uv's environment variables)")
    return _UvOptions(where, top, pip_opts)


class _Bad(Exception):
    """A value of the wrong type in a uv table."""


def _uv_options(table: dict, where: str, root: Path, *, top: bool) -> dict[str, Any]:
    """The index settings of one uv table, as entries with their origin; paths made absolute
    against the file's folder (uv reads them relative to it)."""
    out: dict[str, Any] = {}
    if "index-url" in table:
        out["index-url"] = _Entry(_loc(_str(table, "index-url"), root), where, default=True)
    if "extra-index-url" in table:
        out["extra-index-url"] = [_Entry(_loc(u, root), where) for u in _strs(table, "extra-index-url")]
    if "find-links" in table:
        out["find-links"] = [(_loc(u, root), where) for u in _strs(table, "find-links")]
    if "no-index" in table:
        out["no-index"] = (_bool(table, "no-index"), where)
    if "index-strategy" in table:
        value = _str(table, "index-strategy")
        if value not in STRATEGIES:
            raise _Bad(f"index-strategy = {value!r}: not one of {', '.join(STRATEGIES)}")
        out["index-strategy"] = (value, where)
    if top and "offline" in table:
        out["offline"] = (_bool(table, "offline"), where)
    if "index" in table:
        indexes = table["index"]
        if not isinstance(indexes, list) or not all(isinstance(t, dict) for t in indexes):
            raise _Bad("index must be an array of tables ([[index]])")
        out["index"] = [_index_table(t, where, root) for t in indexes]
    return out


def _index_table(t: dict, where: str, root: Path) -> _Entry:
    if not isinstance(t.get("url"), str):
        raise _Bad("every [[index]] needs a url (a string)")
    fmt = t.get("format", "simple")
    if fmt not in ("simple", "flat"):
        raise _Bad(f"[[index]] format = {fmt!r}: not simple or flat")
    for key in ("default", "explicit"):
        if not isinstance(t.get(key, False), bool):
            raise _Bad(f"[[index]] {key} must be true or false")
    name = t.get("name")
    if name is not None and not isinstance(name, str):
        raise _Bad("[[index]] name must be a string")
    return _Entry(_loc(t["url"], root), where, default=t.get("default", False), explicit=t.get("explicit", False),
                  flat=fmt == "flat", name=name)


def _index_arg(value: str, origin: str, default: bool, named: Mapping[str, _Entry], cwd: Path) -> _Entry:
    """A ``--index``/``--default-index`` value as uv takes it: ``NAME=URL``, the name of an
    index of the configuration, or a URL or path."""
    if value in named and "/" not in value:
        e = named[value]
        return _Entry(e.url, origin, default=default, flat=e.flat, name=e.name)
    name, sep, url = value.partition("=")
    if sep and ":" not in name and re.fullmatch(r"[A-Za-z0-9._-]+", name):
        return _Entry(_loc(url, cwd), origin, default=default, name=name)
    return _Entry(_loc(value, cwd), origin, default=default)


# -------------------------------------------------------------------------- pip


def _pip_layer(env: Mapping[str, str], cwd: Path, home: Path, etc: Path, notes: list[str],
               files: list[str]) -> _Layer:
    """pip's index settings, merged as pip merges them (pip's ``configuration.py``)."""
    values = _pip_values(env, cwd, home, etc, files)

    def get(key: str) -> tuple[str, str] | None:
        for section in (":env:", "install", "global"):
            if (section, key) in values:
                return values[(section, key)]
        return None

    layer = _Layer()
    if got := get("index-url"):
        layer.entries.append(_Entry(_loc(got[0].strip(), cwd), got[1], default=True))
    if got := get("extra-index-url"):
        layer.entries += [_Entry(_loc(u, cwd), got[1]) for u in got[0].split()]
    if got := get("find-links"):
        layer.find_links = [(_loc(u, cwd), got[1]) for u in got[0].split()]
    if got := get("no-index"):
        flag = got[0].strip().lower()
        if flag not in _TRUE | _FALSE:
            raise InputError(f"{got[1]}: no-index = {got[0].strip()!r} is not a boolean (yes/no, true/false, 1/0)")
        layer.no_index = (flag in _TRUE, got[1])
    for key in _PIP_NETWORK_KEYS:
        got = get(key)
        if got and got[1].startswith("pip.conf"):  # a PIP_ variable would outrank the file and stay
            notes.append(f"{got[1]}: {key} not applied: dsbisect runs pip with PIP_CONFIG_FILE={os.devnull} "
                         f"(set PIP_{key.upper().replace('-', '_')} instead)")
    return layer


def _pip_files(env: Mapping[str, str], cwd: Path, home: Path, etc: Path) -> list[Path]:
    """The pip.conf files pip reads, weakest first."""
    config_file = env.get("PIP_CONFIG_FILE")
    read: list[Path] = []
    if config_file != os.devnull:
        xdg_dirs = (env.get("XDG_CONFIG_DIRS", "").strip() or str(etc / "xdg")).split(":")
        read += [Path(d) / "pip" / "pip.conf" for d in xdg_dirs if d] + [etc / "pip.conf"]  # global
        if not (config_file and _abs(config_file, cwd).exists()):  # pip skips the user's files then
            xdg = env.get("XDG_CONFIG_HOME", "").strip()
            read += [home / ".pip" / "pip.conf", (Path(xdg) if xdg else home / ".config") / "pip" / "pip.conf"]
        if env.get("VIRTUAL_ENV"):
            read.append(Path(env["VIRTUAL_ENV"]) / "pip.conf")  # site
        if config_file:
            read.append(_abs(config_file, cwd))  # PIP_CONFIG_FILE outranks them all (pip's code and docs since 23.1)
    return read


def _pip_values(env: Mapping[str, str], cwd: Path, home: Path, etc: Path,
                files: list[str]) -> dict[tuple[str, str], tuple[str, str]]:
    """(section, key) -> (value, origin) of pip's files and ``PIP_*`` variables, the stronger last."""
    values: dict[tuple[str, str], tuple[str, str]] = {}
    for path in _pip_files(env, cwd, home, etc):
        if not path.is_file():
            continue
        where = f"pip.conf {_show(path, home)}"
        files.append(where)
        parser = configparser.RawConfigParser()
        try:
            parser.read_string(read_small_text(path), source=str(path))
        except OSError as e:
            raise InputError(f"{where}: cannot read it ({e.strerror or e})") from None
        except (configparser.Error, UnicodeDecodeError) as e:
            raise InputError(f"{where}: not a valid pip configuration file ({_one_line(e)})") from None
        for section in ("global", "install"):
            if parser.has_section(section):
                for key, value in parser.items(section):
                    if value.strip():  # pip ignores empty values
                        values[(section, key.lower().replace("_", "-"))] = (value, where)
    for name, value in env.items():
        if name.startswith("PIP_") and value.strip():
            values[(":env:", name[4:].lower().replace("_", "-"))] = (value, name)
    return values


# ------------------------------------------------------------------------ helpers


def _first_per_name(entries: list[_Entry]) -> list[_Entry]:
    """uv keeps the first index of each name."""
    seen: set[str] = set()
    out = []
    for e in entries:
        if e.name:
            if e.name in seen:
                continue
            seen.add(e.name)
        out.append(e)
    return out


def _same(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def _unique(entries: list[_Entry], skip: str) -> list[_Entry]:
    out: list[_Entry] = []
    for e in entries:
        if not _same(e.url, skip) and not any(_same(e.url, o.url) for o in out):
            out.append(e)
    return out


def _unique_pairs(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for v, o in pairs:
        if not any(_same(v, w) for w, _ in out):
            out.append((v, o))
    return out


def _origins(origins) -> str:
    return ", ".join(dict.fromkeys(origins)) or "default"


def _loc(value: str, base: Path) -> str:
    """A URL as given; a path made absolute against ``base``."""
    value = value.strip()
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", value):
        return value
    return str(_abs(value, base))


def _link(value: str) -> str:
    """A find-links location: a ``file://`` URL becomes its path, which the release list can read."""
    if value.startswith("file://"):
        from urllib.parse import unquote, urlparse

        return unquote(urlparse(value).path)
    return value


def _abs(value: str, base: Path) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else Path(os.path.normpath(base / path))


def _show(path: Path, home: Path) -> str:
    try:
        return "~/" + str(path.relative_to(home))
    except ValueError:
        return str(path)


def _env_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def _boolish(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if not value:
        return False
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InputError(f"{name}={env[name]}: not a boolean (uv takes 1/0, true/false, yes/no, on/off)")


def _str(table: dict, key: str) -> str:
    if not isinstance(table[key], str):
        raise _Bad(f"{key} must be a string")
    return table[key]


def _strs(table: dict, key: str) -> list[str]:
    value = table[key]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Bad(f"{key} must be a list of strings")
    return value


def _bool(table: dict, key: str) -> bool:
    if not isinstance(table[key], bool):
        raise _Bad(f"{key} must be true or false")
    return table[key]


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())

