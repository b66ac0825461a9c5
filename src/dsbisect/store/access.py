"""The store's folder: where ``--store`` points, whether this user may read or write it (one
line saying why not, never a traceback), the lock a writer holds on it, and what a folder
without its index is (a lost index, or no store at all).
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dsbisect.core import disk
from dsbisect.core.errors import DiskFull, DsbisectError, InputError, StoreError
from dsbisect.core.rundir import RunDir
from dsbisect.store import claims
from dsbisect.store.claims import StoreLock
from dsbisect.store.schema import DB


def store_dir(path: Path) -> Path:
    """The store folder ``--store`` names: a folder, or the ``dsbisect.sqlite3`` file in one."""
    path = Path(path).expanduser()
    if path.name == DB or (path.is_file() and path.suffix in (".sqlite3", ".sqlite", ".db")):
        return path.parent
    return path


def ignored_by_git(folder: Path, made: bool) -> None:
    """A ``*`` ``.gitignore`` in the store folder (as in the env root): a store made inside a
    clone (``.dsbisect/`` of a subfolder the job ran from) never shows in ``git status``.  Only in
    a folder dsbisect made or named ``.dsbisect``: never in a folder of the user's (``--store .``)."""
    ignore = folder / ".gitignore"
    if (made or folder.name == ".dsbisect") and not ignore.exists():
        try:
            ignore.write_text("*\n")
        except OSError as e:  # a full disk is said where the store writes next; the rest is the user's
            if not disk.is_full(e):
                raise


def check_store_path(path: Path, writable: bool = True) -> Path:
    """The store folder for ``--store PATH``, or an InputError saying why it cannot be one."""
    folder = store_dir(path)
    for p in (folder, *folder.parents):
        if p.exists() and not p.is_dir():
            raise InputError(f"--store {path}: {p} is a file, not a folder")
        if p.exists():
            break
    if writable:  # called once everything else is checked: the store is made here
        existing = next(p for p in (folder, *folder.parents) if p.exists())
        if not os.access(existing, os.W_OK | os.X_OK):
            why = " (a read-only filesystem)" if read_only_fs(existing) else f"; permission denied: {_who(existing)}"
            raise InputError(f"--store {path}: {existing} is not writable{why}")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"--store {path}: {folder} is not writable ({e.strerror})") from None
    return folder


def check_access(folder: Path, write: bool) -> None:
    """'permission denied: ...' when this user may not read (or write) the store: not damage."""
    db = folder / DB
    try:
        for p in (folder, *folder.parents):
            if p.exists():
                break
        exists = db.exists()
    except PermissionError:
        blocker = next(p for p in (folder, *folder.parents) if _visible(p))
        raise StoreError(f"permission denied: {db} cannot be read ({_who(blocker)} may not be entered); "
                         "ask its owner, or pass a --store of your own") from None
    if not exists:
        return
    need = os.R_OK | (os.W_OK if write else 0)
    for p in [db] + ([Path(f"{db}-wal"), Path(f"{db}-shm"), folder] if write else []):
        if p.exists() and not os.access(p, need | (os.X_OK if p == folder else 0)):
            if read_only_fs(p):
                return  # a read-only mount: not permissions (writing says so when it is tried)
            raise StoreError(f"permission denied: {_who(p)}; "
                             + ("dsbisect can read it (report, show) but not write it; pass a --store of your own"
                                if os.access(db, os.R_OK) else "ask its owner, or pass a --store of your own"))


def _visible(p: Path) -> bool:
    try:
        p.stat()
        return True
    except OSError:
        return False


def read_only_fs(p: Path) -> bool:
    try:
        return bool(os.statvfs(p).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _who(p: Path) -> str:
    """``path (owner NAME, mode 0700)``."""
    st = p.stat()
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    return f"{p} (owner {owner}, mode {stat.S_IMODE(st.st_mode):04o})"


def no_index(folder: Path) -> DsbisectError:
    """The error of a store folder without its index: a lost index (run records, bisections, run
    folders or the store's own files are there) points to ``store repair``; only an empty or
    absent folder is "no store"."""
    records = len(list(folder.glob(f"runs/*/{RunDir.RECORD}")))
    bisections = len(list(folder.glob("bisections/*.json")))
    runs = len([d for d in folder.glob("runs/*") if d.is_dir()])
    repair_ = f"'dsbisect store repair --store {folder}'"
    if records or bisections:
        held = " and ".join(f"{n} {what}" for n, what in ((records, "run record(s) in runs/"),
                                                            (bisections, "bisection(s) in bisections/")) if n)
        return StoreError(f"{folder} has no index ({DB}) but holds {held}: {repair_} indexes them")
    if runs or (folder / claims.LOCK).exists() or (folder / claims.WRITERS).is_dir():
        left = f" ({runs} run folder(s), none with a record)" if runs else ""
        return StoreError(f"{folder} is a dsbisect store whose index ({DB}) is gone{left}: nothing recorded to "
                          f"read; {repair_} makes a new index")
    return InputError(f"no dsbisect store in {folder} (run 'dsbisect run' first, or pass --store)")


def lock(folder: Path) -> StoreLock:
    """The shared lock of a writer of the store in ``folder`` (``claims.StoreLock``)."""
    with full_as_one_line(folder / claims.LOCK):
        return StoreLock(folder)


def writer(hold: StoreLock | None, folder: Path) -> str | None:
    """The token of this process's writer file in the store ``folder`` (made on first use);
    None for a process that holds no lock on it."""
    if hold is None:
        return None
    with full_as_one_line(folder / claims.WRITERS):
        return hold.writer()


@contextmanager
def full_as_one_line(path: Path) -> Iterator[None]:
    """A full disk met inside as one DiskFull line naming ``path``."""
    try:
        yield
    except OSError as e:
        if disk.is_full(e):
            raise DiskFull(disk.message(path)) from None
        raise
