"""Which dsbisect wrote a store: the index's schema (``PRAGMA user_version``) and a record's
``format``, read before anything is opened for writing.

A store (or a record) written by a newer dsbisect is refused whole, unread and untouched: an
older dsbisect that migrated, repaired or wrote into it would turn the newer one's data into
what it knows (a "repair" back to its own schema), and lose what it does not.  No SQL here
but a read-only ``PRAGMA user_version`` when the header on disk may be stale (a WAL).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from dsbisect.core.errors import InputError

HEADER = b"SQLite format 3\x00"
_USER_VERSION = slice(60, 64)  # the header's user_version field (big-endian)


def on_disk(db: Path) -> int | None:
    """The schema version of the database file ``db``; None when there is none to read (no
    file, an empty or damaged one: the store's own checks say so)."""
    try:
        with open(db, "rb") as f:
            head = f.read(100)
    except OSError:
        return None
    if len(head) < 100 or not head.startswith(HEADER):
        return None
    version = int.from_bytes(head[_USER_VERSION], "big")
    wal = Path(f"{db}-wal")
    if wal.is_file() and wal.stat().st_size > 0:  # a change not yet in the file: ask SQLite
        try:
            conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
            try:
                (version,) = conn.execute("PRAGMA user_version").fetchone()
            finally:
                conn.close()
        except sqlite3.Error:
            pass
    return version


def check(db: Path, known: int) -> None:
    """An InputError (exit 2) when ``db`` was written by a newer dsbisect than this one."""
    version = on_disk(db)
    if version is not None and version > known:
        raise newer(db, version, known)


def newer(db: Path, version: int, known: int) -> InputError:
    return InputError(f"{db.parent}: written by a newer dsbisect (schema {version}; this one reads schema {known} "
                      "at most): nothing was touched; use that dsbisect, or another --store")


def newer_record(data: object, known: int) -> int | None:
    """The ``format`` of a record newer than ``known`` (None when it is one this dsbisect reads)."""
    fmt = data.get("format") if isinstance(data, dict) else None
    return fmt if isinstance(fmt, int) and not isinstance(fmt, bool) and fmt > known else None
