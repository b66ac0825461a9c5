"""Where dsbisect may write a file the user named, and how it writes one.

Every file a command writes on request (``-o``/``--output``, ``--html``, a folder such as
``prefetch --dest``) goes through ``check_target`` before anything runs, and through
``write_text`` when the work is done:

- never into a store (``--store``, or any folder that holds a store's own files: its index,
  its lock), nor into a point venv of the cache (its marker);
- never over an input of the command (a matrix, an environment file, a script, a replayed
  log) nor into an input folder (a venv compared), whatever name reaches it: the path itself,
  a symbolic link to it, or another hard link of the same file;
- never onto another output of the same command (``-o x --html x``);
- written whole beside the target, then renamed into place, so a half-written report never
  replaces a whole one, and a hard link's other names keep their content.

A refusal is an ``InputError``: one line, exit 2.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dsbisect.core.errors import DsbisectError, InputError

# A folder holding one of these is a store (``store.DB``, ``claims.LOCK``), one holding the other a
# point venv of dsbisect's cache (``envs.cache.MARKER``): a test holds them equal.
STORE_FILES = ("dsbisect.sqlite3", "dsbisect.lock")
VENV_MARKER = "dsbisect-env.json"


@dataclass(frozen=True)
class Guarded:
    """What a command's outputs must keep away from.

    ``stores``: folders nothing may be written into (the flag that names each: ``--store``,
    ``--cache-dir``); ``inputs``: files a
    write may not replace; ``input_dirs``: folders a write may not go into; ``outputs``: the
    command's other outputs (``flag``, path)."""

    stores: tuple[tuple[str, Path], ...] = ()
    inputs: tuple[Path, ...] = ()
    input_dirs: tuple[Path, ...] = ()
    outputs: tuple[tuple[str, Path], ...] = ()


def _real(path: Path) -> Path:
    """``path`` with every symbolic link followed (a dangling one: to where it points)."""
    return Path(os.path.realpath(Path(path).expanduser()))


def is_store(folder: Path) -> bool:
    """Does ``folder`` hold a store's own files?"""
    try:
        return any((folder / name).exists() for name in STORE_FILES)
    except OSError:
        return False


def _kept_above(target: Path) -> str | None:
    """The store or point venv that ``target`` (a resolved path) is, or lies in, said; None
    when it is in none."""
    for folder in (target, *target.parents):
        if folder.is_dir() and is_store(folder):
            return f"the dsbisect store {folder}"
        if (folder / VENV_MARKER).is_file():
            return f"the point venv {folder} of dsbisect's cache"
    return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def _clash(path: Path, flag: str, guarded: Guarded) -> str | None:
    """Why ``path`` may not be written, or None."""
    target = _real(path)
    for kept_flag, kept in guarded.stores:
        real = _real(kept)
        if target == real or target.is_relative_to(real):
            return f"it is inside {kept} ({kept_flag}), which dsbisect keeps"
    found = _kept_above(target)
    if found is not None:
        return f"it is inside {found}"
    for given in guarded.inputs:
        if target == _real(given) or _same_file(path, given):
            return f"it is {given}, an input of this command"
    for folder in guarded.input_dirs:
        real = _real(folder)
        if target == real or target.is_relative_to(real):
            return f"it is inside {folder}, an input of this command"
    for other_flag, other in guarded.outputs:
        if target == _real(other) or _same_file(path, other):
            return f"{other_flag} names it too"
    return None


def check_target(path: Path, flag: str = "--output", guarded: Guarded = Guarded(), folder: bool = False) -> None:
    """An InputError unless ``path`` is a file (``folder``: a folder, made if missing) the
    command may write: a writable folder holds it, and nothing in ``guarded`` is at risk."""
    path = Path(path)
    why = _clash(path, flag, guarded)
    if why is not None:
        raise InputError(f"{flag} {path}: {why}; name another {'folder' if folder else 'file'}")
    if folder:
        there = next((p for p in (path, *path.absolute().parents) if p.exists()), None)
        if there is not None and not there.is_dir():
            raise InputError(f"{flag} {path}: {there} is a file, not a folder")
        return
    parent = path.parent
    if path.is_dir():
        raise InputError(f"{flag} {path}: is a folder; name a file")
    if not parent.is_dir():
        raise InputError(f"{flag} {path}: there is no folder {parent}")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InputError(f"{flag} {path}: not writable")


def write_text(path: Path, text: str, flag: str = "--output") -> None:
    """``text`` into ``path`` (where a link leads), written whole beside it and renamed into
    place; a device or a pipe (``/dev/stdout``) is written directly.  A DsbisectError naming
    ``flag`` when it cannot be written."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None
    try:
        if mode is not None and not stat.S_ISREG(mode):
            with open(path, "w") as f:
                f.write(text)
            return
        _replace(_real(path), text.encode(), None if mode is None else stat.S_IMODE(mode))
    except OSError as e:  # checked before the work, so something changed since: say so
        raise DsbisectError(f"{flag} {path}: could not be written ({e.strerror or e}); the report is on "
                            "stdout and the runs are in the store") from None


def _replace(target: Path, data: bytes, mode: int | None) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 if mode is None else mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def existing_files(words: Iterable[object]) -> tuple[Path, ...]:
    """The words that name a regular file that is there (a command line's inputs)."""
    out = []
    for w in words:
        if not isinstance(w, (str, Path)) or not str(w) or "\0" in str(w):
            continue
        try:
            if Path(w).is_file():
                out.append(Path(w))
        except (OSError, ValueError):
            continue
    return tuple(out)
