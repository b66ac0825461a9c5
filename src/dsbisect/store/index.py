"""The index: a store's SQLite database (``dsbisect.sqlite3``, WAL), open.  One connection,
shared by the runner's threads under one lock; a write is one IMMEDIATE transaction (waiting
for another dsbisect's, up to 30 s); a read leaves out, and names, a row with a value over the
size limit (``bounds``).  SQLite's errors about the file itself come out as one line saying
what to do (``store repair``, a writable ``--store``), never a traceback.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dsbisect.core import disk
from dsbisect.core.errors import DiskFull, StoreError
from dsbisect.core.rundir import RunDir
from dsbisect.store import bounds, schema
from dsbisect.store.access import no_index
from dsbisect.store.schema import DB


class Index:
    """The open index of the store in ``folder``: ``tx()`` to write, ``rows()`` to read.
    ``notes`` collects what a user should know of it (rows left out, repairs made)."""

    def __init__(self, folder: Path, db: sqlite3.Connection, readonly: bool, notes: list[str]):
        self.dir = folder
        self.path = folder / DB
        self.db = db
        self.readonly = readonly
        self.notes = notes
        self.too_big: set[int] = set()  # rows left out of what was read: a value over the size limit
        self.lock = threading.RLock()

    @classmethod
    def open_readonly(cls, folder: Path, notes: list[str]) -> Index:
        return cls(folder, _open_readonly(folder / DB), True, notes)

    @classmethod
    def open_writable(cls, folder: Path, notes: list[str]) -> tuple[Index, bool]:
        """The index, made or migrated to this schema; True when it was made just now (missing
        or empty: the caller rebuilds it from the run folders)."""
        path = folder / DB
        fresh = not path.exists() or path.stat().st_size == 0
        with store_errors(path):
            db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        if fresh and folder.stat().st_mode & stat.S_ISGID:  # a --shared-group store: SQLite makes 0644 at most
            os.chmod(path, 0o660)
        db.row_factory = sqlite3.Row
        bounds.limit(db)
        index = cls(folder, db, False, notes)
        with store_errors(path):
            db.execute("PRAGMA busy_timeout=30000")
            db.execute("PRAGMA secure_delete=ON")  # a value masked since (a pin's credentials) leaves no copy
            retry_locked(lambda: db.execute("PRAGMA journal_mode=WAL"))
            with index.tx() as conn:  # IMMEDIATE: a second dsbisect on a fresh store waits here
                fresh = schema.migrate(conn, path) and fresh
        return index, fresh

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE ... COMMIT, rolled back on any error)."""
        if self.readonly:
            raise StoreError(f"{self.dir} was opened read-only")
        with self.lock, store_errors(self.path):
            retry_locked(lambda: self.db.execute("BEGIN IMMEDIATE"))
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    def rows(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        """The rows of a one-table SELECT; a row with a value over the size limit is left out
        and named (``notes``), never loaded."""
        with self.lock, store_errors(self.path):
            rows, big = bounded_rows(self.db, sql, args)
        for rowid in big:
            self.too_big.add(rowid)
            self.note(f"entry {rowid} of {sql.split()[sql.split().index('FROM') + 1]} in {self.path} is too large "
                      f"to read (a value over {bounds.SQL_LIMIT >> 20} MB); left out ('dsbisect store repair "
                      f"--store {self.dir}' rebuilds the index from the run folders)")
        return rows

    def checkpoint(self) -> None:
        """The WAL folded into the database and emptied (no copy of a replaced row is left there)."""
        with self.lock, store_errors(self.path):
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def note(self, text: str) -> None:
        """Say ``text`` once in ``notes``."""
        if text not in self.notes:
            self.notes.append(text)

    def abs(self, path: str | None) -> Path | None:
        """A path of the index (relative to the store, or absolute when outside it) as a path here."""
        return None if not path else Path(path) if Path(path).is_absolute() else self.dir / path

    def rel(self, path: Path) -> str:
        """A path as the index keeps it: relative to the store when inside it."""
        path = Path(path).resolve()
        return path.relative_to(self.dir).as_posix() if path.is_relative_to(self.dir) else str(path)

    def close(self) -> None:
        self.db.close()


def _open_readonly(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise no_index(path.parent)
    last: sqlite3.Error | None = None
    for query in ("mode=ro", "mode=ro&immutable=1"):  # immutable: a folder we may not even write -shm into
        try:
            db = sqlite3.connect(f"{path.resolve().as_uri()}?{query}", uri=True, check_same_thread=False)
            db.row_factory = sqlite3.Row
            bounds.limit(db)
            db.execute("SELECT count(*) FROM runs").fetchone()
            return db
        except sqlite3.DatabaseError as e:
            last = e
    raise _damaged(path, last)


@contextmanager
def store_errors(path: Path) -> Iterator[None]:
    """SQLite's errors about the file itself as one StoreError line, with what to do."""
    try:
        yield
    except sqlite3.OperationalError as e:
        if disk.is_full(e):
            raise DiskFull(disk.message(path)) from None
        if "readonly" in str(e) or "unable to open" in str(e):
            raise StoreError(f"{path}: cannot write ({e}); pass a writable --store") from None
        if "locked" in str(e) or "busy" in str(e):
            raise StoreError(f"{path}: still locked by another process after 30 s ({e})") from None
        raise _damaged(path, e) from None
    except sqlite3.DatabaseError as e:
        if disk.is_full(e):
            raise DiskFull(disk.message(path)) from None
        if bounds.too_big(e):
            raise StoreError(f"{path}: a value over {bounds.SQL_LIMIT >> 20} MB was refused ({e})") from None
        raise _damaged(path, e) from None
    except OSError as e:
        if disk.is_full(e):
            raise DiskFull(disk.message(path)) from None
        raise


def _damaged(path: Path, e: BaseException | None) -> StoreError:
    folders = len(list(path.parent.glob(f"runs/*/{RunDir.RECORD}")))
    return StoreError(f"{path} is damaged ({e}); 'dsbisect store repair --store {path.parent}' rebuilds it "
                      f"from its {folders} run record(s)")


def retry_locked(step: Callable[[], object], seconds: float = 30.0) -> None:
    """Run ``step``, retrying while another connection holds the lock it needs (SQLite does not
    wait for some locks, e.g. switching a new database to WAL)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            step()
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def bounded_rows(db: sqlite3.Connection, sql: str, args: tuple = ()) -> tuple[list[sqlite3.Row], list[int]]:
    """The rows of ``sql`` (``SELECT cols FROM table ...``), and the rowids of those left out
    because a value is over the connection's size limit (``bounds.limit``): read whole when
    none is, else one row at a time.  A StoreError when even the rowids cannot be read."""
    try:
        return db.execute(sql, args).fetchall(), []
    except sqlite3.DataError as e:
        if not bounds.too_big(e):
            raise
    words = sql.split()
    at = words.index("FROM")
    cols, table, rest = " ".join(words[1:at]), words[at + 1], " ".join(words[at + 2:])
    try:
        rowids = [r[0] for r in db.execute(f"SELECT rowid FROM {table} {rest}", args).fetchall()]
    except sqlite3.DataError:
        raise StoreError(f"the index holds a value too large to read in {table}; 'dsbisect store repair' "
                         "rebuilds it from the run folders") from None
    rows, big = [], []
    for rowid in rowids:
        try:
            rows += db.execute(f"SELECT {cols} FROM {table} WHERE rowid=?", (rowid,)).fetchall()
        except sqlite3.DataError:
            big.append(rowid)
    return rows, big
