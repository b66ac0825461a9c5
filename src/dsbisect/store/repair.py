"""``dsbisect store repair``: first what is wrong, then only what that needs.

The run folders are the truth and the index is rebuilt from them, but how depends on what
the index is:

- sound (SQLite's integrity check passes, its tables are there): it stays where it is; its
  runs are re-indexed from the run folders in one transaction, and the repair says whether
  they agreed (nothing to repair) or what changed (added, corrected, removed);
- damaged: it is moved aside (``dsbisect.sqlite3.damaged-<time>``, put back if the rebuild
  cannot finish) and a new one is built from the run folders;
- missing or empty: a new one is built from the run folders.

Either way the rows of the old index whose folder has no readable record (a dsbisect killed
before it wrote one, a record overwritten or cut) get their record written from the row
first; an unreadable record is set aside beside it (``run.json.unreadable-<time>``), never
deleted.  A store of a newer dsbisect is refused untouched; a read-only one is one line.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from dsbisect.core.errors import DiskFull, InputError, StoreError
from dsbisect.core.rundir import RunDir
from dsbisect.records.run import Evidence
from dsbisect.store import bounds, version
from dsbisect.store.access import check_access, read_only_fs, store_dir
from dsbisect.store.claims import StoreLock
from dsbisect.store.schema import DB, SCHEMA, relative_folder, relative_run_dir
from dsbisect.store.store import Store
from dsbisect.store.values import RECORD_FORMAT, record_problem, row_values, write_record


@dataclass(frozen=True)
class Found:
    """What the index is before a repair: ``problem`` "" when sound; ``rows`` its readable runs
    (id -> status, outcome, point), for saying what the repair changed."""

    exists: bool
    problem: str = ""
    rows: tuple[tuple[int, tuple], ...] = ()
    unreadable: tuple[int, ...] = ()  # rows whose values cannot be read (bad, or too large)

    @property
    def sound(self) -> bool:
        return self.exists and not self.problem


def examine(db: Path) -> Found:
    """Is the database at ``db`` sound? Read-only: nothing is written."""
    if not db.is_file() or db.stat().st_size == 0:
        return Found(exists=False)
    try:
        conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        return Found(True, f"it cannot be opened ({e})")
    try:
        bounds.limit(conn)
        check = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
        if check != ["ok"]:
            return Found(True, f"SQLite's integrity check: {check[0]}" + (f" (+{len(check) - 1} more)" if len(check) > 1 else ""))
        conn.row_factory = sqlite3.Row
        readable, bad = summary(conn)
        conn.execute("SELECT count(*) FROM bisections").fetchone()
    except (sqlite3.Error, StoreError) as e:
        return Found(True, str(e))
    finally:
        conn.close()
    return Found(True, "", tuple(readable.items()), tuple(bad))


def rows_one_by_one(conn: sqlite3.Connection):
    """(id, row or None) of every run of the index, read one at a time (None: a value over the
    size limit): memory is one row's, whatever the index holds."""
    for (run_id,) in conn.execute("SELECT id FROM runs ORDER BY id").fetchall():
        try:
            yield run_id, conn.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
        except sqlite3.DataError:
            yield run_id, None


def summary(conn: sqlite3.Connection) -> tuple[dict[int, tuple], list[int]]:
    """Each readable run's (status, outcome, point key) by id, and the ids of those not readable."""
    out, bad = {}, []
    for run_id, row in rows_one_by_one(conn):
        values, problem = row_values(row) if row is not None else ({}, "too large")
        if problem:
            bad.append(run_id)
        else:
            out[run_id] = (values["status"], values["outcome"], values["point_key"])
    return out, bad


def repair(directory: Path) -> tuple[Store, Path | None]:
    """Repair the store (see the module): the store, open, with what was found and done in its
    notes, and where a damaged database was moved (None when nothing was moved)."""
    folder = store_dir(Path(directory)).resolve()
    db = folder / DB
    if not folder.is_dir():
        raise InputError(f"no dsbisect store in {folder}")
    check_access(folder, write=True)
    version.check(db, len(SCHEMA))
    if read_only_fs(folder):
        raise InputError(f"--store {folder}: on a read-only filesystem; repair writes the store: copy it (cp -a) "
                         "to a writable disk and repair the copy")
    lock = StoreLock(folder, exclusive=True)
    try:
        found = examine(db)
        salvage = salvage_rows(folder) if found.exists else []
        if found.sound:
            store, moved = _in_place(folder, lock, found, bool(salvage)), None
        else:
            store, moved = _rebuilt(folder, lock, found)
    except BaseException:
        lock.release()
        raise
    store.notes[:0] = salvage
    return store, moved


def _in_place(folder: Path, lock: StoreLock, found: Found, salvaged: bool) -> Store:
    """A sound index, kept: its runs re-indexed from the folders in one transaction."""
    store = Store(folder, lock=lock)
    try:
        n = store.reindex()
        after, _ = summary(store.db)
    except BaseException:
        store.close()
        raise
    before = dict(found.rows)
    added = [i for i in after if i not in before and i not in found.unreadable]
    removed = [i for i in before if i not in after]
    changed = [i for i in after if (i in before and after[i] != before[i]) or i in found.unreadable]
    db = folder / DB
    store.notes.append(f"{db}: sound (SQLite's integrity check passed): kept in place, nothing moved")
    if not (added or removed or changed):
        store.notes.append(f"its {len(after)} run(s) agree with the {n} run record(s) in runs/"
                           + (" (once those above were written)" if salvaged else ": nothing to repair"))
    else:
        parts = [f"{len(x)} {what} ({_ids(x)})" for x, what in ((added, "added"), (changed, "corrected"),
                                                                 (removed, "removed")) if x]
        store.notes.append(f"re-indexed from the {n} run record(s) in runs/: {', '.join(parts)}")
    return store


def _ids(ids: list[int]) -> str:
    return "runs " + ", ".join(map(str, ids[:10])) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")


def _rebuilt(folder: Path, lock: StoreLock, found: Found) -> tuple[Store, Path | None]:
    """A damaged index moved aside (put back if the rebuild fails), a missing or empty one
    replaced: a new one built from the run folders."""
    db = folder / DB
    moved = None
    if found.exists:
        moved = move_db(db, db.with_name(f"{DB}.damaged-{time.strftime('%Y%m%d-%H%M%S')}"))
    try:
        store = Store(folder, lock=lock)
    except (DiskFull, StoreError):
        for side in ("", "-wal", "-shm"):
            Path(str(db) + side).unlink(missing_ok=True)
        if moved:
            move_db(moved, db)
        raise
    if found.exists:
        store.notes.insert(0, f"{db}: damaged ({found.problem})")
    if not any("rebuilt from" in n for n in store.notes):
        store.notes.append(f"{db}: rebuilt from 0 run folders (none holds a run record)")
    return store, moved


def move_db(src: Path, dst: Path) -> Path:
    src.rename(dst)
    for side in ("-wal", "-shm"):
        extra = src.with_name(src.name + side)
        if extra.exists():
            extra.rename(dst.with_name(dst.name + side))
    return dst


def _record_problem(path: Path) -> str | None:
    """Why the record at ``path`` cannot be read (None: it can, or it is a newer dsbisect's,
    which is left alone)."""
    try:
        data = bounds.read_json(path)
    except OSError as e:
        return e.strerror or str(e)
    except ValueError as e:
        return f"not JSON ({e})"
    if version.newer_record(data, RECORD_FORMAT) is not None:
        return None
    return record_problem(data)


def salvage_rows(folder: Path) -> list[str]:
    """Write the record of every row of the old index whose run folder has no readable one: a
    finished run's (its dsbisect was killed between index and record, wrote no records: an
    older dsbisect, or the record was overwritten), an unfinished run's as interrupted.  An
    unreadable record is set aside beside it first.  A finished run whose folder is gone gets
    its folder back with the record; a row that never finished and has no folder is dropped,
    and said.  Rows are read one at a time.  Returns notes."""
    notes: list[str] = []
    kept, dropped = [], []
    try:
        old = sqlite3.connect(f"{(folder / DB).as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        return [f"{folder / DB}: its rows could not be read ({e}); only the run folders were used"]
    try:
        old.row_factory = sqlite3.Row
        bounds.limit(old)
        for run_id, row in rows_one_by_one(old):
            done = _salvaged_row(folder, run_id, row, notes)
            if done is not None:
                (kept if done else dropped).append(str(run_id))
    except sqlite3.Error as e:
        notes.append(f"{folder / DB}: its rows could not all be read ({e}); the run folders were used")
    finally:
        old.close()
    if kept:
        notes.append(f"{len(kept)} run(s) of the old index had no readable {RunDir.RECORD} in their folder: "
                     f"written from the index (runs {', '.join(kept)})")
    if dropped:
        notes.append(f"{len(dropped)} unfinished run(s) of the old index left no folder and no result: "
                     f"dropped (runs {', '.join(dropped)})")
    return notes


def _salvaged_row(folder: Path, run_id: int, row, notes: list[str]) -> bool | None:
    """One row of the old index salvaged (``_salvaged``), or said why not."""
    if row is None:
        notes.append(f"entry {run_id} of the old index is too large to read; left out (its run folder's record "
                     "is used)")
        return None
    values, problem = row_values(row)
    if problem:
        notes.append(f"run {run_id}: its row in the old index is not readable ({problem}); left out")
        return None
    return _salvaged(folder, values, notes)


def _salvaged(folder: Path, values: dict, notes: list[str]) -> bool | None:
    """The record of one row written when its folder has no readable one: True (written),
    False (dropped: unfinished, no folder), None (nothing to do)."""
    old_folder = values.get("folder") or values.get("run_dir")
    values["folder"] = relative_folder(old_folder)
    if values["folder"] is None:
        return None
    values["run_dir"] = relative_run_dir(values.get("run_dir"), old_folder) or values["folder"]
    here = folder / values["folder"]
    record = here / RunDir.RECORD
    if (folder / "quarantine" / here.name).exists():
        return None
    if record.exists():
        problem = _record_problem(record)
        if problem is None:
            return None
        aside = record.with_name(f"{RunDir.RECORD}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
        record.rename(aside)
        notes.append(f"{values['folder']}/{RunDir.RECORD}: {problem}; set aside as {aside.name}")
    if values["status"] != "done":
        if not here.is_dir():
            return False
        values |= {"status": "interrupted", "finished": values.get("finished") or time.time(),
                   "reason": values.get("reason") or "its dsbisect stopped before the run ended (kept by "
                                                     "store repair from the old index)"}
    elif not here.is_dir():
        values["evidence"] = Evidence.from_json(values["evidence"]).noted(
            "its run folder was gone when the store was repaired: record kept from the index").to_json()
    write_record(folder, values)
    return True
