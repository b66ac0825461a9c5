"""What one tool's index settings say (uv's, or pip's), as ``indexes.resolve`` combines them:
the indexes it lists (``Entry``), its find-links and no-index (``Layer``); and the small
readings both tools' settings share (a location made absolute, a boolean word, a path shown).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

TRUE = {"1", "true", "yes", "y", "on", "t"}
FALSE = {"0", "false", "no", "n", "off", "f"}


@dataclass(frozen=True)
class Entry:
    """One index as uv lists them: a default candidate, an extra, a flat (find-links) one."""

    url: str
    origin: str
    default: bool = False
    explicit: bool = False
    flat: bool = False
    name: str | None = None


@dataclass
class Layer:
    """What one tool's settings say (uv's environment and files together, or pip's)."""

    entries: list[Entry] = field(default_factory=list)
    find_links: list[tuple[str, str]] = field(default_factory=list)
    no_index: tuple[bool, str] | None = None

    def says_anything(self) -> bool:
        return bool([e for e in self.entries if not e.explicit] or self.find_links or self.no_index)

    def origins(self) -> set[str]:
        """Where this tool's settings were read (``PIP_INDEX_URL``, ``pip.conf ~/...``)."""
        return {e.origin for e in self.entries} | {o for _, o in self.find_links} | (
            {self.no_index[1]} if self.no_index else set())


def location(value: str, base: Path) -> str:
    """A URL as given; a path made absolute against ``base``."""
    value = value.strip()
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", value):
        return value
    return str(absolute(value, base))


def absolute(value: str, base: Path) -> Path:
    """``value`` as a path, made absolute against ``base``."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else Path(os.path.normpath(base / path))


def shown(path: Path, home: Path) -> str:
    """``path`` as a report shows it (``~/...`` inside ``home``)."""
    try:
        return "~/" + str(path.relative_to(home))
    except ValueError:
        return str(path)


def one_line(e: BaseException) -> str:
    """An error's message on one line."""
    return " ".join(str(e).split())
