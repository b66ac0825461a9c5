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
``running`` by a dead process read back as ``interrupted``.  ``claim`` starts a run only if
no live process is running the same point already, so two dsbisects on one store wait for
each other instead of running a point twice.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from .errors import InputError, StoreError
from .model import ImportCheck, Outcome, Point, RunStatus
from .redact import redact, redact_tree
from .rundir import RunDir

DB = "dsbisect.sqlite3"
RECORD_FORMAT = 1

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
    # 3: the store's own folder of each run, which holds its record (run.json); run_dir is
    # where its evidence is (the same, but for a Slurm job's run, kept in the job's folder)
    """
    ALTER TABLE runs ADD COLUMN folder TEXT;
    """,
]
_RUN_COLUMNS = ("id", "case_name", "case_key", "point_key", "point", "env_key", "attempt", "status", "outcome",
                "exit_code", "seconds", "started", "finished", "reason", "run_dir", "signature", "evidence",
                "facts", "pid", "host", "folder")
_JSON_COLUMNS = ("point", "evidence", "facts")


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
    pid: int | None = None
    finished: float | None = None


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


@dataclass(frozen=True)
class Claim:
    """``Store.claim``'s answer: a new run (``run``), or the live run of another process to wait for."""

    run: RunRecord | None = None
    busy: RunRecord | None = None


def store_dir(path: Path) -> Path:
    """The store folder ``--store`` names: a folder, or the ``dsbisect.sqlite3`` file in one."""
    path = Path(path).expanduser()
    if path.name == DB or (path.is_file() and path.suffix in (".sqlite3", ".sqlite", ".db")):
        return path.parent
    return path


def check_store_path(path: Path, writable: bool = True) -> Path:
    """The store folder for ``--store PATH``, or an InputError saying why it cannot be one."""
    folder = store_dir(path)
    for p in (folder, *folder.parents):
        if p.exists() and not p.is_dir():
            raise InputError(f"--store {path}: {p} is a file, not a folder")
        if p.exists():
            break
    if writable:  # called once everything else is checked: the store is made here
        existing = next(p for p in (folder, *folder.parents) if p.exists())
        if not os.access(existing, os.W_OK | os.X_OK):
            raise InputError(f"--store {path}: {existing} is not writable")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"--store {path}: {folder} is not writable ({e.strerror})") from None
    return folder


class Store:
    def __init__(self, directory: Path, readonly: bool = False):
        self.dir = store_dir(Path(directory)).resolve()
        self.readonly = readonly
        self.path = self.dir / DB
        self.notes: list[str] = []  # what the store did that a user should know (printed by the CLI)
        self.lock = threading.RLock()  # one connection shared by the runner's threads
        if readonly:
            self.db = _open_readonly(self.path)
        else:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.db = self._open_writable()

    # ------------------------------------------------------------ opening

    def _open_writable(self) -> sqlite3.Connection:
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        if fresh and self.dir.stat().st_mode & stat.S_ISGID:  # a --shared-group store: SQLite makes 0644 at most
            os.chmod(self.path, 0o660)
        db.row_factory = sqlite3.Row
        self.db = db
        with _store_errors(self.path):
            db.execute("PRAGMA busy_timeout=30000")
            _retry_locked(lambda: db.execute("PRAGMA journal_mode=WAL"))
            fresh = self._migrate() and fresh
        if fresh and self.records():
            found = self._import_records()
            self.notes.append(f"{self.path} was missing or empty: rebuilt from {found} run folder(s)")
        return db

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        if self.readonly:
            raise StoreError(f"{self.dir} was opened read-only")
        with self.lock, _store_errors(self.path):
            _retry_locked(lambda: self.db.execute("BEGIN IMMEDIATE"))
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    def _all(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self.lock, _store_errors(self.path):
            return self.db.execute(sql, args).fetchall()

    def _migrate(self) -> bool:
        """Bring the schema up to date; True when the database had no schema at all."""
        with self._tx() as db:  # IMMEDIATE: a second dsbisect on a fresh store waits here
            (version,) = db.execute("PRAGMA user_version").fetchone()
            for i, script in enumerate(SCHEMA[version:], start=version + 1):
                for stmt in script.split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                db.execute(f"PRAGMA user_version = {i}")
        return version == 0

    # ------------------------------------------------------------- folders

    @property
    def runs_dir(self) -> Path:
        return self.dir / "runs"

    def _new_run_dir(self, run_id: int) -> RunDir:
        """A folder no run has used: ``runs/<id>``, or ``runs/<id>-<random>`` when a stale one
        (from a lost database, or a copied ``runs/``) already has that name."""
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        name = f"{run_id:06d}"
        while True:
            path = self.runs_dir / name
            try:
                path.mkdir()
                return RunDir(path)
            except FileExistsError:
                name = f"{run_id:06d}-{secrets.token_hex(3)}"

    def records(self) -> list[Path]:
        """Every run record in the run folders."""
        return sorted(self.runs_dir.glob(f"*/{RunDir.RECORD}")) if self.runs_dir.is_dir() else []

    # -------------------------------------------------------------------- runs

    def claim(self, case_name: str, case_key: str, point: Point, attempt: int) -> Claim:
        """Start a run of ``point`` (a row ``running`` and its own folder), unless another live
        dsbisect is running that point of that case right now: then return its run."""
        with self._tx() as db:
            rows = db.execute("SELECT * FROM runs WHERE case_key=? AND point_key=? AND status='running'",
                              (case_key, point.key)).fetchall()
            for row in rows:
                if row["pid"] != os.getpid() and _writer_alive(row["pid"], row["host"], row["started"]):
                    return Claim(busy=_run(row))
            run_id = self._insert(db, case_name, case_key, point, attempt)
        return Claim(run=self.run(run_id))

    def start_run(self, case_name: str, case_key: str, point: Point, env_key: str | None,
                  attempt: int) -> int:
        """A run that starts now, with a folder of its own (``claim`` without the wait)."""
        with self._tx() as db:
            return self._insert(db, case_name, case_key, point, attempt, env_key)

    def _insert(self, db, case_name: str, case_key: str, point: Point, attempt: int,
                env_key: str | None = None) -> int:
        cur = db.execute(
            "INSERT INTO runs (case_name, case_key, point_key, point, env_key, attempt, status, started, pid, host)"
            " VALUES (?,?,?,?,?,?,'running',?,?,?)",
            (case_name, case_key, point.key, json.dumps(point.to_json()), env_key, attempt, time.time(),
             os.getpid(), socket.gethostname()))
        run_id = int(cur.lastrowid)
        folder = self._new_run_dir(run_id).path
        db.execute("UPDATE runs SET run_dir=?, folder=? WHERE id=?", (str(folder), str(folder), run_id))
        return run_id

    def finish_run(self, run_id: int, outcome: Outcome, exit_code: int | None, seconds: float,
                   reason: str = "", signature: str = "", evidence: dict | None = None,
                   facts: dict | None = None, env_key: str | None = None,
                   run_dir: Path | None = None) -> RunRecord:
        """Record the run's end; ``run_dir`` when its evidence lives elsewhere (a Slurm job's folder)."""
        with self._tx() as db:
            db.execute(
                "UPDATE runs SET status='done', outcome=?, exit_code=?, seconds=?, finished=?, reason=?,"
                " signature=?, evidence=?, facts=?, env_key=COALESCE(?, env_key), run_dir=COALESCE(?, run_dir)"
                " WHERE id=?",
                (outcome.value, exit_code, seconds, time.time(), redact(reason), redact(signature),
                 json.dumps(redact_tree(evidence or {})), json.dumps(redact_tree(facts or {})), env_key,
                 str(run_dir) if run_dir else None, run_id))
        return self._write_record(run_id)

    def abandon_run(self, run_id: int, note: str = "") -> RunRecord:
        """A run stopped by a signal: not an outcome, so it is kept as interrupted, never reused."""
        with self._tx() as db:
            db.execute("UPDATE runs SET status='interrupted', finished=?, reason=? WHERE id=?",
                       (time.time(), note, run_id))
        return self._write_record(run_id)

    def _write_record(self, run_id: int) -> RunRecord:
        """The run's row as ``run.json`` in its folder (written whole, then renamed into place)."""
        (row,) = self._all("SELECT * FROM runs WHERE id=?", (run_id,))
        data = {"format": RECORD_FORMAT} | {c: row[c] for c in _RUN_COLUMNS}
        for c in _JSON_COLUMNS:
            data[c] = json.loads(row[c])
        if row["folder"]:
            target = Path(row["folder"]) / RunDir.RECORD
            tmp = target.with_name(target.name + ".tmp")
            tmp.write_text(json.dumps(data, indent=1))
            tmp.rename(target)
        return _run(row)

    def done_runs(self, case_key: str, point_key: str) -> list[RunRecord]:
        rows = self._all("SELECT * FROM runs WHERE case_key=? AND point_key=? AND status='done' ORDER BY id",
                         (case_key, point_key))
        return [_run(r) for r in rows]

    def peak_rss(self, case_name: str, last: int = 50) -> list[int]:
        """The peak memory (bytes) of the case's last runs that recorded one (evidence.peak_rss)."""
        rows = self._all("SELECT evidence FROM runs WHERE case_name=? AND status='done' ORDER BY id DESC LIMIT ?",
                         (case_name, last))
        out = []
        for row in rows:
            try:
                value = json.loads(row["evidence"]).get("peak_rss")
            except (ValueError, AttributeError):
                continue
            if isinstance(value, int) and value > 0:
                out.append(value)
        return out

    def same_skip(self, case_key: str, point_key: str, reason: str, host: str) -> RunRecord | None:
        """The last run of this point if it was skipped on this host for this very reason."""
        rows = self._all("SELECT * FROM runs WHERE case_key=? AND point_key=? AND status='done' ORDER BY id DESC"
                         " LIMIT 1", (case_key, point_key))
        last = _run(rows[0]) if rows else None
        if last and last.outcome is Outcome.SKIP and last.reason == reason and \
                (last.facts.get("host") or {}).get("name") == host:
            return last
        return None

    def run(self, run_id: int) -> RunRecord | None:
        rows = self._all("SELECT * FROM runs WHERE id=?", (run_id,))
        return _run(rows[0]) if rows else None

    def runs(self, case_names: list[str] | None = None, include_unfinished: bool = False) -> list[RunRecord]:
        out = [_run(r) for r in self._all("SELECT * FROM runs ORDER BY id")]
        if case_names:
            out = [r for r in out if r.case_name in case_names]
        if not include_unfinished:
            out = [r for r in out if r.status is RunStatus.DONE]
        return out

    def orphans(self) -> list[RunRecord]:
        """Runs of this host left ``running`` by a dsbisect that is gone (killed, or its machine rebooted)."""
        return [r for r in self.runs(include_unfinished=True)
                if r.status is RunStatus.INTERRUPTED and r.finished is None and r.host == socket.gethostname()]

    # ----------------------------------------------------------- import checks

    def import_check(self, env_key: str, key: tuple[str, ...]) -> ImportCheck | None:
        rows = self._all("SELECT * FROM import_checks WHERE env_key=? AND compat=?", (env_key, ",".join(key)))
        return ImportCheck(bool(rows[0]["ok"]), rows[0]["reason"], json.loads(rows[0]["facts"])) if rows else None

    def put_import_check(self, env_key: str, key: tuple[str, ...], check: ImportCheck) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO import_checks (env_key, compat, ok, reason, facts, created)"
                " VALUES (?,?,?,?,?,?)",
                (env_key, ",".join(key), int(check.ok), check.reason, json.dumps(check.facts), time.time()))

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
                (key, package, good, bad, json.dumps(params), status, json.dumps(result), now, now))
            (rid,) = db.execute("SELECT id FROM bisections WHERE key=?", (key,)).fetchone()
        folder = self.dir / "bisections"
        folder.mkdir(exist_ok=True)
        record = self.bisection(key)
        tmp = folder / f"{key}.json.tmp"
        tmp.write_text(json.dumps(record.__dict__, indent=1))
        tmp.rename(folder / f"{key}.json")
        return int(rid)

    # ----------------------------------------------------------------- repair

    def _import_records(self) -> int:
        """Index every run record and bisection file of the folders; the number of runs."""
        count = 0
        for path in self.records():
            try:
                data = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                self.notes.append(f"{path}: not readable; left out")
                continue
            values = {c: data.get(c) for c in _RUN_COLUMNS}
            for c in _JSON_COLUMNS:
                values[c] = json.dumps(values[c] if values[c] is not None else {})
            values["folder"] = str(path.parent)
            elsewhere = data.get("run_dir") and data.get("run_dir") != data.get("folder")
            if not (elsewhere and Path(data["run_dir"]).is_dir()):  # the store may have moved
                values["run_dir"] = str(path.parent)
            sql = f"INSERT INTO runs ({', '.join(_RUN_COLUMNS)}) VALUES ({', '.join('?' for _ in _RUN_COLUMNS)})"
            with self._tx() as db:
                try:
                    db.execute(sql, tuple(values[c] for c in _RUN_COLUMNS))
                except sqlite3.IntegrityError:  # two folders claim one id (a copied runs/): a new id
                    db.execute(sql, tuple(None if c == "id" else values[c] for c in _RUN_COLUMNS))
            count += 1
        for path in sorted((self.dir / "bisections").glob("*.json")):
            try:
                b = json.loads(path.read_text())
                self.save_bisection(b["key"], b["package"], b["good"], b["bad"], b["params"], b["status"], b["result"])
            except (OSError, json.JSONDecodeError, KeyError):
                self.notes.append(f"{path}: not readable; left out")
        return count


def repair(directory: Path) -> tuple[Store, Path | None]:
    """Move a damaged database aside and rebuild it from the run folders.  Returns the new
    store and where the old database went (None if there was none)."""
    folder = store_dir(Path(directory)).resolve()
    db = folder / DB
    if not folder.is_dir():
        raise InputError(f"no dsbisect store in {folder}")
    moved = None
    if db.exists():
        moved = db.with_name(f"{DB}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        db.rename(moved)
        for side in ("-wal", "-shm"):
            extra = db.with_name(DB + side)
            if extra.exists():
                extra.rename(moved.with_name(moved.name + side))
    store = Store(folder)
    if not any("rebuilt from" in n for n in store.notes):
        store.notes.append(f"{db}: rebuilt from 0 run folders (none holds a run record)")
    return store, moved


def _open_readonly(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise InputError(f"no dsbisect store in {path.parent} (run 'dsbisect run' first, or pass --store)")
    last: sqlite3.Error | None = None
    for query in ("mode=ro", "mode=ro&immutable=1"):  # immutable: a folder we may not even write -shm into
        try:
            db = sqlite3.connect(f"{path.resolve().as_uri()}?{query}", uri=True, check_same_thread=False)
            db.row_factory = sqlite3.Row
            db.execute("SELECT count(*) FROM runs").fetchone()
            return db
        except sqlite3.DatabaseError as e:
            last = e
    raise _damaged(path, last)


@contextmanager
def _store_errors(path: Path) -> Iterator[None]:
    """SQLite's errors about the file itself as one StoreError line, with what to do."""
    try:
        yield
    except sqlite3.OperationalError as e:
        if "readonly" in str(e) or "unable to open" in str(e):
            raise StoreError(f"{path}: cannot write ({e}); pass a writable --store") from None
        if "locked" in str(e) or "busy" in str(e):
            raise StoreError(f"{path}: still locked by another process after 30 s ({e})") from None
        raise _damaged(path, e) from None
    except sqlite3.DatabaseError as e:
        raise _damaged(path, e) from None


def _damaged(path: Path, e: BaseException | None) -> StoreError:
    folders = len(list(path.parent.glob(f"runs/*/{RunDir.RECORD}")))
    return StoreError(f"{path} is damaged ({e}); 'dsbisect store repair --store {path.parent}' rebuilds it "
                      f"from its {folders} run record(s)")


def _retry_locked(step: Callable[[], object], seconds: float = 30.0) -> None:
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


def _run(row: sqlite3.Row) -> RunRecord:
    status = RunStatus(row["status"])
    if status is RunStatus.RUNNING and not _writer_alive(row["pid"], row["host"], row["started"]):
        status = RunStatus.INTERRUPTED
    return RunRecord(
        id=row["id"], case_name=row["case_name"], case_key=row["case_key"],
        point=Point.from_json(json.loads(row["point"])), point_key=row["point_key"], env_key=row["env_key"],
        attempt=row["attempt"], status=status, outcome=Outcome(row["outcome"]) if row["outcome"] else None,
        exit_code=row["exit_code"], seconds=row["seconds"], started=row["started"], reason=row["reason"],
        run_dir=row["run_dir"], signature=row["signature"], evidence=json.loads(row["evidence"]),
        facts=json.loads(row["facts"]), host=row["host"], pid=row["pid"], finished=row["finished"],
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
