"""What a run used, read back: the start-up hook's records and the digests of files and folders.

The hook (``_hook/dsbisect_trace.py``) leaves one ``imports/pid<P>.json`` per interpreter of a
run: the local modules it imported, the files it read and wrote, the files it gave its
children, the folders it listed, the programs it started by name, the top-level modules it
took from site folders.  ``read_trace`` merges them (a damaged listing is skipped);
``used_files`` and ``used_listings`` turn them into the record's digests by the rule of
``inputs``: a file the run wrote, or made before it read it (changed at or after the launch),
is an output and left out; one changed after the run first saw it gets ``CHANGED_DURING_RUN``.

A file is read in 1 MiB chunks (a 1.5 GB config costs time, never memory) and digested once per
process and state (size, mtime, inode, ctime).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dsbisect.core.files import read_small
from dsbisect.records.inputs import CHANGED_DURING_RUN, MISSING

_CHUNK = 1 << 20
MAX_IMPORTED = 4000  # entries of one kind kept from the hook's lists of one run; more: capped


def file_sha(path: str | Path) -> str:
    """The file's SHA-256 (16 hex digits); ``MISSING`` when it cannot be read."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return MISSING
    return _sha(str(path), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


@functools.lru_cache(maxsize=4096)
def _sha(path: str, size: int, mtime_ns: int, ino: int, ctime_ns: int) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
    except OSError:
        return MISSING
    return h.hexdigest()[:16]


def digests(paths: Iterable[str | Path]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({str(p): file_sha(p) for p in paths}.items()))


def listing_digest(folder: str | Path) -> str:
    """A digest of the names in ``folder`` (not their contents); ``MISSING`` when it is no folder."""
    try:
        names = sorted(os.listdir(folder))
    except (OSError, ValueError):
        return MISSING
    return hashlib.sha256("\0".join(names).encode("utf-8", "surrogateescape")).hexdigest()[:16]


@dataclass(frozen=True)
class Seen:
    """A file or folder as a process of the run first saw it (ctime None: not recorded)."""

    path: str
    size: int
    mtime_ns: int
    ctime_ns: int | None = None


@dataclass(frozen=True)
class Trace:
    """The hook's records of one run, merged over its processes."""

    modules: tuple[Seen, ...] = ()  # local modules imported, and the scripts
    read: tuple[Seen, ...] = ()
    wrote: frozenset[str] = frozenset()
    given: tuple[Seen, ...] = ()  # files given to children
    listed: tuple[Seen, ...] = ()  # folders listed (size 0)
    programs: tuple[tuple[str, str], ...] = ()  # name, what it resolved to ("" nothing)
    site_modules: tuple[tuple[str, str], ...] = ()  # top-level module, its site folder
    capped: tuple[str, ...] = ()


def read_trace(folder: Path) -> Trace:
    """The hook's ``pid<P>.json`` files in ``folder`` (the run's ``imports/``), merged."""
    kinds: dict[str, dict] = {k: {} for k in ("files", "read", "wrote", "given", "listed", "programs", "modules")}
    capped: set[str] = set()
    for listing in sorted(folder.glob("pid*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(read_small(listing))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        for kind, seen in kinds.items():
            _merge(seen, kind, data.get(kind), capped)
        capped |= {str(c) for c in data.get("capped") or () if isinstance(c, str)}
    return Trace(_seen(kinds["files"]), _seen(kinds["read"]), frozenset(kinds["wrote"]), _seen(kinds["given"]),
                 tuple(Seen(p, 0, *rest) for p, *rest in kinds["listed"].values()),
                 tuple(sorted(kinds["programs"].items())), tuple(sorted(kinds["modules"].items())),
                 tuple(sorted(capped)))


_ARITY = {"files": 3, "read": 4, "given": 4, "listed": 3, "programs": 2, "modules": 2}


def _merge(seen: dict, kind: str, entries: object, capped: set[str]) -> None:
    """Add a process's ``entries`` of ``kind`` (the first process's state of a path wins)."""
    for entry in entries if isinstance(entries, list) else []:
        if kind == "wrote":
            if isinstance(entry, str):
                seen[entry] = entry
            continue
        if not (isinstance(entry, list) and len(entry) == _ARITY[kind] and isinstance(entry[0], str)):
            continue
        if kind in ("programs", "modules"):
            if isinstance(entry[1], str):
                seen.setdefault(entry[0], entry[1])
        elif all(isinstance(x, int) for x in entry[1:]):
            if len(seen) >= MAX_IMPORTED and entry[0] not in seen:
                capped.add(kind)
                continue
            seen.setdefault(entry[0], entry)


def _seen(entries: dict) -> tuple[Seen, ...]:
    return tuple(Seen(*e) for e in entries.values())


def used_files(trace: Trace, started_ns: int | None) -> tuple[tuple[str, str], ...]:
    """The files of ``trace`` that are inputs, with their digests now (see the module's
    docstring; ``started_ns``: the launch's wall-clock time, None when not known)."""
    out: dict[str, str] = {s.path: _digest_if_unchanged(s) for s in trace.modules}

    def made_by_the_run(s: Seen) -> bool:  # written by it, or made or changed by it before it was read
        return s.path in trace.wrote or (started_ns is not None and (s.ctime_ns or 0) >= started_ns)

    for s in trace.read:
        if not made_by_the_run(s) and out.get(s.path) != CHANGED_DURING_RUN:
            out[s.path] = _digest_if_unchanged(s)
    for s in trace.given:  # a file given to a child that changed is its output, as with the command line's
        digest = CHANGED_DURING_RUN if made_by_the_run(s) else _digest_if_unchanged(s)
        if digest != CHANGED_DURING_RUN:
            out.setdefault(s.path, digest)
    return tuple(sorted(out.items()))


def used_listings(trace: Trace, started_ns: int | None) -> tuple[tuple[str, str], ...]:
    """The folders of ``trace`` whose names are inputs, with a digest of their names now; a
    folder made or changed by the run (after the launch) is its output folder and left out."""
    out = {}
    for s in trace.listed:
        try:
            st = os.stat(s.path)
        except (OSError, ValueError):
            continue
        if st.st_mtime_ns != s.mtime_ns or (started_ns is not None and (s.ctime_ns or 0) >= started_ns):
            continue
        out[s.path] = listing_digest(s.path)
    return tuple(sorted(out.items()))


def _digest_if_unchanged(s: Seen) -> str:
    try:
        st = os.stat(s.path)
    except (OSError, ValueError):
        return MISSING
    if st.st_size != s.size or st.st_mtime_ns != s.mtime_ns or s.ctime_ns not in (None, st.st_ctime_ns):
        return CHANGED_DURING_RUN
    return file_sha(s.path)


def imported_files(folder: Path) -> tuple[tuple[str, str], ...]:
    """The local modules the run's interpreters imported, each with its digest now (a file that
    changed after it was imported gets ``CHANGED_DURING_RUN``, so the run is never reused)."""
    return tuple(sorted((s.path, _digest_if_unchanged(s)) for s in read_trace(folder).modules))
