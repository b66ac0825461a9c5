"""The index built from the run folders, which are the truth: every record (``runs/*/run.json``)
and bisection file indexed, when the index was lost (made anew) or by ``store repair`` (in
place, in one transaction).  A record that cannot be read as one is moved to ``quarantine/``
and named, one of a newer dsbisect is left where it is and named; nothing is deleted.
"""

from __future__ import annotations

import errno
import secrets
import sqlite3
from pathlib import Path

from dsbisect.core.errors import DiskFull
from dsbisect.core.model import Point
from dsbisect.core.rundir import RunDir
from dsbisect.records.bisections import BisectionRecord
from dsbisect.store import bounds, version
from dsbisect.store.bisections import Bisections
from dsbisect.store.index import Index
from dsbisect.store.schema import inside_runs, relative_folder, relative_run_dir
from dsbisect.store.values import (RECORD_FORMAT, RUN_COLUMNS, db_value, kept, kept_point, record_problem, row_values,
                                   write_record)


def records(folder: Path) -> list[Path]:
    """Every run record in the run folders of the store in ``folder``."""
    runs = folder / "runs"
    return sorted(runs.glob(f"*/{RunDir.RECORD}")) if runs.is_dir() else []


class Reindexer:
    """Indexes the folders of ``index``'s store into it."""

    def __init__(self, index: Index, bisections: Bisections):
        self.index = index
        self.bisections = bisections

    def import_records(self, replace: bool = False) -> int:
        """Index every run record and bisection file of the folders (``replace``: instead of
        the runs the index holds, in one transaction); the number of runs.  A record that cannot
        be read as one is moved to ``quarantine/`` and named; one of a newer dsbisect is left
        where it is, and named."""
        count = 0
        with self.index.tx() as db:  # one record at a time: memory is one record's, whatever the store's size
            unreadable = self.unreadable_rows(db) if replace else {}
            if replace:  # but the rows a record may not stand for: kept until one does
                db.execute(f"DELETE FROM runs WHERE id NOT IN ({', '.join('?' * len(unreadable))})",
                           tuple(unreadable.values()))
            for path in records(self.index.dir):
                data = self.readable(path)
                if data is None:
                    continue
                stale = unreadable.pop(self.index.rel(path.parent), None)
                if stale is not None:
                    db.execute("DELETE FROM runs WHERE id=?", (stale,))
                self.index_row(db, data, path.parent)
                count += 1
        for folder, run_id in unreadable.items():
            self.index.notes.append(f"run {run_id}: its entry in the index is not readable and no run folder holds its "
                              f"record ({folder}): kept in the index as it is")
        for path in sorted((self.index.dir / "bisections").glob("*.json")):
            try:
                self.bisections.put(BisectionRecord.from_json(bounds.read_json(path)))
            except OSError as e:
                self.index.notes.append(f"{self.index.rel(path)}: not readable ({e.strerror or e}); left out")
            except (ValueError, KeyError, TypeError, AttributeError):
                self.index.notes.append(f"{self.index.rel(path)}: not readable; left out")
        return count

    def reindex(self) -> int:
        """The runs of the index rebuilt from the run folders, in place and in one transaction
        (``store repair`` of a sound index); the number of runs indexed."""
        found = self.import_records(replace=True)
        self.index.checkpoint()  # the WAL's copies of what was replaced, gone too
        return found

    def unreadable_rows(self, db: sqlite3.Connection) -> dict[str, int]:
        """The rows that cannot be read (bad values, or too large): their folder -> their id."""
        out = {}
        for (run_id,) in db.execute("SELECT id FROM runs").fetchall():
            try:
                rows = db.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchall()
                problem = row_values(rows[0])[1]
            except sqlite3.DataError:
                problem = "too large"
            if problem:
                (folder,) = db.execute("SELECT folder FROM runs WHERE id=?", (run_id,)).fetchone()
                out[str(folder)] = run_id
        return out

    def readable(self, path: Path) -> dict | None:
        """The record at ``path``, checked (its pins' credentials masked in place when an older
        dsbisect kept them); None when it is not one (quarantined or named)."""
        try:
            data = bounds.read_json(path)
        except OSError as e:
            if e.errno == errno.EFBIG:
                self.quarantine(path, e.strerror)
            else:
                self.index.notes.append(f"{self.index.rel(path)}: not readable ({e.strerror}); left out")
            return None
        except ValueError as e:
            self.quarantine(path, f"not JSON ({e})")
            return None
        newer = version.newer_record(data, RECORD_FORMAT)
        if newer is not None:
            self.index.notes.append(f"{self.index.rel(path)}: written by a newer dsbisect (record format {newer}); left "
                              "as it is, not indexed")
            return None
        problem = record_problem(data)
        if problem:
            self.quarantine(path, problem)
            return None
        return self.masked_record(path, data)

    def masked_record(self, path: Path, data: dict) -> dict:
        """A record whose point kept its pins' credentials (an older dsbisect), rewritten masked."""
        point = kept_point(data["point"])
        if point == data["point"]:
            return data
        data = data | {"point": point, "point_key": Point.from_json(point).key}
        try:
            write_record(self.index.dir, data | {"folder": self.index.rel(path.parent)})
            self.index.notes.append(f"{self.index.rel(path)}: the credentials in its pins are masked now")
        except (OSError, DiskFull) as e:
            self.index.notes.append(f"{self.index.rel(path)}: holds its pins' credentials (not masked: {e})")
        return data

    def index_row(self, db: sqlite3.Connection, data: dict, folder: Path) -> None:
        values = {c: data.get(c) for c in RUN_COLUMNS}
        values["folder"] = self.index.rel(folder)
        values["run_dir"] = self.evidence_dir(data.get("run_dir"), data.get("folder")) or values["folder"]
        values = kept(values)
        sql = f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({', '.join('?' for _ in RUN_COLUMNS)})"
        try:
            db.execute(sql, tuple(db_value(c, values[c]) for c in RUN_COLUMNS))
        except sqlite3.IntegrityError:  # two folders claim one id (a copied runs/): a new id
            db.execute(sql, tuple(None if c == "id" else db_value(c, values[c]) for c in RUN_COLUMNS))

    def evidence_dir(self, run_dir: str | None, folder: str | None) -> str | None:
        """Where a record says its evidence is, when that is not its own folder and is there:
        a path of this store, or a folder outside every store (a Slurm job's); never another
        store's run folder (the store may have moved, or be a copy)."""
        run_dir = relative_run_dir(run_dir, folder)
        if not run_dir or run_dir == relative_folder(folder):
            return None
        here = self.index.abs(run_dir)
        if not here.is_dir() or (Path(run_dir).is_absolute() and inside_runs(here)):
            return None
        return run_dir

    def quarantine(self, record: Path, problem: str) -> None:
        """Move a run folder whose record cannot be read out of ``runs/`` (nothing is deleted)."""
        where = self.index.dir / "quarantine"
        target = where / record.parent.name
        while target.exists():
            target = where / f"{record.parent.name}-{secrets.token_hex(3)}"
        try:
            where.mkdir(exist_ok=True)
            record.parent.rename(target)
        except OSError as e:
            self.index.notes.append(f"{self.index.rel(record)}: {problem}; left out (could not move it aside: {e.strerror})")
            return
        self.index.notes.append(f"{self.index.rel(record)}: {problem}; moved to {self.index.rel(target)}")
