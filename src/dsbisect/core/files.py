"""Files dsbisect did not write: digested as a stream, read whole only below a limit.

A file named on the command line, a matrix, a hostfile, a config, a log to replay, a rank's
flight-recorder dump: any of them can be any size.  ``digest`` reads a bounded chunk at a
time (a 1.5 GB data file named by the repro costs 1 MB of memory, not 1.5 GB); ``read_small``
refuses a file over its limit with an ``OSError`` (EFBIG) whose ``strerror`` says so, so every
caller's existing "cannot be read: <strerror>" message covers it.
"""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

CHUNK = 1 << 20
TEXT_LIMIT = 16 << 20  # a matrix, hostfile, config or mark log: far below this
DATA_LIMIT = 256 << 20  # a flight-recorder dump, an index page on disk
PROOF_LIMIT = 1 << 20  # a deadlock proof (a few KB): what show and report read of one


def digest(path: Path | str) -> str:
    """The sha256 of the file's content, read a chunk at a time (16 hex digits)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()[:16]


def size_text(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def read_small(path: Path | str, limit: int = TEXT_LIMIT) -> bytes:
    """The whole file, if it holds at most ``limit`` bytes; else OSError(EFBIG)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise too_large(path, size, limit)
        data = f.read(limit + 1)  # a file that grows meanwhile (or /proc) is held to the limit too
    if len(data) > limit:
        raise too_large(path, len(data), limit)
    return data


def read_small_text(path: Path | str, limit: int = TEXT_LIMIT, errors: str = "strict") -> str:
    """``read_small`` as UTF-8 text (UnicodeDecodeError as ``bytes.decode`` gives it)."""
    return read_small(path, limit).decode("utf-8", errors)


def too_large(path: Path | str, size: int, limit: int) -> OSError:
    return OSError(errno.EFBIG, f"too large to read ({size_text(size)}; at most {size_text(limit)} is read)",
                   str(path))


def existing_dir(path: object) -> Path | None:
    """``path`` as a folder that is there; None for none, or for what no folder can be named by
    (a damaged record's value: not text, too long, a NUL byte)."""
    if not isinstance(path, (str, Path)) or not str(path):
        return None
    try:
        return Path(path) if Path(path).is_dir() else None
    except (OSError, ValueError):
        return None
