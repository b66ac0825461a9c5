"""The store: run folders, and the SQLite index of them.  All SQL lives here.

``<store>/runs/<id>/`` is the truth: every run gets a folder of its own, created
exclusively (a folder that already exists is never written into), and a finished or
interrupted run leaves its whole record there as ``run.json``.  ``<store>/dsbisect.sqlite3``
(WAL) indexes those records for lookups; a lost, emptied or damaged database is rebuilt
from the folders (automatically when it is missing or empty, ``dsbisect store repair``
when it is damaged), so nothing recorded is lost.  Bisections are kept the same way, in
``<store>/bisections/<key>.json``.

A run row is written when the run starts (status ``running``, with the pid and host of the
dsbisect that runs it) and completed when it ends, each in its own transaction; rows left
``running`` by a dead process (or, on another host, whose heartbeat is older than the lease)
read back as ``interrupted``.  ``claim`` starts a run only if no live process is running the
same point already, so two dsbisects on one store wait for each other instead of running a
point twice (``claims`` judges who is live).

The record comes first: a run's ``run.json`` is written (whole, then renamed into place)
before its row is committed, so a kill between the two leaves a record the index can be
rebuilt from.  Paths inside the store are kept relative to it (``runs/000001``), so a copied
or moved store is a store of its own.  A record that cannot be read is moved to
``<store>/quarantine/`` and named; a bad row in the index is left out of what is read and
named, never a traceback.

The pieces, each a module of this package: ``access`` (the folder, who may use it), ``index``
(the SQLite connection), ``schema`` (tables and migrations), ``values`` (a run's columns and
record file), ``reading`` and ``writing`` (runs), ``bisections``, ``reindex`` (the index from
the folders).  ``Store`` opens a folder and composes them; what callers use is its methods.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path

from dsbisect.core import disk
from dsbisect.core.errors import DiskFull, InputError
from dsbisect.core.model import Outcome, Point
from dsbisect.records.bisections import AskedFor, BisectionRecord, BisectionStatus
from dsbisect.records.run import Evidence, ImportCheck, RunFacts, RunRecord
from dsbisect.store import access, version
from dsbisect.store.access import check_access, check_store_path, read_only_fs, store_dir
from dsbisect.store.bisections import Bisections
from dsbisect.store.claims import StoreLock
from dsbisect.store.index import Index
from dsbisect.store.reading import RunReader
from dsbisect.store.reindex import Reindexer, records
from dsbisect.store.schema import DB, SCHEMA
from dsbisect.store.writing import Claim, Heartbeat, RunWriter

# what callers import from here, whose homes are the modules above
__all__ = ["DB", "SCHEMA", "Claim", "Store", "check_store_path", "store_dir"]


class Store:
    """A store folder, open: read-only (``report``, ``show``) or for writing (holding the
    folder's shared lock: ``lock``, or one of its own)."""

    def __init__(self, directory: Path, readonly: bool = False, lock: StoreLock | None = None):
        self.dir = store_dir(Path(directory)).resolve()
        self.readonly = readonly
        self.path = self.dir / DB
        self.notes: list[str] = []  # what the store did that a user should know (printed by the CLI)
        self._inputs_key: bytes | None = None
        self.hold: StoreLock | None = None
        check_access(self.dir, write=not readonly)
        version.check(self.path, len(SCHEMA))  # a newer dsbisect's store: refused before anything is made
        if not readonly and self.dir.is_dir() and read_only_fs(self.dir):
            raise InputError(f"--store {self.dir}: on a read-only filesystem; this command writes its store: pass "
                             "a --store on a writable disk (report and show read this one as it is)")
        if readonly:
            self._compose(Index.open_readonly(self.dir, self.notes))
        else:
            self._open_writable(lock)

    def _open_writable(self, lock: StoreLock | None) -> None:
        made = not self.dir.exists()
        self.dir.mkdir(parents=True, exist_ok=True)
        access.ignored_by_git(self.dir, made)
        self.hold = lock or access.lock(self.dir)
        try:
            if lock is None:
                access.writer(self.hold, self.dir)  # who holds the store, for a repair to name
            index, fresh = Index.open_writable(self.dir, self.notes)
        except BaseException:
            if lock is None:
                self.hold.release()
            raise
        self._compose(index)
        if fresh and self.records():
            found = self.reindexer.import_records()
            self.notes.append(f"{self.path} was missing or empty: rebuilt from {found} run folder(s)")

    def _compose(self, index: Index) -> None:
        self.index = index
        self.db, self.lock = index.db, index.lock  # one connection shared by the runner's threads
        self.heartbeat = Heartbeat(index, self.hold)
        self.reader = RunReader(index)
        self.writer = RunWriter(index, self.reader, self.heartbeat, self.hold)
        self.bisection_files = Bisections(index, self.hold, self.heartbeat)
        self.reindexer = Reindexer(index, self.bisection_files)

    def close(self) -> None:
        self.heartbeat.stop()
        self.index.close()
        if self.hold is not None:
            self.hold.release()

    # ------------------------------------------------------------- the inputs key

    KEY = "inputs.key"

    def inputs_key(self) -> bytes:
        """The key of the digests of the environment values runs record (``inputs.key``: 32 random
        bytes, made once per store, readable by its group at most): a digest pasted with a
        report cannot be tested against guessed values without it.  A copied store keeps it."""
        if self._inputs_key is None:
            path = self.dir / self.KEY
            if not path.is_file():  # written whole beside it, then linked in: never half a key
                tmp = path.with_name(f"{self.KEY}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
                try:
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
                    with os.fdopen(fd, "wb") as f:
                        f.write(secrets.token_bytes(32))
                    os.link(tmp, path)
                except FileExistsError:  # another dsbisect made it first: theirs is the key
                    pass
                except OSError as e:
                    if disk.is_full(e):
                        raise DiskFull(disk.message(tmp)) from None
                    raise
                finally:
                    tmp.unlink(missing_ok=True)
            self._inputs_key = path.read_bytes()
        return self._inputs_key

    # ------------------------------------------------------------- folders

    @property
    def runs_dir(self) -> Path:
        return self.dir / "runs"

    def records(self) -> list[Path]:
        """Every run record in the run folders."""
        return records(self.dir)

    # -------------------------------------------------------------------- runs

    def claim(self, case_name: str, case_key: str, point: Point, attempt: int) -> Claim:
        return self.writer.claim(case_name, case_key, point, attempt)

    def start_run(self, case_name: str, case_key: str, point: Point, env_key: str | None, attempt: int) -> int:
        return self.writer.start_run(case_name, case_key, point, env_key, attempt)

    def finish_run(self, run_id: int, outcome: Outcome, exit_code: int | None, seconds: float,
                   reason: str = "", signature: str = "", evidence: Evidence | None = None,
                   facts: RunFacts | None = None, env_key: str | None = None,
                   run_dir: Path | None = None) -> RunRecord:
        return self.writer.finish_run(run_id, outcome, exit_code, seconds, reason, signature, evidence, facts,
                                      env_key, run_dir)

    def abandon_run(self, run_id: int, note: str = "") -> RunRecord:
        return self.writer.abandon_run(run_id, note)

    def done_runs(self, case_key: str, point_key: str) -> list[RunRecord]:
        return self.reader.done_runs(case_key, point_key)

    def peak_rss(self, case_name: str, last: int = 50) -> list[int]:
        return self.reader.peak_rss(case_name, last)

    def latest_of_other_case(self, case_name: str, case_key: str, point_key: str) -> RunRecord | None:
        return self.reader.latest_of_other_case(case_name, case_key, point_key)

    def same_skip(self, case_key: str, point_key: str, reason: str, host: str) -> RunRecord | None:
        return self.reader.same_skip(case_key, point_key, reason, host)

    def run(self, run_id: int) -> RunRecord | None:
        return self.reader.run(run_id)

    def runs(self, case_names: list[str] | None = None, include_unfinished: bool = False) -> list[RunRecord]:
        return self.reader.runs(case_names, include_unfinished)

    def name_case(self, name: str, case_key: str) -> None:
        self.reader.name_case(name, case_key)

    def case_names(self) -> dict[str, tuple[str, ...]]:
        return self.reader.case_names()

    def orphans(self) -> list[RunRecord]:
        return self.reader.orphans()

    # ----------------------------------------------------------- import checks

    def import_check(self, env_key: str, key: tuple[str, ...]) -> ImportCheck | None:
        rows = self.index.rows("SELECT * FROM import_checks WHERE env_key=? AND compat=?", (env_key, ",".join(key)))
        if not rows:
            return None
        return ImportCheck(bool(rows[0]["ok"]), rows[0]["reason"], RunFacts.from_json(json.loads(rows[0]["facts"])))

    def put_import_check(self, env_key: str, key: tuple[str, ...], check: ImportCheck) -> None:
        with self.index.tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO import_checks (env_key, compat, ok, reason, facts, created)"
                " VALUES (?,?,?,?,?,?)",
                (env_key, ",".join(key), int(check.ok), check.reason, json.dumps(check.facts.to_json()), time.time()))

    # -------------------------------------------------------------- bisections

    def bisection(self, key: str) -> BisectionRecord | None:
        return self.bisection_files.bisection(key)

    def bisections(self) -> list[BisectionRecord]:
        return self.bisection_files.bisections()

    def save_bisection(self, key: str, package: str, good: str, bad: str, params: AskedFor,
                       status: BisectionStatus, result: dict) -> int:
        return self.bisection_files.save_bisection(key, package, good, bad, params, status, result)

    # ----------------------------------------------------------------- repair

    def reindex(self) -> int:
        return self.reindexer.reindex()
