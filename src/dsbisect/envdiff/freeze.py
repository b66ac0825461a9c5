"""``pip freeze`` / ``uv pip freeze`` output and requirements files of ``==`` pins, parsed.

What pip writes and accepts: comments (``# Editable install with no version control
(name==1.0)`` names the ``-e`` line after it), continuations (``\\``), ``-e`` editable lines,
``name @ URL`` direct references, bare wheel/sdist paths and URLs, ``--hash`` options, index
option lines (remembered with their credentials hidden, not used), ``-r`` includes and
environment markers.  Anything that is not one exact version (``numpy>=1.2``) is an error
naming ``file:line``.

Markers are evaluated when the file is read, for the interpreter whose marker values the
caller gives (by default this one: the trials' default python).  A freeze pins one
environment, so a file that pins ``numpy`` twice under exclusive markers (``uv pip compile
--universal``) is one environment per python: keeping both would not be one pin per
distribution.  The marker of a pin kept is kept on it, and one left out is named in the notes.

No I/O but what the caller passes in: ``include`` reads a ``-r`` file, ``project_name`` reads
the name of a local project an ``-e`` line points at.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename

from dsbisect.core.errors import InputError
from dsbisect.envdiff.pins import Pin, make_pin, marker_holds, url_path
from dsbisect.core.redact import redact

# pip's own rule: a comment starts at a '#' at the start of a line or after whitespace, so
# that a URL's '#egg=' or '#subdirectory=' fragment stays.
_COMMENT = re.compile(r"(^|\s+)#.*$")
_EDITABLE_HINT = re.compile(r"^#\s*Editable\b.*\((?P<name>[^()=\s]+)==(?P<version>[^()\s]+)\)\s*$")
_TRAILING_OPTION = re.compile(r"\s+(?=--?[A-Za-z])")
_PER_REQUIREMENT = ("--hash", "--config-settings", "-C", "--global-option", "--install-option")
_KEPT_VALUED = {"-i": "--index-url", "--index-url": "--index-url", "--extra-index-url": "--extra-index-url",
                "-f": "--find-links", "--find-links": "--find-links", "--trusted-host": "--trusted-host",
                "--only-binary": "--only-binary", "--no-binary": "--no-binary", "--use-feature": "--use-feature"}
_KEPT_FLAGS = ("--no-index", "--pre", "--prefer-binary", "--require-hashes")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_VCS = re.compile(r"^(git|hg|svn|bzr)\+")
_CONDA_EXPORT = re.compile(r"^[A-Za-z0-9_.-]+=[^=\s]+=[^=\s]+$")  # numpy=1.26.4=py311h64a7726_0
_CONDA_YAML = re.compile(r"^(name|channels|dependencies|prefix):(\s|$)")
_ARCHIVES = (".whl", ".tar.gz", ".zip", ".tar.bz2", ".tar.xz", ".tgz")


@dataclass(frozen=True)
class Requirements:
    pins: tuple[Pin, ...]          # one per distribution, in the file's order
    options: tuple[str, ...] = ()  # index options, credentials redacted
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Line:
    number: int
    text: str                      # without its comment and continuation backslashes
    hint: tuple[str, str] | None   # (name, version) of a preceding "# Editable ... (name==version)"


def parse_requirements(text: str, source: str, folder: Path, *, markers: Mapping[str, str],
                       include: Callable[[Path], str] | None = None,
                       project_name: Callable[[Path], str | None] = lambda path: None,
                       _chain: tuple[str, ...] = ()) -> Requirements:
    """The pins of a requirements file's ``text``; ``source`` names it in errors, ``folder``
    is where its relative paths start."""
    pins: dict[str, tuple[Pin, str]] = {}
    options: list[str] = []
    notes: list[str] = []
    reader = _Reader(source, folder, markers, include, project_name, (*_chain, source))
    for line in logical_lines(text):
        where = f"{source}:{line.number}"
        if line.text.startswith("-"):
            got = reader.option(line, where)
        else:
            got = reader.requirement(line.text, where)
        for item in got:
            if isinstance(item, Pin):
                _add(pins, item, where)
            elif isinstance(item, Requirements):
                for pin in item.pins:
                    _add(pins, pin, where)
                options += item.options
                notes += item.notes
            elif isinstance(item, _Option):
                options.append(item.text)
            else:
                notes.append(item.text)
    return Requirements(tuple(p for p, _ in pins.values()), tuple(options), tuple(notes))


def _add(pins: dict[str, tuple[Pin, str]], pin: Pin, where: str) -> None:
    before = pins.get(pin.name)
    if before and before[0].same_as(pin):
        return
    if before:
        raise InputError(f"{where}: {pin.name} is pinned twice ({redact(before[0].requirement)} at {before[1]}, "
                         f"then {redact(pin.requirement)}): one environment has one version of each")
    pins[pin.name] = (pin, where)


def logical_lines(text: str) -> list[_Line]:
    """Non-empty lines with their first physical line's number, continuations joined."""
    found: list[_Line] = []
    hint = None
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
            match = _EDITABLE_HINT.match(raw.strip())
            if match:
                hint = (match["name"], match["version"])
                continue
        if raw.endswith("\\"):
            pending.append(raw[:-1])
            continue
        joined = _COMMENT.sub("", "".join(pending) + raw).strip()
        pending = []
        if joined:
            found.append(_Line(start, joined, hint))
            hint = None
    if pending and _COMMENT.sub("", "".join(pending)).strip():
        found.append(_Line(start, _COMMENT.sub("", "".join(pending)).strip(), hint))
    return found


@dataclass(frozen=True)
class _Option:
    text: str                      # an index option as it is remembered: "--index-url https://***@host/simple"


@dataclass(frozen=True)
class _Note:
    text: str


class _Reader:
    """Turns one logical line into pins, option strings and notes."""

    def __init__(self, source, folder, markers, include, project_name, chain):
        self.source, self.folder, self.markers = source, folder, markers
        self.include, self.project_name, self.chain = include, project_name, chain

    def option(self, line: _Line, where: str) -> list:
        flag, value = _split_option(line.text)
        if flag in ("-e", "--editable"):
            return [self.editable(value, line.hint, where)]
        if flag in ("-r", "--requirement"):
            return [self.included(value, where)]
        if flag in ("-c", "--constraint"):
            return [_Note(f"{where}: the constraints file {redact(value)} is not read (constraints pin nothing)")]
        if flag in _KEPT_FLAGS and not value:
            return [_Option(flag)]
        if flag in _KEPT_VALUED and value:
            return [_Option(f"{_KEPT_VALUED[flag]} {redact(value)}")]
        raise InputError(f"{where}: unknown or incomplete option: {redact(line.text)}")

    def requirement(self, text: str, where: str) -> list:
        req_text, *trailing = _TRAILING_OPTION.split(text)
        for option in trailing:
            if option.split("=", 1)[0].split()[0] not in _PER_REQUIREMENT:
                raise InputError(f"{where}: unknown option after a requirement: {redact(option)}")
        if _looks_direct(req_text):
            return [self.nameless(req_text, where)]
        try:
            req = Requirement(req_text)
        except InvalidRequirement as e:
            hint = " (a `conda list --export` line: give `pip list --format=freeze` output instead)" \
                if _CONDA_EXPORT.match(req_text) else \
                " (a conda environment.yml: give `pip list --format=freeze` output instead)" \
                if _CONDA_YAML.match(req_text) else f" ({str(e).splitlines()[0]})"  # packaging's caret lines
            raise InputError(f"{where}: not a requirement: {redact(req_text)}{hint}") from None
        marker = str(req.marker) if req.marker else None
        holds = marker_holds(marker, self.markers) if marker else True
        if holds is None:
            raise InputError(f"{where}: cannot evaluate the marker of {redact(req_text)}")
        if not holds:
            return [_Note(f"{where}: {redact(req_text)} left out: its marker is false here")]
        if req.url:
            return [make_pin(req.name, None, self.url(req.url), marker=marker, extras=tuple(req.extras))]
        specs = list(req.specifier)
        if len(specs) != 1 or specs[0].operator not in ("==", "===") or specs[0].version.endswith(".*"):
            raise InputError(f"{where}: not an exact pin: {redact(req_text)} (each line must pin one version "
                             f"with ==, as pip freeze writes)")
        return [make_pin(req.name, specs[0].version, marker=marker, extras=tuple(req.extras))]

    def editable(self, value: str, hint: tuple[str, str] | None, where: str) -> Pin:
        if not value:
            raise InputError(f"{where}: -e needs a path or URL")
        url = self.url(value)
        name = _egg(value) or (hint[0] if hint else None)
        if not name and url.startswith("file:"):
            path = Path(url_path(url))
            name = self.project_name(path) or path.name
        if not name:
            raise InputError(f"{where}: cannot tell which distribution -e {redact(value)} is: add #egg=NAME")
        return make_pin(name, None, url, editable=True)

    def nameless(self, text: str, where: str) -> Pin:
        """A bare URL or path: the name comes from #egg= or the wheel's or sdist's file name."""
        name = _egg(text) or _archive_name(text)
        if not name:
            raise InputError(f"{where}: cannot tell which distribution {redact(text)} is: write it as 'NAME @ URL'")
        return make_pin(name, None, self.url(text))

    def url(self, value: str) -> str:
        """A URL as it is, a path as an absolute file:// URL (relative to the file's folder)."""
        if _URL.match(value) or _VCS.match(value):
            return redact(value)
        path, sep, fragment = value.partition("#")
        full = Path(os.path.normpath(self.folder / os.path.expanduser(path)))  # ~unknown stays as it is
        return full.as_uri() + (sep + fragment)

    def included(self, value: str, where: str) -> Requirements:
        if not value or self.include is None:
            raise InputError(f"{where}: -r needs a file")
        path = Path(os.path.normpath(self.folder / value))
        if str(path) in self.chain:
            raise InputError(f"{where}: -r {value} includes itself")
        try:
            text = self.include(path)
        except OSError as e:
            raise InputError(f"{where}: cannot read -r {value}: {e.strerror or e}") from None
        return parse_requirements(text, str(path), path.parent, markers=self.markers, include=self.include,
                                  project_name=self.project_name, _chain=self.chain)


def _split_option(text: str) -> tuple[str, str]:
    if text.startswith("--"):
        flag, sep, value = text.partition("=")
        if not sep:
            flag, _, value = text.partition(" ")
        return flag.strip(), value.strip()
    flag, value = text[:2], text[2:].strip()
    return flag, value


def _looks_direct(text: str) -> bool:
    if "@" in text.split("://", 1)[0] and not text.startswith((".", "/", "~")):
        return False  # name @ url
    head = text.split(";", 1)[0].strip()
    return bool(_URL.match(head) or _VCS.match(head) or head.startswith((".", "/", "~"))
                or head.split("#", 1)[0].endswith(_ARCHIVES))


def _egg(value: str) -> str | None:
    match = re.search(r"[#&]egg=([A-Za-z0-9][A-Za-z0-9._-]*)", value)
    return match[1] if match else None


def _archive_name(value: str) -> str | None:
    filename = unquote(value.split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1])
    try:
        if filename.endswith(".whl"):
            return str(parse_wheel_filename(filename)[0])
        return str(parse_sdist_filename(filename)[0]) if filename.endswith((".tar.gz", ".zip")) else None
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
