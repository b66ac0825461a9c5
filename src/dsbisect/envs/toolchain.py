"""One build toolchain for every rank: the ``ninja`` of dsbisect's own environment.

DeepSpeed compiles its ops just in time with torch's cpp_extension, which runs the first
``ninja`` on the rank's ``PATH``.  Taken from the caller's ``PATH``, it changed with how
dsbisect was started (``.venv/bin/dsbisect``: /usr/bin/ninja 1.11, a v5 build log; with the
venv active: .venv/bin/ninja 1.13, v7), and each ninja threw the other's log away and compiled
the op again.  The ranks get a folder holding only that one ``ninja`` (a link, so nothing else
of dsbisect's environment -- its python, its pip -- shadows the point's), first on ``PATH``.
"""

from __future__ import annotations

import hashlib
import os
import threading
import shutil
import sys
from pathlib import Path


def own_ninja() -> Path | None:
    """The ninja of the environment dsbisect runs in (its venv's ``bin/``, then the ``ninja``
    package it can import), else None: the ranks' PATH is then left as the caller's."""
    here = Path(sys.prefix) / "bin" / "ninja"
    if os.access(here, os.X_OK):
        return here.resolve()
    try:
        import ninja  # the PyPI wheel of ninja, where dsbisect's environment has it
    except ImportError:
        return None
    found = shutil.which("ninja", path=str(getattr(ninja, "BIN_DIR", "")))
    return Path(found).resolve() if found else None


def ninja_dir(root: Path) -> Path | None:
    """A folder under ``root`` (the env root) that holds only a ``ninja`` link to ``own_ninja``:
    one per ninja binary (two dsbisects of different environments may share the root)."""
    target = own_ninja()
    if target is None:
        return None
    folder = root / "tools" / hashlib.sha256(str(target).encode()).hexdigest()[:16]
    link = folder / "ninja"
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".ninja.{os.getpid()}.{threading.get_ident()}"  # two runs of one process may race here
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)  # atomic: a concurrent run sees the old link or the new, never none
    return folder


def first_on_path(env: dict[str, str], folder: Path | None) -> dict[str, str]:
    """``env`` with ``folder`` first on its ``PATH`` (unchanged for None)."""
    if folder is None:
        return env
    return env | {"PATH": f"{folder}{os.pathsep}{env.get('PATH', '')}"}


def rank_path(path: str, root: Path, bin_dir: Path | None = None) -> str:
    """The ``PATH`` a rank of a point venv gets from the caller's ``path``: ``bin_dir`` (the point
    venv's ``bin/``, for a command line) before it, and the folder of dsbisect's ninja first.  A
    recorded run's programs are resolved again on this ``PATH``, not the caller's: a run's ninja
    is the one dsbisect gave it, whatever the shell that started dsbisect finds."""
    if bin_dir is not None:
        path = f"{bin_dir}{os.pathsep}{path}"
    return first_on_path({"PATH": path}, ninja_dir(root))["PATH"]
