"""What an environment is, read from a freeze, a lock file or a venv: one pin per distribution.

No I/O here: the readers (``freeze``, ``lockfiles``, ``envfile``) build these values and the
diff, the level-1 search and the reports read them.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Mapping
from dataclasses import dataclass

from packaging.markers import InvalidMarker, Marker, UndefinedComparison, UndefinedEnvironmentName
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version


class EnvFormat(enum.Enum):
    """What an environment was read from."""

    REQUIREMENTS = "requirements"   # pip freeze, uv pip freeze, a requirements file of == pins
    UV_LOCK = "uv.lock"
    PYLOCK = "pylock.toml"          # PEP 751
    VENV = "venv"                   # a virtual environment's folder
    PYTHON = "python"               # a python executable
    SNAPSHOT = "snapshot"           # the JSON of `dsbisect snapshot-base`


@dataclass(frozen=True)
class Pin:
    """One distribution: a released version, or a direct reference (URL, local path, editable)."""

    name: str                      # canonical (packaging.utils.canonicalize_name)
    version: str | None            # None for direct-URL / local path / editable entries
    direct: str | None = None      # the URL (git+https://..., https://..., file:///...), credentials redacted
    editable: bool = False         # installed in editable mode (``-e``); ``direct`` is its URL
    marker: str | None = None      # the environment marker it was read with (true here), as a hint
    extras: tuple[str, ...] = ()   # the extras it was asked with (``accelerate[torch]==0.25.0``)

    @property
    def requirement(self) -> str:
        """What uv gets, as one PEP 508 string (one argv word): ``name==version`` or ``name @ url``.
        An editable pin is ``name @ file:///its/checkout`` too: a trial venv gets a copy of the
        checkout as it is, which runs the same code (``install_args`` keeps it editable)."""
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        if self.direct:
            return f"{self.name}{extras} @ {self.direct}"
        return f"{self.name}{extras}=={self.version}"

    @property
    def install_args(self) -> tuple[str, ...]:
        """The words of ``uv pip install`` for it: ``("-e", url)`` when editable, else the requirement."""
        return ("-e", self.direct or "") if self.editable else (self.requirement,)

    @property
    def plain(self) -> bool:
        """A released version (``2.1.0``, ``2.1.0rc1``, ``2.1.0+cu121``) rather than a direct reference."""
        return self.direct is None and self.version is not None and parse_version(self.version) is not None

    @property
    def label(self) -> str:
        """The version, or what stands for it (``editable file:///src/x``, ``git+https://...``)."""
        if self.editable:
            return f"editable {self.direct}"
        return self.direct or self.version or "?"

    def same_as(self, other: Pin) -> bool:
        """The same distribution installed the same way (1.0 and 1.0.0 are the same version)."""
        if (self.direct, self.editable) != (other.direct, other.editable):
            return False
        if self.version == other.version:
            return True
        a, b = parse_version(self.version or ""), parse_version(other.version or "")
        return a is not None and a == b


@dataclass(frozen=True)
class Environment:
    """The distributions of one environment, sorted by name, and what was learnt beside them."""

    source: str                    # what it was read from (a path, shown in reports)
    pins: tuple[Pin, ...]          # sorted by name, one per distribution
    python: str | None = None      # "3.11.7" when known (a venv or python); a lock's requires-python is not one
    format: EnvFormat = EnvFormat.REQUIREMENTS
    requires_python: str | None = None   # a lock's requires-python (">=3.10"): a hint for the trials' python
    options: tuple[str, ...] = ()  # index options the file carried (--index-url ...), credentials redacted; not used
    notes: tuple[str, ...] = ()    # what was read but left out, and why (false markers, paths not here)
    roots: tuple[str, ...] = ()    # a lock's own project (its workspace members): not a change to apply, left out

    def get(self, name: str) -> Pin | None:
        key = canonicalize_name(name)
        return next((p for p in self.pins if p.name == key), None)


def parse_version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def make_pin(name: str, version: str | None, direct: str | None = None, *, editable: bool = False,
             marker: str | None = None, extras: tuple[str, ...] = ()) -> Pin:
    return Pin(canonicalize_name(name), None if direct else version, direct, editable, marker,
               tuple(sorted(canonicalize_name(e) for e in extras)))


# packaging >= 25 evaluates the lock-file markers of PEP 751 ('dev' in dependency_groups) in a context of their own.
_HAS_CONTEXT = "context" in inspect.signature(Marker.evaluate).parameters


def marker_holds(marker: str, values: Mapping[str, object], *, lock: bool = False) -> bool | None:
    """Whether an environment marker holds for these marker values (the missing ones are this
    interpreter's); None when that cannot be told (not a marker, or it names a value not given)."""
    try:
        parsed = Marker(marker)
        if lock and _HAS_CONTEXT:
            return parsed.evaluate(dict(values), context="lock_file")
        return parsed.evaluate(dict(values))
    except (InvalidMarker, UndefinedEnvironmentName, UndefinedComparison):
        return None


def url_path(url: str) -> str:
    """The path part of a ``file:`` URL, unquoted; "" for one urllib cannot split (``file://[x/``
    reads as a broken IPv6 host): such a reference names no file here."""
    from urllib.parse import unquote, urlsplit

    try:
        return unquote(urlsplit(url).path)
    except ValueError:
        return ""
