"""``uv.lock`` and PEP 751 ``pylock.toml`` files, as the pins of one environment.

A lock is a recipe, not an environment: a universal ``uv.lock`` holds what every platform
and python needs.  Its pins here are those the project's own root reaches on this
interpreter (marker values from the caller): the edges' markers decide, as ``uv sync``
does; every extra and dependency group of the root is counted (a lock does not say which
were installed: the notes say so).  The root itself (``editable``/``virtual`` source of the
workspace, a pylock ``directory`` at ``.``) is not a change to apply and is left out.

TOML is read with the standard library's ``tomllib`` (python >= 3.11), else with ``tomli``,
the library it came from.  No I/O: the caller passes the text.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

from packaging.utils import canonicalize_name

from dsbisect.core.errors import InputError
from dsbisect.envdiff.pins import Pin, make_pin, marker_holds
from dsbisect.core.redact import redact

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    import tomli as tomllib


_SOURCES = ("registry", "git", "url", "path", "directory", "editable", "virtual")
_ONE_ENV = "give a freeze of the environment that ran (uv pip freeze > env.txt)"


class NotALock(Exception):
    """TOML, but neither a uv.lock nor a pylock.toml (the caller words the error)."""


@dataclass(frozen=True)
class Locked:
    pins: tuple[Pin, ...]
    requires_python: str | None
    notes: tuple[str, ...]
    kind: str                      # "uv.lock" or "pylock.toml"
    roots: tuple[str, ...] = ()    # the project's own root packages, left out


def parse_toml(text: str, source: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        line = re.search(r"line (\d+)", str(e))
        where = f"{source}:{line[1]}" if line else source
        raise InputError(f"{where}: not valid TOML ({str(e).split(' (at ')[0]})") from None


def is_toml(text: str) -> bool:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return False
    return True


def read_lock(data: dict, text: str, source: str, folder: Path, markers: Mapping[str, str]) -> Locked:
    """The pins of a parsed uv.lock or pylock.toml; NotALock when it is neither."""
    if isinstance(data.get("package"), list) and "version" in data:
        return _UvLock(data, text, source, folder, markers).read()
    if isinstance(data.get("packages"), list) and "lock-version" in data:
        return _read_pylock(data, text, source, folder, markers)
    raise NotALock


# The shape of what is read (TOML types): a lock that differs is one line naming where, not a traceback.
_UV_TOP = {"requires-python": str, "manifest": dict}
_UV_MANIFEST = {"members": list, "requirements": list}
_UV_PACKAGE = {"version": str, "source": (dict, str), "dependencies": list, "optional-dependencies": dict,
               "dev-dependencies": dict, "resolution-markers": list}
_EDGE = {"name": str, "version": str, "marker": str, "extra": list, "source": dict}
_PYLOCK_TOP = {"requires-python": str, "environments": list, "extras": list, "dependency-groups": list}
_PYLOCK_PACKAGE = {"version": str, "marker": str, "vcs": dict, "directory": dict, "archive": dict}
_PYLOCK_SOURCE = {"url": str, "path": str, "type": str, "commit-id": str, "requested-revision": str,
                  "subdirectory": str, "editable": bool}


def _check(table: object, shape: Mapping[str, type | tuple[type, ...]], where: str, what: str) -> None:
    if not isinstance(table, dict):
        raise InputError(f"{where}: {what} is not a table")
    for key, kind in shape.items():
        if key in table and not isinstance(table[key], kind):
            raise InputError(f"{where}: {what}: {key} = {redact(repr(table[key]))[:60]} is not what a lock holds there")
    for key in ("members", "resolution-markers", "environments", "extras", "dependency-groups", "extra"):
        if isinstance(table.get(key), list) and not all(isinstance(v, str) for v in table[key]):
            raise InputError(f"{where}: {what}: {key} holds something that is not a string")


def _check_edges(edges: object, where: str, what: str) -> None:
    if not isinstance(edges, list):
        raise InputError(f"{where}: {what} is not a list")
    for edge in edges:
        _check(edge, _EDGE, where, what)
        if not isinstance(edge.get("name"), str):
            raise InputError(f"{where}: {what}: an entry without a name")


def _header_lines(text: str, header: str) -> list[int]:
    """The line numbers of each ``[[header]]`` table, for errors naming file:line (found in
    place: no copy of the text line by line)."""
    out, line, at = [], 1, 0
    for m in re.finditer(r"(?m)^[ \t]*\[\[" + re.escape(header) + r"\]\][ \t]*\r?$", text):
        line += text.count("\n", at, m.start())
        at = m.start()
        out.append(line)
    return out


def _true(marker: str | None, markers: Mapping[str, object], where: str, notes: list[str]) -> bool:
    if not marker:
        return True
    holds = marker_holds(marker, {"extra": "", **markers}, lock=True)
    if holds is None:
        notes.append(f"{where}: marker {marker!r} not understood: counted as true")
        return True
    return holds


def _file_url(folder: Path, path: str) -> str:
    return Path(os.path.normpath(folder / path)).as_uri()


# ----------------------------------------------------------------------- uv.lock


class _UvLock:
    def __init__(self, data, text, source, folder, markers):
        self.data, self.source, self.folder, self.markers = data, source, folder, markers
        self.lines = _header_lines(text, "package")
        self.notes: list[str] = []
        self.entries, self.sources = [], []
        _check(data, _UV_TOP, source, "the lock")
        _check(data.get("manifest", {}), _UV_MANIFEST, source, "[manifest]")
        _check_edges(data.get("manifest", {}).get("requirements", []), source, "[manifest] requirements")
        for i, entry in enumerate(data["package"]):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise InputError(f"{self.where(i)}: a [[package]] without a name")
            _check(entry, _UV_PACKAGE, self.where(i), entry["name"])
            for group in [entry.get("dependencies", []), *entry.get("optional-dependencies", {}).values(),
                          *entry.get("dev-dependencies", {}).values()]:
                _check_edges(group, self.where(i), f"{entry['name']}'s dependencies")
            self.entries.append(entry)
            self.sources.append(self.source_of(i))

    def source_of(self, i: int) -> tuple[str, str, dict]:
        """(kind, value, the source table) of a package: ``{ registry = "..." }``, ``{ url = "...",
        subdirectory = "..." }``; the ``"registry+https://..."`` string of early locks too."""
        source, name = self.entries[i].get("source"), self.entries[i]["name"]
        if isinstance(source, str) and "+" in source:
            kind, value = source.split("+", 1)
            return kind, value, {}
        kind = next((k for k in _SOURCES if isinstance(source, dict) and k in source), None)
        if kind is None:
            raise InputError(f"{self.where(i)}: {name} has no source uv.lock defines ({', '.join(_SOURCES)}): "
                             f"{redact(repr(source))}")
        return kind, str(source[kind]), source

    def where(self, i: int) -> str:
        return f"{self.source}:{self.lines[i]}" if i < len(self.lines) else self.source

    def read(self) -> Locked:
        roots = [i for i in range(len(self.entries)) if self.is_root(i)]
        # a script's lock (uv lock --script) has no root package: its manifest lists what it requires
        top = [d for d in self.data.get("manifest", {}).get("requirements", []) if isinstance(d, dict)
               and _true(d.get("marker"), self.markers, self.source, self.notes)]
        reached = self.walk(roots, top) if roots or top else list(range(len(self.entries)))
        pins: dict[str, tuple[Pin, int]] = {}
        for i in reached:
            if i in roots:
                continue
            pin = self.pin(i)
            before = pins.get(pin.name)
            if before and before[0] != pin:
                raise InputError(f"{self.where(i)}: {pin.name} is locked at two versions for this interpreter "
                                 f"({before[0].label}, {pin.label}), for different extras or groups of the "
                                 f"project: {_ONE_ENV}")
            pins[pin.name] = (pin, i)
        if roots or top:
            left = len(self.entries) - len(reached)
            unused = f"; {left} locked package{'s' if left != 1 else ''} not needed here left out" if left else ""
            self.notes.append("every extra and dependency group of the project counted (a lock does not say which "
                              "were installed)" + unused)
        return Locked(tuple(p for p, _ in pins.values()), self.data.get("requires-python"), tuple(self.notes),
                      "uv.lock", tuple(canonicalize_name(self.entries[i]["name"]) for i in roots))

    def is_root(self, i: int) -> bool:
        entry = self.entries[i]
        kind, value, _ = self.sources[i]
        members = self.data.get("manifest", {}).get("members", [])
        return kind in ("editable", "virtual") and (value == "." or canonicalize_name(entry["name"]) in
                                                    {canonicalize_name(m) for m in members})

    def walk(self, roots: list[int], top: list[dict]) -> list[int]:
        """Every package the roots (and the ``top`` requirements) reach through edges whose markers are true here."""
        seen: set[tuple[int, str]] = set()
        stack: list[tuple[int, str | None]] = [(i, None) for i in roots]
        for dep in top:
            target = self.target(None, dep)
            stack += [(target, None)] + [(target, e) for e in dep.get("extra", [])]
        while stack:
            i, extra = stack.pop()
            if (i, extra or "") in seen:
                continue
            seen.add((i, extra or ""))
            for dep in self.edges(i, extra, root=i in roots):
                target = self.target(i, dep)
                stack.append((target, None))
                stack += [(target, e) for e in dep.get("extra", [])]
        return sorted({i for i, _ in seen})

    def edges(self, i: int, extra: str | None, root: bool) -> list[dict]:
        entry = self.entries[i]
        groups: list = []
        if extra is None:
            groups.append(entry.get("dependencies", []))
        optional = entry.get("optional-dependencies", {})
        groups += list(optional.values()) if root else [optional.get(extra, [])] if extra else []
        if root:
            groups += list(entry.get("dev-dependencies", {}).values())
        where = self.where(i)
        return [d for g in groups for d in g if isinstance(d, dict) and _true(d.get("marker"), self.markers, where,
                                                                            self.notes)]

    def target(self, i: int | None, dep: dict) -> int:
        name = canonicalize_name(str(dep.get("name", "")))
        found = [j for j, e in enumerate(self.entries) if canonicalize_name(e["name"]) == name
                 and ("version" not in dep or e.get("version") == dep["version"])
                 and ("source" not in dep or e["source"] == dep["source"])]
        if len(found) > 1:  # a forked resolution: the entry whose resolution markers hold here
            found = [j for j in found if any(_true(m, self.markers, self.where(j), self.notes)
                                             for m in self.entries[j].get("resolution-markers") or [None])]
        if len(found) != 1:
            what = "is not in the lock" if not found else "is locked more than once and nothing says which one"
            who = f"{self.where(i)}: {self.entries[i]['name']}" if i is not None else f"{self.source}: the script"
            raise InputError(f"{who} depends on {dep.get('name')}, which {what}")
        return found[0]

    def pin(self, i: int) -> Pin:
        entry = self.entries[i]
        kind, value, table = self.sources[i]
        name, version = entry["name"], entry.get("version")
        if kind == "registry":
            if not version:
                raise InputError(f"{self.where(i)}: {name} from a registry has no version")
            return make_pin(name, version)
        if kind == "git":
            return make_pin(name, version, _git_url(value))
        if kind == "url":
            sub = table.get("subdirectory")
            return make_pin(name, version, redact(value) + (f"#subdirectory={sub}" if sub else ""))
        if kind in ("path", "directory", "editable"):
            return make_pin(name, version, _file_url(self.folder, value), editable=kind == "editable")
        raise InputError(f"{self.where(i)}: {name} has a source uv.lock does not define: {kind}")  # a string form


def _git_url(value: str) -> str:
    """uv.lock's ``https://host/repo?rev=main#<commit>`` as a requirement's ``git+https://host/repo@<commit>``."""
    try:
        parts = urlsplit(value)
    except ValueError:  # a host urllib cannot read ("[x"): passed on whole, uv will say what it thinks
        return f"git+{redact(value)}"
    query = parse_qs(parts.query)
    commit = parts.fragment or next((query[k][0] for k in ("rev", "tag", "branch") if k in query), "")
    url = redact(urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")))
    sub = query.get("subdirectory", [""])[0]
    return f"git+{url}" + (f"@{commit}" if commit else "") + (f"#subdirectory={sub}" if sub else "")


# --------------------------------------------------------------------- pylock.toml


def _read_pylock(data: dict, text: str, source: str, folder: Path, markers: Mapping[str, str]) -> Locked:
    _check(data, _PYLOCK_TOP, source, "the lock")
    lines = _header_lines(text, "packages")
    notes: list[str] = []
    pins: dict[str, Pin] = {}
    roots: list[str] = []
    # every extra and group the lock offers counted, as for a uv.lock (PEP 751 markers name them)
    markers = {**markers, "extras": frozenset(data.get("extras", [])),
               "dependency_groups": frozenset(data.get("dependency-groups", []))}
    if data.get("environments"):
        notes.append(f"locked for the environments {', '.join(map(str, data['environments']))}")
    for i, entry in enumerate(data["packages"]):
        where = f"{source}:{lines[i]}" if i < len(lines) else source
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise InputError(f"{where}: a [[packages]] without a name")
        _check(entry, _PYLOCK_PACKAGE, where, entry["name"])
        for kind in ("vcs", "directory", "archive"):
            if kind in entry:
                _check(entry[kind], _PYLOCK_SOURCE, where, f"{entry['name']}'s {kind}")
        if not _true(entry.get("marker"), markers, where, notes):
            notes.append(f"{where}: {entry['name']} left out: its marker is false here")
            continue
        pin = _pylock_pin(entry, folder, where)
        if pin is None:
            roots.append(canonicalize_name(entry["name"]))
            continue
        if pin.name in pins and pins[pin.name] != pin:
            raise InputError(f"{where}: {pin.name} is locked twice for this interpreter "
                             f"({pins[pin.name].label}, {pin.label}): {_ONE_ENV}")
        pins[pin.name] = pin
    return Locked(tuple(pins.values()), data.get("requires-python"), tuple(notes), "pylock.toml", tuple(roots))


def _pylock_pin(entry: dict, folder: Path, where: str) -> Pin | None:
    name, version = entry["name"], entry.get("version")
    if isinstance(entry.get("vcs"), dict):
        vcs = entry["vcs"]
        url = redact(vcs["url"]) if vcs.get("url") else _file_url(folder, vcs.get("path", "."))
        rev = vcs.get("commit-id") or vcs.get("requested-revision")
        sub = vcs.get("subdirectory")
        return make_pin(name, version, f"{vcs.get('type', 'git')}+{url}" + (f"@{rev}" if rev else "")
                        + (f"#subdirectory={sub}" if sub else ""))
    if isinstance(entry.get("directory"), dict):
        directory = entry["directory"]
        if os.path.normpath(directory.get("path", ".")) == ".":
            return None
        return make_pin(name, version, _file_url(folder, directory["path"]), editable=bool(directory.get("editable")))
    if isinstance(entry.get("archive"), dict):
        archive = entry["archive"]
        url = redact(archive["url"]) if archive.get("url") else _file_url(folder, archive.get("path", ""))
        return make_pin(name, version, url + (f"#subdirectory={archive['subdirectory']}"
                                              if archive.get("subdirectory") else ""))
    if not version:
        raise InputError(f"{where}: {name} has no version, vcs, directory or archive")
    return make_pin(name, version)
