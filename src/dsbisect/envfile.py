"""Two environments and what changed between them: the input of an environment bisection.

``read_environment`` reads a ``pip freeze`` / ``uv pip freeze`` output or a requirements
file of ``==`` pins, a ``uv.lock``, a PEP 751 ``pylock.toml``, a venv's folder or a python
executable (run once, as ``snapshot-base`` reads the base), or a ``snapshot-base`` JSON.
The format comes from the name and the content, not only the extension: a
``requirements.txt`` may be a freeze, a lock may be called anything.

``diff`` gives the changes (changed, added, removed; sorted by canonical name) and ``apply``
the requirement strings of the good environment with some of them applied.
"""

from __future__ import annotations

import enum
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment

from .errors import InputError
from .freeze import parse_requirements
from .pins import EnvFormat, Environment, Pin, make_pin, parse_version

__all__ = ["Change", "EnvFormat", "Environment", "Kind", "Pin", "apply", "diff", "read_environment"]

_EXPECTED = "a pip freeze, a requirements file of == pins, uv.lock, pylock.toml, a venv or a python"


class Kind(enum.Enum):
    CHANGED = "changed"
    ADDED = "added"
    REMOVED = "removed"


@dataclass(frozen=True)
class Change:
    name: str
    good: Pin | None               # None: added in the bad env
    bad: Pin | None                # None: removed in the bad env

    @property
    def kind(self) -> Kind:
        if self.good is None:
            return Kind.ADDED
        return Kind.REMOVED if self.bad is None else Kind.CHANGED

    @property
    def bisectable(self) -> bool:
        """Both sides released versions: a release bisection can go between them. A local
        version (``2.1.0+cu121``) counts (its public part is what an index lists)."""
        return self.good is not None and self.bad is not None and self.good.plain and self.bad.plain

    @property
    def whole(self) -> bool:
        """A direct reference (URL, local path, editable) on either side: applied as a whole, never bisected below."""
        return any(p is not None and not p.plain for p in (self.good, self.bad))

    @property
    def notes(self) -> tuple[str, ...]:
        """What a reader should know of this change, in words."""
        notes = []
        for pin in (self.good, self.bad):
            if pin is not None and pin.editable:
                notes.append("editable: applied whole, not bisected below")
                break
            if pin is not None and not pin.plain:
                notes.append(("direct URL" if "://" in (pin.direct or "") else "direct reference")
                             + ": applied whole, not bisected below")
                break
        if self.kind is Kind.CHANGED and self.bisectable:
            old, new = parse_version(self.good.version), parse_version(self.bad.version)
            if new < old:
                notes.append("downgrade")
            if old.local or new.local:
                notes.append("local version: releases between are looked up by their public version")
        return tuple(notes)

    def describe(self) -> str:
        """``transformers 4.36.2 -> 4.39.2``, ``+ safetensors 0.4.1``, ``- tokenizers 0.15.0``."""
        if self.good is None:
            text = f"+ {self.name} {self.bad.label}"
        elif self.bad is None:
            text = f"- {self.name} {self.good.label}"
        else:
            text = f"{self.name} {self.good.label} -> {self.bad.label}"
        return text + (f" ({'; '.join(self.notes)})" if self.notes else "")


def diff(good: Environment, bad: Environment) -> tuple[Change, ...]:
    """What differs, sorted by name; () when the two are the same environment."""
    old = {p.name: p for p in good.pins}
    new = {p.name: p for p in bad.pins}
    changes = []
    for name in sorted(old.keys() | new.keys()):
        a, b = old.get(name), new.get(name)
        if a is None or b is None or not a.same_as(b):
            changes.append(Change(name, a, b))
    return tuple(changes)


def apply(good: Environment, changes: Iterable[Change]) -> tuple[str, ...]:
    """The requirement strings of ``good`` with ``changes`` applied (changed and added: the
    bad pin; removed: dropped), sorted by name."""
    pins = {p.name: p for p in good.pins}
    for change in changes:
        if change.bad is None:
            pins.pop(change.name, None)
        else:
            pins[change.name] = change.bad
    return tuple(pins[name].requirement for name in sorted(pins))


# ----------------------------------------------------------------------- reading


def read_environment(path: Path, *, markers: Mapping[str, str] | None = None) -> Environment:
    """The environment ``path`` holds or describes. ``markers``: the marker values that
    environment markers are evaluated with (default: this interpreter's). InputError naming
    ``file:line`` on bad input."""
    path = Path(path)
    marks = dict(markers) if markers is not None else default_environment()
    if path.is_dir():
        return _read_folder(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file or folder") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror or e})") from None
    if not data.strip():
        raise InputError(f"{path}: empty file: expected {_EXPECTED}")
    text = _text(data)
    if text is None or text.startswith("#!"):
        if os.access(path, os.X_OK):
            return _read_python(path, EnvFormat.PYTHON)
        raise InputError(f"{path}: a binary file, not {_EXPECTED}")
    return _read_text(path, text, marks)


def _text(data: bytes) -> str | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def _read_text(path: Path, text: str, markers: dict[str, str]) -> Environment:
    first = next((ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")), "")
    if first.startswith("{"):
        return _read_snapshot(path, text)
    parsed = parse_requirements(text, str(path), path.resolve().parent, markers=markers,
                                include=lambda p: p.read_text(errors="replace"), project_name=_project_name)
    return _environment(str(path), parsed.pins, format=EnvFormat.REQUIREMENTS, options=parsed.options,
                        notes=parsed.notes)


def _environment(source: str, pins: Iterable[Pin], *, notes: Iterable[str] = (), **fields) -> Environment:
    """The Environment of ``pins`` sorted by name, pip left out: the installer is in every
    ``python -m venv`` and ``uv pip freeze``, in no ``pip freeze`` and in no uv venv, and a
    job does not run it; keeping it would make every freeze-against-venv diff show it."""
    kept, notes = [], list(notes)
    for pin in pins:
        if pin.name == "pip":
            notes.append(f"pip {pin.label} left out (the installer, which pip freeze leaves out too)")
        else:
            kept.append(pin)
    return Environment(source, tuple(sorted(kept, key=lambda p: p.name)), notes=tuple(notes), **fields)


def _project_name(path: Path) -> str | None:
    """The ``[project] name`` of a local project's pyproject.toml, if it has one."""
    try:
        text = (path / "pyproject.toml").read_text()
    except OSError:
        return None
    match = re.search(r'(?ms)^\[project\]\s*$.*?^name\s*=\s*["\']([^"\']+)["\']', text)
    return match[1] if match else None


# ------------------------------------------------------------------ live environments


def _read_folder(path: Path) -> Environment:
    python = path / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    if not (path / "pyvenv.cfg").is_file() and not python.exists():
        raise InputError(f"{path}: a folder, but not a virtual environment (no pyvenv.cfg, no bin/python): "
                         f"expected {_EXPECTED}")
    if not python.exists():
        raise InputError(f"{path}: a virtual environment without its python ({python} is missing)")
    return _read_python(python, EnvFormat.VENV, str(path))


def _read_python(python: Path, fmt: EnvFormat, source: str | None = None) -> Environment:
    """The distributions a python sees, read by running it once (as ``snapshot-base`` does)."""
    from .base import inspect_base

    base = inspect_base(str(python))
    pins = [_installed_pin(name, version, Path(info)) for name, version, info in base.dists]
    return _environment(source or str(python), pins, python=base.version, format=fmt)


def _installed_pin(name: str, version: str, info: Path) -> Pin:
    """A pin from a dist-info: a direct reference when its direct_url.json (PEP 610) says so."""
    try:
        data = json.loads((info / "direct_url.json").read_text())
    except (OSError, ValueError):
        return make_pin(name, version)
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        return make_pin(name, version)
    from .redact import redact

    url = redact(data["url"])
    vcs = data.get("vcs_info") if isinstance(data.get("vcs_info"), dict) else None
    if vcs:
        url = f"{vcs.get('vcs', 'git')}+{url}@{vcs.get('commit_id') or vcs.get('requested_revision')}"
    if data.get("subdirectory"):
        url += f"#subdirectory={data['subdirectory']}"
    editable = bool((data.get("dir_info") or {}).get("editable")) if isinstance(data.get("dir_info"), dict) else False
    return make_pin(name, version, url, editable=editable)


def _read_snapshot(path: Path, text: str) -> Environment:
    """The JSON ``dsbisect snapshot-base`` writes (a compute node's base environment)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: not valid JSON ({e.msg}): expected {_EXPECTED}") from None
    if not (isinstance(data, dict) and data.get("format") == 1 and isinstance(data.get("dists"), list)):
        raise InputError(f"{path}: JSON, but not a `dsbisect snapshot-base` file: expected {_EXPECTED}")
    pins = [make_pin(d["name"], d["version"]) for d in data["dists"]
            if isinstance(d, dict) and d.get("name") and d.get("version")]
    return _environment(str(path), pins, python=data.get("python_version"), format=EnvFormat.SNAPSHOT)
