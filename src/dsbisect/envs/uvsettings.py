"""uv's index settings, read as uv reads them: its environment (``UV_DEFAULT_INDEX``,
``UV_INDEX``, ``UV_INDEX_URL``, ...) over its configuration files (``UV_CONFIG_FILE``, or the
nearest ``uv.toml`` / ``pyproject.toml`` ``[tool.uv]``, then the user's and the system's), nearest
first; see ``indexes`` for how they rank against the command line and pip's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsbisect.core.errors import InputError
from dsbisect.core.files import read_small_text
from dsbisect.core.model import IndexStrategy
from dsbisect.envs.indexlayer import FALSE, TRUE, Entry, Layer, absolute, location, one_line, shown

try:
    import tomllib as _toml
except ModuleNotFoundError:  # Python 3.10
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ModuleNotFoundError:
        _toml = None  # type: ignore[assignment]

STRATEGIES = tuple(s.value for s in IndexStrategy)
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


def uv_layer(env: Mapping[str, str], cwd: Path, home: Path, etc: Path, notes: list[str],
              files: list[str]) -> tuple[Layer, tuple[bool, str] | None, tuple[str, str] | None]:
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
        path = absolute(config_file, cwd)
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
    named: dict[str, Entry] = {}  # the first index of each name, nearest file first
    for sec in [o.pip for o in opts] + [o.top for o in opts]:
        for e in sec.get("index", []):
            if e.name:
                named.setdefault(e.name, e)
    layer = Layer()
    default_index = env.get("UV_DEFAULT_INDEX", "").strip()
    if default_index:
        layer.entries.append(_index_arg(default_index, "UV_DEFAULT_INDEX", True, named, cwd))
    layer.entries += [_index_arg(v, "UV_INDEX", False, named, cwd) for v in env.get("UV_INDEX", "").split()]
    layer.entries += [Entry(location(v, cwd), "UV_EXTRA_INDEX_URL") for v in env.get("UV_EXTRA_INDEX_URL", "").split()]
    if env.get("UV_INDEX_URL", "").strip():
        layer.entries.append(Entry(location(env["UV_INDEX_URL"].strip(), cwd), "UV_INDEX_URL", default=True))
    layer.find_links += [(location(v.strip(), cwd), "UV_FIND_LINKS") for v in env.get("UV_FIND_LINKS", "").split(",")
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
    where = shown(path, home)
    if _toml is None:
        raise InputError(f"{where}: reading uv's configuration needs Python 3.11 (tomllib) or the tomli package")
    try:
        data = _toml.loads(read_small_text(path))
    except OSError as e:
        raise InputError(f"{where}: cannot read it ({e.strerror or e})") from None
    except (_toml.TOMLDecodeError, UnicodeDecodeError) as e:
        if strict:
            raise InputError(f"{where}: not valid TOML ({one_line(e)})") from None
        notes.append(f"{where} passed over, as uv does: not valid TOML ({one_line(e)})")
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
        out["index-url"] = Entry(location(_str(table, "index-url"), root), where, default=True)
    if "extra-index-url" in table:
        out["extra-index-url"] = [Entry(location(u, root), where) for u in _strs(table, "extra-index-url")]
    if "find-links" in table:
        out["find-links"] = [(location(u, root), where) for u in _strs(table, "find-links")]
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


def _index_table(t: dict, where: str, root: Path) -> Entry:
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
    return Entry(location(t["url"], root), where, default=t.get("default", False), explicit=t.get("explicit", False),
                  flat=fmt == "flat", name=name)


def _index_arg(value: str, origin: str, default: bool, named: Mapping[str, Entry], cwd: Path) -> Entry:
    """A ``--index``/``--default-index`` value as uv takes it: ``NAME=URL``, the name of an
    index of the configuration, or a URL or path."""
    if value in named and "/" not in value:
        e = named[value]
        return Entry(e.url, origin, default=default, flat=e.flat, name=e.name)
    name, sep, url = value.partition("=")
    if sep and ":" not in name and re.fullmatch(r"[A-Za-z0-9._-]+", name):
        return Entry(location(url, cwd), origin, default=default, name=name)
    return Entry(location(value, cwd), origin, default=default)


def _boolish(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if not value:
        return False
    if value in TRUE:
        return True
    if value in FALSE:
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
