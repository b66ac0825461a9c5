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

import codecs
import enum
import errno
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment

from dsbisect.envs.base import inspect_base
from dsbisect.core.errors import InputError
from dsbisect.core.files import read_small, read_small_text, size_text, too_large
from dsbisect.envdiff.freeze import parse_requirements
from dsbisect.envdiff.lockfiles import NotALock, is_toml, parse_toml, read_lock
from dsbisect.envdiff.pins import EnvFormat, Environment, Pin, make_pin, parse_version, url_path
from dsbisect.core.redact import redact

__all__ = ["Change", "EnvFormat", "Environment", "Kind", "Pin", "apply", "diff", "read_environment"]

_LOCK_NAME = re.compile(r"^(uv\.lock|pylock(\.[^.]+)?\.toml)$")
_TOML_KEY = re.compile(r"^[A-Za-z0-9_.-]+\s*=\s*[^=\s]")  # key = value; never name==1.0
_NOT_A_LOCK = {"pyproject.toml": "a pyproject.toml pins nothing: give its uv.lock, or a pip freeze",
               "poetry.lock": "poetry.lock is not read: give `poetry export --without-hashes` output or a pip freeze",
               "pdm.lock": "pdm.lock is not read: give `pdm export` output or a pip freeze"}
_PYTHON_NAME = re.compile(r"^(python|pypy)[\d.]*(\.exe)?$")
STDIN = "<stdin>"  # what `-` reads, as errors name it
_EXPECTED = "a pip freeze, a requirements file of == pins, uv.lock, pylock.toml, a venv or a python"
# An environment file is read whole and parsed (TOML costs several times its size): past this, one
# line instead (a uv.lock of a few thousand packages is 1-3 MB; at this size `diff` peaks under 100 MB)
ENV_LIMIT = 4 << 20


class Kind(enum.Enum):
    CHANGED = "changed"
    ADDED = "added"
    REMOVED = "removed"

    @classmethod
    def of(cls, good: object | None, bad: object | None) -> Kind:
        """What a change is whose sides are ``good`` and ``bad`` (None: absent on that side)."""
        if good is None:
            return cls.ADDED
        return cls.REMOVED if bad is None else cls.CHANGED


@dataclass(frozen=True)
class Change:
    name: str
    good: Pin | None               # None: added in the bad env
    bad: Pin | None                # None: removed in the bad env

    @property
    def kind(self) -> Kind:
        return Kind.of(self.good, self.bad)

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
        odd = next((p for p in (self.good, self.bad) if p is not None and not p.plain), None)
        if odd is not None:
            what = "editable" if odd.editable else "direct URL" if odd.direct else \
                f"{odd.version} is not a PEP 440 version"
            notes.append(f"{what}: applied whole, not bisected below")
        if self.kind is Kind.CHANGED and self.bisectable:
            old, new = parse_version(self.good.version), parse_version(self.bad.version)
            if new < old:
                notes.append("downgrade")
            locals_ = sorted({f"+{v.local}" for v in (old, new) if v.local})
            if locals_:  # a build of a release (torch's +cu121): diffed and bisected like the release
                notes.append(f"local version {' '.join(locals_)}")
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
    if str(path) == "-":  # `pip freeze | dsbisect diff good.txt -`
        data = sys.stdin.buffer.read(ENV_LIMIT + 1)
        if len(data) > ENV_LIMIT:
            raise InputError(f"{STDIN}: over {size_text(ENV_LIMIT)}: too large for {_EXPECTED}")
        text = _text(data)
        del data
        if text is None:
            raise InputError(f"{STDIN}: binary data, not {_EXPECTED}")
        return _read_text(Path(STDIN), text, marks)
    if path.is_dir():
        return _read_folder(path)
    try:
        data = _head_or_all(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file or folder") from None
    except OSError as e:
        if e.errno == errno.EFBIG:
            raise InputError(f"{path}: {e.strerror}: an environment file is read whole") from None
        raise InputError(f"{path}: cannot read it ({e.strerror or e})") from None
    if not data.strip():
        raise InputError(f"{path}: empty file: expected {_EXPECTED}")
    text = _text(data)
    del data  # the text only, from here
    if text is None or text.startswith("#!"):
        if _PYTHON_NAME.match(path.name) and os.access(path, os.X_OK):
            return _read_python(path, EnvFormat.PYTHON)
        what = "a program (only one named python* or pypy* is run, to read what it has installed)" \
            if os.access(path, os.X_OK) else "a script" if text else "a binary file"
        raise InputError(f"{path}: {what}, not {_EXPECTED}")
    return _read_text(path, text, marks)


def _head_or_all(path: Path) -> bytes:
    """The whole file when it is text (at most ``ENV_LIMIT``: an OSError past it), else its head
    (an interpreter is tens of MB: its head tells it from a text file)."""
    with path.open("rb") as f:
        head = f.read(8192)
        if _text(head, partial=True) is None:
            return head
        size = os.fstat(f.fileno()).st_size
        if size > ENV_LIMIT:
            raise too_large(path, size, ENV_LIMIT)
        rest = f.read(ENV_LIMIT + 1 - len(head))
    if len(head) + len(rest) > ENV_LIMIT:  # it grew meanwhile (or /proc): held to the limit too
        raise too_large(path, len(head) + len(rest), ENV_LIMIT)
    return head + rest


def _text(data: bytes, partial: bool = False) -> str | None:
    """The text of ``data``, or None for a binary file (``partial``: a head cut anywhere)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):  # `pip freeze > f` in Windows PowerShell 5
        if partial:
            return ""
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            return None
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        return data[:e.start].decode("utf-8-sig") if partial and e.start > len(data) - 4 else None


_FIRST_LINE = re.compile(r"(?m)^[ \t\f\v]*([^\s#][^\r\n]*)")


def _read_text(path: Path, text: str, markers: dict[str, str]) -> Environment:
    if not text.strip():
        raise InputError(f"{path}: empty: expected {_EXPECTED}")
    found = _FIRST_LINE.search(text)  # not splitlines(): a copy of the whole text, line by line
    first = found[1].strip() if found else ""
    if first.startswith("{"):
        return _read_snapshot(path, text)
    if _LOCK_NAME.match(path.name) or path.suffix == ".toml" or \
            ((first.startswith("[") or _TOML_KEY.match(first)) and is_toml(text)):
        return _read_lock(path, text, markers)
    folder = Path.cwd() if str(path) == STDIN else path.resolve().parent
    parsed = parse_requirements(text, str(path), folder, markers=markers,
                                include=lambda p: read_small_text(p, ENV_LIMIT, errors="replace"),
                                project_name=_project_name)
    return _environment(str(path), parsed.pins, format=EnvFormat.REQUIREMENTS, options=parsed.options,
                        notes=parsed.notes)


def _read_lock(path: Path, text: str, markers: dict[str, str]) -> Environment:
    data = parse_toml(text, str(path))
    try:
        locked = read_lock(data, text, str(path), path.resolve().parent, markers)
    except NotALock:
        what = _NOT_A_LOCK.get(path.name, "TOML, but neither a uv.lock ([[package]] and version) nor a pylock.toml "
                                          "([[packages]] and lock-version)")
        raise InputError(f"{path}: {what}") from None
    fmt = EnvFormat.UV_LOCK if locked.kind == "uv.lock" else EnvFormat.PYLOCK
    return _environment(str(path), locked.pins, format=fmt, requires_python=locked.requires_python,
                        notes=locked.notes, roots=locked.roots)


def _environment(source: str, pins: Iterable[Pin], *, notes: Iterable[str] = (), **fields) -> Environment:
    """The Environment of ``pins`` sorted by name, without what is no distribution to install:
    pip (the installer: in every ``python -m venv`` and ``uv pip freeze``, in no ``pip freeze``
    and no uv venv, never run by a job; kept, every freeze-against-venv diff would show it) and
    Debian's ``pkg-resources==0.0.0`` (its patched pip lists it; no index has it)."""
    kept, notes = [], list(notes)
    for pin in pins:
        if pin.name == "pip":
            notes.append(f"pip {pin.label} left out (the installer, which pip freeze leaves out too)")
        elif pin.name == "pkg-resources" and pin.version == "0.0.0":
            notes.append("pkg-resources==0.0.0 left out (Debian's pip lists it; it is no distribution)")
        else:
            kept.append(pin)
    notes += _elsewhere(kept) + _local_builds(kept, fields.get("options", ()))
    return Environment(source, tuple(sorted(kept, key=lambda p: p.name)), notes=tuple(notes), **fields)


_PYTORCH_LOCAL = re.compile(r"^(cu\d+|cpu|rocm[\d.]+|xpu)$")


def _local_builds(pins: Iterable[Pin], options: Iterable[str]) -> list[str]:
    """A note on PyTorch's local builds (torch==2.1.0+cu121): PyPI has no such file, PyTorch's own
    index has, and a freeze does not say so. Nothing when the file names that index already."""
    tags: dict[str, list[str]] = {}
    for pin in pins:
        version = parse_version(pin.version or "") if pin.plain else None
        if version is not None and version.local and _PYTORCH_LOCAL.match(version.local):
            tags.setdefault(version.local, []).append(f"{pin.name} {pin.version}")
    notes = []
    for tag, names in sorted(tags.items()):
        index = f"https://download.pytorch.org/whl/{tag}"
        if not any(index in o for o in options):
            notes.append(f"{', '.join(names)}: local build{'s' if len(names) != 1 else ''} that PyPI does not have; "
                         f"{'their' if len(names) != 1 else 'its'} index is {index} (--extra-index-url)")
    return notes


def _exists(path: str) -> bool:
    return bool(path) and Path(path).exists()


def _elsewhere(pins: Iterable[Pin]) -> list[str]:
    """A note on file:// references that are not on this machine: no trial can install them here."""
    missing = [p for p in pins if (p.direct or "").startswith("file://")
               and not _exists(url_path(p.direct.split("#", 1)[0]))]
    if not missing:
        return []
    names = ", ".join(p.name for p in missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    conda = any(re.search(r"/(croot|conda-bld|feedstock_root|opt/conda)/", p.direct or "") for p in missing)
    return [f"{len(missing)} direct reference{'s' if len(missing) != 1 else ''} to paths not on this machine "
            f"({names}): trials cannot install them here"
            + ("; a conda env's pip freeze names its build folders: `pip list --format=freeze` writes versions"
               if conda else "")]


def _project_name(path: Path) -> str | None:
    """The ``[project] name`` of a local project's pyproject.toml, if it has one."""
    try:
        text = read_small_text(path / "pyproject.toml", errors="replace")
    except OSError:
        return None
    match = re.search(r'(?ms)^\[project\]\s*$.*?^name\s*=\s*["\']([^"\']+)["\']', text)
    return match[1] if match else None


# ------------------------------------------------------------------ live environments


def _read_folder(path: Path) -> Environment:
    python = path / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    if not (path / "pyvenv.cfg").is_file() and not python.exists():
        inside = [str(path / n) for n in (".venv", "venv", "uv.lock", "pylock.toml", "requirements.txt")
                  if (path / n).exists()]
        hint = f"; did you mean {' or '.join(inside)}?" if inside else f": expected {_EXPECTED}"
        raise InputError(f"{path}: a folder, but not a virtual environment (no pyvenv.cfg, no bin/python){hint}")
    if not python.exists():
        raise InputError(f"{path}: a virtual environment without its python ({python} is missing)")
    return _read_python(python, EnvFormat.VENV, str(path))


def _read_python(python: Path, fmt: EnvFormat, source: str | None = None) -> Environment:
    """The distributions a python sees, read by running it once (as ``snapshot-base`` does)."""
    try:
        base = inspect_base(str(python))
    except (ValueError, KeyError, TypeError):  # it ran, but printed no inventory: not a python
        raise InputError(f"{python}: not a python that dsbisect can read (it did not answer as one)") from None
    pins = [_installed_pin(name, version, Path(info)) for name, version, info in base.dists]
    return _environment(source or str(python), pins, python=base.version, format=fmt)


def _installed_pin(name: str, version: str, info: Path) -> Pin:
    """A pin from a dist-info: a direct reference when its direct_url.json (PEP 610) says so."""
    try:
        data = json.loads(read_small(info / "direct_url.json", 1 << 20))
    except (OSError, ValueError):
        return make_pin(name, version)
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        return make_pin(name, version)
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
        if isinstance(data, dict) and "_meta" in data and "default" in data:
            raise InputError(f"{path}: a Pipfile.lock is not read: give `pipenv requirements` output or a pip freeze")
        raise InputError(f"{path}: JSON, but not a `dsbisect snapshot-base` file: expected {_EXPECTED}")
    pins = [make_pin(d["name"], d["version"]) for d in data["dists"]
            if isinstance(d, dict) and isinstance(d.get("name"), str) and isinstance(d.get("version"), str)]
    python = data.get("python_version") if isinstance(data.get("python_version"), str) else None
    return _environment(str(path), pins, python=python, format=EnvFormat.SNAPSHOT)
