"""Bisections as the store keeps them: ``bisections/<key>.json`` (the truth, written whole
first) and its row in the index; a running one names this process as its writer, so that it
reads back as ``interrupted`` once this process is gone (``claims.judged``).
"""

from __future__ import annotations

import json
import socket
import time

from dsbisect.core import disk
from dsbisect.core.errors import DiskFull
from dsbisect.core.redact import redact_tree
from dsbisect.records.bisections import AskedFor, BisectionRecord, BisectionStatus
from dsbisect.store import bounds, claims
from dsbisect.store.claims import StoreLock
from dsbisect.store.index import Index
from dsbisect.store.reading import pid_alive
from dsbisect.store.values import bisection_of_row
from dsbisect.store.writing import Heartbeat


class Bisections:
    """The bisections of ``index``: read (judged), saved, and indexed from their files."""

    def __init__(self, index: Index, hold: StoreLock | None, heartbeat: Heartbeat):
        self.index = index
        self.hold = hold
        self.heartbeat = heartbeat

    def bisection(self, key: str) -> BisectionRecord | None:
        rows = self.index.rows("SELECT * FROM bisections WHERE key=?", (key,))
        return self.judged(bisection_of_row(rows[0])) if rows else None

    def judged(self, b: BisectionRecord) -> BisectionRecord:
        """A running bisection whose dsbisect is gone, read back as interrupted (``claims.judged``)."""
        return claims.judged(b, self.index.dir, socket.gethostname(), time.time(), pid_alive)

    def bisections(self) -> list[BisectionRecord]:
        """Every bisection of the store, oldest first (by last update); a row that cannot be
        read is left out and named in ``notes``."""
        out = []
        for row in self.index.rows("SELECT * FROM bisections ORDER BY updated, id"):
            try:
                out.append(self.judged(bisection_of_row(row)))
            except (ValueError, TypeError, KeyError) as e:
                self.index.note(f"bisection {row['key']}: its entry in {self.index.path} is not readable "
                                f"({type(e).__name__}); left out")
        return out

    def save_bisection(self, key: str, package: str, good: str, bad: str, params: AskedFor,
                       status: BisectionStatus, result: dict) -> int:
        """Record a bisection's state (its file, then its row): secrets masked, sizes capped; a
        running one names this process as its writer, so that it reads back as interrupted
        once this process is gone."""
        now = time.time()
        asked = {k: v for k, v in bounds.capped(redact_tree(params.to_json())).items() if k != claims.WRITER}
        if status is BisectionStatus.RUNNING and self.hold is not None:
            asked[claims.WRITER] = claims.stamp(self.hold, now)
            self.heartbeat.start()
        params = AskedFor.from_json(asked)  # the writer is kept as one of its other keys
        result = bounds.capped(redact_tree(result))
        old = self.bisection(key)
        record = BisectionRecord(old.id if old else 0, key, package, good, bad, params, status, result,
                                 old.created if old else now, now)
        self.write(record)
        return self.put(record)

    def write(self, record: BisectionRecord) -> None:
        folder = self.index.dir / "bisections"
        tmp = folder / f"{record.key}.json.tmp"
        try:  # the file first (the folders are the truth), then the index
            folder.mkdir(exist_ok=True)
            tmp.write_text(json.dumps(record.to_json(), indent=1))
            tmp.rename(folder / f"{record.key}.json")
        except OSError as e:
            tmp.unlink(missing_ok=True)
            if disk.is_full(e):
                raise DiskFull(disk.message(tmp)) from None
            raise

    def put(self, b: BisectionRecord) -> int:
        """The bisection's row, as its file says (its id)."""
        with self.index.tx() as db:
            db.execute(
                "INSERT INTO bisections (key, package, good, bad, params, status, result, created, updated)"
                " VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(key) DO UPDATE SET status=excluded.status,"
                " result=excluded.result, params=excluded.params, updated=excluded.updated",
                (b.key, b.package, b.good, b.bad, json.dumps(b.params.to_json()), b.status.value, json.dumps(b.result),
                 b.created, b.updated))
            (rid,) = db.execute("SELECT id FROM bisections WHERE key=?", (b.key,)).fetchone()
        return int(rid)
