"""The SQLite store: runs, import checks, bisections.  All SQL lives here.

One file, ``<store dir>/dsbisect.sqlite3``, in WAL mode.  A run row is written when the
run starts (status ``running``, with the pid of the dsbisect process) and completed when
it ends, each in its own transaction, so a killed dsbisect loses nothing that finished;
rows left ``running`` by a dead process read back as ``interrupted`` and are run again.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from .model import ImportCheck, Outcome, Point, RunStatus

SCHEMA = [
    # 1
    """
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        case_name TEXT NOT NULL,
        case_key TEXT NOT NULL,
        point_key TEXT NOT NULL,
        point TEXT NOT NULL,
        env_key TEXT,
        attempt INTEGER NOT NULL DEFAULT 1,
        status TEXT NOT NULL,
        outcome TEXT,
        exit_code INTEGER,
        seconds REAL,
        started REAL NOT NULL,
        finished REAL,
        reason TEXT NOT NULL DEFAULT '',
        run_dir TEXT,
        signature TEXT NOT NULL DEFAULT '',
        evidence TEXT NOT NULL DEFAULT '{}',
        facts TEXT NOT NULL DEFAULT '{}',
        pid INTEGER,
        host TEXT
    );
    CREATE INDEX runs_lookup ON runs(case_key, point_key, status);
    CREATE TABLE probes (
        env_key TEXT NOT NULL,
        compat TEXT NOT NULL,
        ok INTEGER NOT NULL,
        reason TEXT NOT NULL,
        facts TEXT NOT NULL,
        created REAL NOT NULL,
        PRIMARY KEY (env_key, compat)
    );
    CREATE TABLE bisections (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        key TEXT UNIQUE NOT NULL,
        package TEXT NOT NULL,
        good TEXT NOT NULL,
        bad TEXT NOT NULL,
        params TEXT NOT NULL,
        status TEXT NOT NULL,
        result TEXT NOT NULL DEFAULT '{}',
        created REAL NOT NULL,
        updated REAL NOT NULL
    );
    """,
    # 2: "probe" means only the search's question now; the table of import checks says so
    """
    ALTER TABLE probes RENAME TO import_checks;
    """,
]


@dataclass(frozen=True)
class RunRecord:
    id: int
    case_name: str
    case_key: str
    point: Point
    point_key: str
    env_key: str | None
    attempt: int
    status: RunStatus
    outcome: Outcome | None
    exit_code: int | None
    seconds: float | None
    started: float
    reason: str
    run_dir: str | None
    signature: str
    evidence: dict
    facts: dict
    host: str | None


@dataclass(frozen=True)
class BisectionRecord:
    id: int
    key: str
    package: str
    good: str
    bad: str
    params: dict
    status: str
    result: dict
    created: float
    updated: float


class Store:
    def __init__(self, directory: Path):
        self.dir = Path(directory).resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "dsbisect.sqlite3"
        # One connection shared by the runner's worker threads, serialised by a lock.
        self.lock = threading.RLock()
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA busy_timeout=30000")
        self._migrate()

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    def _all(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self.lock:
            return self.db.execute(sql, args).fetchall()

    def _migrate(self) -> None:
        (version,) = self.db.execute("PRAGMA user_version").fetchone()
        for i, script in enumerate(SCHEMA[version:], start=version + 1):
            with self._tx() as db:
                for stmt in script.split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                db.execute(f"PRAGMA user_version = {i}")

    # -------------------------------------------------------------------- runs

    def start_run(self, case_name: str, case_key: str, point: Point, env_key: str | None,
                  attempt: int, run_dir: Path | None) -> int:
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO runs (case_name, case_key, point_key, point, env_key, attempt, status,"
                " started, run_dir, pid, host) VALUES (?,?,?,?,?,?,'running',?,?,?,?)",
                (case_name, case_key, point.key, json.dumps(point.to_json()), env_key, attempt,
                 time.time(), str(run_dir) if run_dir else None, os.getpid(), socket.gethostname()),
            )
            return int(cur.lastrowid)

    def finish_run(self, run_id: int, outcome: Outcome, exit_code: int | None, seconds: float,
                   reason: str = "", signature: str = "", evidence: dict | None = None,
                   facts: dict | None = None, env_key: str | None = None, run_dir: Path | None = None) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE runs SET status='done', outcome=?, exit_code=?, seconds=?, finished=?, reason=?,"
                " signature=?, evidence=?, facts=?, env_key=COALESCE(?, env_key), run_dir=COALESCE(?, run_dir)"
                " WHERE id=?",
                (outcome.value, exit_code, seconds, time.time(), reason, signature,
                 json.dumps(evidence or {}), json.dumps(facts or {}), env_key,
                 str(run_dir) if run_dir else None, run_id),
            )

    def abandon_run(self, run_id: int) -> None:
        """A run stopped by Ctrl-C: not an outcome, so it is dropped, not recorded."""
        with self._tx() as db:
            db.execute("UPDATE runs SET status='interrupted', finished=? WHERE id=?", (time.time(), run_id))

    def done_runs(self, case_key: str, point_key: str) -> list[RunRecord]:
        rows = self._all("SELECT * FROM runs WHERE case_key=? AND point_key=? AND status='done' ORDER BY id",
                         (case_key, point_key))
        return [_run(r) for r in rows]

    def run(self, run_id: int) -> RunRecord | None:
        rows = self._all("SELECT * FROM runs WHERE id=?", (run_id,))
        return _run(rows[0]) if rows else None

    def runs(self, case_names: list[str] | None = None, include_unfinished: bool = False) -> list[RunRecord]:
        rows = self._all("SELECT * FROM runs ORDER BY id")
        out = [_run(r) for r in rows]
        if case_names:
            out = [r for r in out if r.case_name in case_names]
        if not include_unfinished:
            out = [r for r in out if r.status is RunStatus.DONE]
        return out

    # ----------------------------------------------------------- import checks

    def import_check(self, env_key: str, key: tuple[str, ...]) -> ImportCheck | None:
        rows = self._all("SELECT * FROM import_checks WHERE env_key=? AND compat=?", (env_key, ",".join(key)))
        return ImportCheck(bool(rows[0]["ok"]), rows[0]["reason"], json.loads(rows[0]["facts"])) if rows else None

    def put_import_check(self, env_key: str, key: tuple[str, ...], check: ImportCheck) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO import_checks (env_key, compat, ok, reason, facts, created)"
                " VALUES (?,?,?,?,?,?)",
                (env_key, ",".join(key), int(check.ok), check.reason, json.dumps(check.facts), time.time()),
            )

    # -------------------------------------------------------------- bisections

    def bisection(self, key: str) -> BisectionRecord | None:
        rows = self._all("SELECT * FROM bisections WHERE key=?", (key,))
        return _bisection(rows[0]) if rows else None

    def save_bisection(self, key: str, package: str, good: str, bad: str, params: dict,
                       status: str, result: dict) -> int:
        now = time.time()
        with self._tx() as db:
            db.execute(
                "INSERT INTO bisections (key, package, good, bad, params, status, result, created, updated)"
                " VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(key) DO UPDATE SET status=excluded.status,"
                " result=excluded.result, params=excluded.params, updated=excluded.updated",
                (key, package, good, bad, json.dumps(params), status, json.dumps(result), now, now),
            )
            (rid,) = db.execute("SELECT id FROM bisections WHERE key=?", (key,)).fetchone()
            return int(rid)


def _run(row: sqlite3.Row) -> RunRecord:
    status = RunStatus(row["status"])
    if status is RunStatus.RUNNING and not _writer_alive(row["pid"], row["host"], row["started"]):
        status = RunStatus.INTERRUPTED
    return RunRecord(
        id=row["id"],
        case_name=row["case_name"],
        case_key=row["case_key"],
        point=Point.from_json(json.loads(row["point"])),
        point_key=row["point_key"],
        env_key=row["env_key"],
        attempt=row["attempt"],
        status=status,
        outcome=Outcome(row["outcome"]) if row["outcome"] else None,
        exit_code=row["exit_code"],
        seconds=row["seconds"],
        started=row["started"],
        reason=row["reason"],
        run_dir=row["run_dir"],
        signature=row["signature"],
        evidence=json.loads(row["evidence"]),
        facts=json.loads(row["facts"]),
        host=row["host"],
    )


def _writer_alive(pid: int | None, host: str | None, started: float) -> bool:
    """Is the dsbisect process that wrote a ``running`` row still at work?"""
    if host != socket.gethostname():
        return True  # another machine's run (a shared store): trust its row
    if pid is None:
        return False
    if pid == os.getpid():
        return True
    try:
        return psutil.Process(pid).create_time() <= started + 1
    except psutil.Error:
        return False


def _bisection(row: sqlite3.Row) -> BisectionRecord:
    return BisectionRecord(
        id=row["id"], key=row["key"], package=row["package"], good=row["good"], bad=row["bad"],
        params=json.loads(row["params"]), status=row["status"], result=json.loads(row["result"]),
        created=row["created"], updated=row["updated"],
    )
