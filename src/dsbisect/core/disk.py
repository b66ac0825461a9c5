"""A full disk, said in one line: which filesystem, and which file could not be written.

Standard library only.  ``message`` names the filesystem by its mount point (and device,
from ``/proc/self/mounts`` where there is one), so "no space left" says where to free space.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

FULL = (errno.ENOSPC, errno.EDQUOT)


def is_full(e: BaseException) -> bool:
    """Is this the error of a write to a full disk (or an exhausted quota)?"""
    if isinstance(e, OSError):
        return e.errno in FULL
    if isinstance(e, sqlite3.Error):
        return getattr(e, "sqlite_errorcode", None) == 13 or "database or disk is full" in str(e)  # SQLITE_FULL
    return False


def mount_of(path: Path) -> Path:
    """The mount point of the filesystem that holds ``path`` (or would, for a path not made yet)."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        dev = p.stat().st_dev
        while p != p.parent and p.parent.stat().st_dev == dev:
            p = p.parent
    except OSError:
        pass
    return p


def device_of(mount: Path) -> str:
    """The device (or filesystem name, e.g. tmpfs) mounted at ``mount``; '' when not found."""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return ""
    found = ""
    for line in lines:
        parts = line.split()
        if len(parts) > 1 and parts[1].replace("\\040", " ") == str(mount):
            found = parts[0]  # the last mount at a point is the one in use
    return found


def message(path: Path | str | None) -> str:
    """'no space left on DEVICE (path)': the filesystem of ``path`` and the path."""
    if not path:
        return "no space left on device (a file dsbisect was writing); free some space and run again"
    mount = mount_of(Path(path))
    dev = device_of(mount)
    where = f"{dev} at {mount}" if dev and dev != str(mount) else str(mount)
    return f"no space left on {where} ({path}); free some space there and run again"
