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
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import pwd
import secrets
import socket
import sqlite3
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from dsbisect.store import bounds, claims, version
from dsbisect.core import disk
from dsbisect.store.claims import Liveness, StoreLock
from dsbisect.core.errors import DiskFull, DsbisectError, InputError, StoreError
from dsbisect.core.model import Outcome, Point, RunStatus, digest
from dsbisect.core.redact import mask_text, redact, redact_tree
from dsbisect.records import migrate
from dsbisect.records.bisections import AskedFor, BisectionRecord, BisectionStatus
from dsbisect.records.run import Evidence, ImportCheck, RunFacts, RunRecord
from dsbisect.core.rundir import RunDir

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
    # 4: the lease of a running row (its writer's token and heartbeat); paths made relative to
    # the store by _relative_paths, run once with it
    """
    ALTER TABLE runs ADD COLUMN heartbeat REAL;
    ALTER TABLE runs ADD COLUMN writer TEXT;
    """,
]
RELATIVE_PATHS = 4  # the migration after which folder and run_dir are relative to the store
_RUN_COLUMNS = ("id", "case_name", "case_key", "point_key", "point", "env_key", "attempt", "status", "outcome",
                "exit_code", "seconds", "started", "finished", "reason", "run_dir", "signature", "evidence",
                "facts", "pid", "host", "folder", "heartbeat", "writer")
_JSON_COLUMNS = ("point", "evidence", "facts")


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


def _ignored_by_git(folder: Path, made: bool) -> None:
    """A ``*`` ``.gitignore`` in the store folder (as in the env root): a store made inside a
    clone (``.dsbisect/`` of a subfolder the job ran from) never shows in ``git status``.  Only in
    a folder dsbisect made or named ``.dsbisect``: never in a folder of the user's (``--store .``)."""
    ignore = folder / ".gitignore"
    if (made or folder.name == ".dsbisect") and not ignore.exists():
        try:
            ignore.write_text("*\n")
        except OSError as e:  # a full disk is said where the store writes next; the rest is the user's
            if not disk.is_full(e):
                raise


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
            why = " (a read-only filesystem)" if read_only_fs(existing) else f"; permission denied: {_who(existing)}"
            raise InputError(f"--store {path}: {existing} is not writable{why}")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"--store {path}: {folder} is not writable ({e.strerror})") from None
    return folder


class Store:
    def __init__(self, directory: Path, readonly: bool = False, lock: StoreLock | None = None):
        self.dir = store_dir(Path(directory)).resolve()
        self.readonly = readonly
        self.path = self.dir / DB
        self.notes: list[str] = []  # what the store did that a user should know (printed by the CLI)
        self._too_big: set[int] = set()  # rows left out of what was read: a value over the size limit
        self.lock = threading.RLock()  # one connection shared by the runner's threads
        self._inputs_key: bytes | None = None
        self.hold: StoreLock | None = None
        self._beating: threading.Event | None = None
        check_access(self.dir, write=not readonly)
        version.check(self.path, len(SCHEMA))  # a newer dsbisect's store: refused before anything is made
        if not readonly and self.dir.is_dir() and read_only_fs(self.dir):
            raise InputError(f"--store {self.dir}: on a read-only filesystem; this command writes its store: pass "
                             "a --store on a writable disk (report and show read this one as it is)")
        if readonly:
            self.db = _open_readonly(self.path)
        else:
            made = not self.dir.exists()
            self.dir.mkdir(parents=True, exist_ok=True)
            _ignored_by_git(self.dir, made)
            self.hold = lock or _lock(self.dir)
            try:
                if lock is None:
                    self._writer()  # who holds the store, for a repair to name
                self.db = self._open_writable()
            except BaseException:
                if lock is None:
                    self.hold.release()
                raise

    # ------------------------------------------------------------ opening

    def _open_writable(self) -> sqlite3.Connection:
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        with _store_errors(self.path):
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        if fresh and self.dir.stat().st_mode & stat.S_ISGID:  # a --shared-group store: SQLite makes 0644 at most
            os.chmod(self.path, 0o660)
        db.row_factory = sqlite3.Row
        bounds.limit(db)
        self.db = db
        with _store_errors(self.path):
            db.execute("PRAGMA busy_timeout=30000")
            db.execute("PRAGMA secure_delete=ON")  # a value masked since (a pin's credentials) leaves no copy
            _retry_locked(lambda: db.execute("PRAGMA journal_mode=WAL"))
            fresh = self._migrate() and fresh
        if fresh and self.records():
            found = self._import_records()
            self.notes.append(f"{self.path} was missing or empty: rebuilt from {found} run folder(s)")
        return db

    def close(self) -> None:
        if self._beating is not None:
            self._beating.set()
        self.db.close()
        if self.hold is not None:
            self.hold.release()

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
        """The rows of a one-table SELECT; a row with a value over the size limit is left out
        and named (``notes``), never loaded."""
        with self.lock, _store_errors(self.path):
            rows, big = bounded_rows(self.db, sql, args)
        for rowid in big:
            self._too_big.add(rowid)
            note = (f"entry {rowid} of {sql.split()[sql.split().index('FROM') + 1]} in {self.path} is too large to "
                    f"read (a value over {bounds.SQL_LIMIT >> 20} MB); left out ('dsbisect store repair --store "
                    f"{self.dir}' rebuilds the index from the run folders)")
            if note not in self.notes:
                self.notes.append(note)
        return rows

    def _migrate(self) -> bool:
        """Bring the schema up to date; True when the database had no schema at all."""
        with self._tx() as db:  # IMMEDIATE: a second dsbisect on a fresh store waits here
            (at,) = db.execute("PRAGMA user_version").fetchone()
            if at > len(SCHEMA):  # a newer dsbisect's, committed since the header was read
                raise version.newer(self.path, at, len(SCHEMA))
            for i, script in enumerate(SCHEMA[at:], start=at + 1):
                for stmt in script.split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                if i == RELATIVE_PATHS:
                    _relative_paths(db)
                db.execute(f"PRAGMA user_version = {i}")
        return at == 0

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

    def _new_run_dir(self, run_id: int) -> RunDir:
        """A folder no run has used: ``runs/<id>``, or ``runs/<id>-<random>`` when a stale one
        (from a lost database, or a copied ``runs/``) already has that name."""
        with _full_as_one_line(self.runs_dir):
            self.runs_dir.mkdir(parents=True, exist_ok=True)
        name = f"{run_id:06d}"
        while True:
            path = self.runs_dir / name
            try:
                with _full_as_one_line(path):
                    path.mkdir()
                return RunDir(path)
            except FileExistsError:
                name = f"{run_id:06d}-{secrets.token_hex(3)}"

    def records(self) -> list[Path]:
        """Every run record in the run folders."""
        return sorted(self.runs_dir.glob(f"*/{RunDir.RECORD}")) if self.runs_dir.is_dir() else []

    def _abs(self, path: str | None) -> Path | None:
        """A path of the index (relative to the store, or absolute when outside it) as a path here."""
        return None if not path else Path(path) if Path(path).is_absolute() else self.dir / path

    def _rel(self, path: Path) -> str:
        path = Path(path).resolve()
        return path.relative_to(self.dir).as_posix() if path.is_relative_to(self.dir) else str(path)

    # -------------------------------------------------------------------- runs

    def claim(self, case_name: str, case_key: str, point: Point, attempt: int) -> Claim:
        """Start a run of ``point`` (a row ``running`` and its own folder), unless another live
        dsbisect is running that point of that case right now: then return its run."""
        with self._tx() as db:
            rows = db.execute("SELECT * FROM runs WHERE case_key=? AND point_key=? AND status='running'",
                              (case_key, point.key)).fetchall()
            for row in rows:
                if row["pid"] != os.getpid() and self._liveness(dict(row)) is Liveness.ALIVE:
                    busy = self._try_record(row)
                    if busy is not None:
                        return Claim(busy=busy)
            run_id = self._insert(db, case_name, case_key, point, attempt)
        # this process runs the point it was given (the store keeps its pins' credentials masked)
        return Claim(run=dataclasses.replace(self.run(run_id), point=point))

    def start_run(self, case_name: str, case_key: str, point: Point, env_key: str | None,
                  attempt: int) -> int:
        """A run that starts now, with a folder of its own (``claim`` without the wait)."""
        with self._tx() as db:
            return self._insert(db, case_name, case_key, point, attempt, env_key)

    def _insert(self, db, case_name: str, case_key: str, point: Point, attempt: int,
                env_key: str | None = None) -> int:
        now = time.time()
        cur = db.execute(
            "INSERT INTO runs (case_name, case_key, point_key, point, env_key, attempt, status, started, pid, host,"
            " heartbeat, writer) VALUES (?,?,?,?,?,?,'running',?,?,?,?,?)",
            (case_name, case_key, point.key, json.dumps(_kept_point(point.to_json())), env_key, attempt, now,
             os.getpid(), socket.gethostname(), now, self._writer()))
        run_id = int(cur.lastrowid)
        folder = self._rel(self._new_run_dir(run_id).path)
        db.execute("UPDATE runs SET run_dir=?, folder=? WHERE id=?", (folder, folder, run_id))
        self._start_heartbeat()
        return run_id

    def _writer(self) -> str | None:
        if self.hold is None:
            return None
        with _full_as_one_line(self.dir / claims.WRITERS):
            return self.hold.writer()

    def finish_run(self, run_id: int, outcome: Outcome, exit_code: int | None, seconds: float,
                   reason: str = "", signature: str = "", evidence: Evidence | None = None,
                   facts: RunFacts | None = None, env_key: str | None = None,
                   run_dir: Path | None = None) -> RunRecord:
        """Record the run's end; ``run_dir`` when its evidence lives elsewhere (a Slurm job's folder)."""
        with self.lock:
            values = self._values(run_id)
            values |= {"status": "done", "outcome": outcome.value, "exit_code": exit_code, "seconds": seconds,
                       "finished": time.time(), "reason": redact(reason), "signature": redact(signature),
                       "evidence": redact_tree((evidence or Evidence()).to_json()),
                       "facts": redact_tree((facts or RunFacts()).to_json())}
            if env_key is not None:
                values["env_key"] = env_key
            if run_dir is not None:
                values["run_dir"] = self._rel(run_dir)
            return self._commit(values)

    def abandon_run(self, run_id: int, note: str = "") -> RunRecord:
        """A run stopped by a signal: not an outcome, so it is kept as interrupted, never reused.
        A run whose record says it finished (its dsbisect died before the index was updated)
        is indexed as its record says instead."""
        with self.lock:
            values = self._values(run_id)
            on_disk = self._record_file(values)
            if on_disk is not None and on_disk.get("status") == "done" and on_disk.get("id") == run_id:
                self.notes.append(f"run {run_id} had finished; its index entry is taken from its {RunDir.RECORD}")
                return self._commit(values | {c: on_disk[c] for c in _RUN_COLUMNS if c in on_disk
                                              and c not in ("folder", "run_dir")})
            return self._commit(values | {"status": "interrupted", "finished": time.time(), "reason": note})

    def _values(self, run_id: int) -> dict:
        (row,) = self._all("SELECT * FROM runs WHERE id=?", (run_id,))
        values = dict(row)
        for c in _JSON_COLUMNS:
            values[c] = json.loads(values[c])
        return values

    def _commit(self, values: dict) -> RunRecord:
        """The record first (the folders are the truth), then the index; both capped in size and
        with no secret a pattern can find (a pin's URL credentials too)."""
        values = _kept(values)
        self._write_record(values)
        sets = [c for c in _RUN_COLUMNS if c != "id"]
        with self._tx() as db:
            db.execute(f"UPDATE runs SET {', '.join(f'{c}=?' for c in sets)} WHERE id=?",
                       (*(_db_value(c, values[c]) for c in sets), values["id"]))
        return self._record(values)

    def _record_file(self, values: dict) -> dict | None:
        folder = self._abs(values.get("folder"))
        try:
            data = bounds.read_json(folder / RunDir.RECORD) if folder else None
        except (OSError, ValueError):
            return None
        if version.newer_record(data, RECORD_FORMAT) is not None:
            return None
        return data if isinstance(data, dict) and record_problem(data) is None else None

    def _write_record(self, values: dict) -> None:
        write_record(self.dir, values)

    def _start_heartbeat(self) -> None:
        """Refresh this writer's running rows every HEARTBEAT_S while the store is open."""
        if self._beating is not None or self.hold is None:
            return
        self._beating = stop = threading.Event()
        ref = weakref.ref(self)

        def beat() -> None:
            while not stop.wait(claims.HEARTBEAT_S):
                store = ref()
                if store is None:
                    return
                claims.touch(store.dir, store.hold.token)  # a running bisection's sign of life
                try:
                    with store._tx() as db:
                        db.execute("UPDATE runs SET heartbeat=? WHERE status='running' AND writer=?",
                                   (time.time(), store.hold.token))
                except (StoreError, DiskFull, sqlite3.Error):
                    pass  # the next beat tries again; the run itself reports what is wrong
                del store

        threading.Thread(target=beat, name="dsbisect-heartbeat", daemon=True).start()

    def done_runs(self, case_key: str, point_key: str) -> list[RunRecord]:
        rows = self._all("SELECT * FROM runs WHERE case_key=? AND point_key=? AND status='done' ORDER BY id",
                         (case_key, point_key))
        return self._records(rows)

    def peak_rss(self, case_name: str, last: int = 50) -> list[int]:
        """The peak memory (bytes) of the case's last runs that recorded one (evidence.peak_rss)."""
        rows = self._all("SELECT evidence FROM runs WHERE case_name=? AND status='done' ORDER BY id DESC LIMIT ?",
                         (case_name, last))
        out = []
        for row in rows:
            try:
                value = Evidence.from_json(json.loads(row["evidence"])).peak_rss
            except ValueError:
                continue
            if value is not None and value > 0:
                out.append(value)
        return out

    def latest_of_other_case(self, case_name: str, case_key: str, point_key: str) -> RunRecord | None:
        """The latest finished non-skip run of this point under the same case name and another
        case key (the case's script or settings changed since)."""
        rows = self._all("SELECT * FROM runs WHERE case_name=? AND point_key=? AND case_key<>? AND status='done'"
                         " AND outcome<>'skip' ORDER BY id DESC LIMIT 1", (case_name, point_key, case_key))
        found = self._records(rows)
        return found[0] if found else None

    def same_skip(self, case_key: str, point_key: str, reason: str, host: str) -> RunRecord | None:
        """The last run of this point if it was skipped on this host for this very reason."""
        rows = self._all("SELECT * FROM runs WHERE case_key=? AND point_key=? AND status='done' ORDER BY id DESC"
                         " LIMIT 1", (case_key, point_key))
        last = self._try_record(rows[0]) if rows else None
        if last and last.outcome is Outcome.SKIP and last.reason == reason and \
                last.facts.host_name == host:
            return last
        return None

    def run(self, run_id: int) -> RunRecord | None:
        rows = self._all("SELECT * FROM runs WHERE id=?", (run_id,)) if -2**63 <= run_id < 2**63 else []
        if not rows and run_id in self._too_big:
            raise StoreError(f"run {run_id}'s entry in {self.path} is too large to read; 'dsbisect store repair "
                             f"--store {self.dir}' rebuilds the index from the run folders")
        if not rows:
            return None
        values, problem = row_values(rows[0])
        if problem:
            raise StoreError(f"run {run_id}'s entry in {self.path} is not readable ({problem}); "
                             f"'dsbisect store repair --store {self.dir}' rebuilds the index from the run folders")
        return self._record(values)

    def runs(self, case_names: list[str] | None = None, include_unfinished: bool = False) -> list[RunRecord]:
        """The runs (of these case names: recorded under one, or under another name of the same
        case key, see ``name_case``), oldest first."""
        out = self._records(self._all("SELECT * FROM runs ORDER BY id"))
        if case_names:
            keys = {k for k, names in self.case_names().items() if set(names) & set(case_names)}
            out = [r for r in out if r.case_name in case_names or r.case_key in keys]
        if not include_unfinished:
            out = [r for r in out if r.status is RunStatus.DONE]
        return out

    def name_case(self, name: str, case_key: str) -> None:
        """Remember that a case of this name has this key: two cases of one script and settings
        (one key) share their runs, recorded under the name of the first that ran, and reports
        find them under either name.  A file in ``names/`` (the folders are the truth: a repair
        keeps it); a name that cannot be written is only not remembered."""
        folder = self.dir / "names"
        path = folder / f"{case_key}.{digest(name)}.json"
        if path.exists():
            return
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        try:
            folder.mkdir(exist_ok=True)
            tmp.write_text(json.dumps({"case_key": case_key, "name": name}))
            tmp.rename(path)
        except OSError:
            tmp.unlink(missing_ok=True)

    def case_names(self) -> dict[str, tuple[str, ...]]:
        """Each case key's names, as ``name_case`` remembered them (an unreadable file is left out)."""
        out: dict[str, list[str]] = {}
        folder = self.dir / "names"
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and isinstance(data.get("case_key"), str) and isinstance(data.get("name"), str):
                out.setdefault(data["case_key"], []).append(data["name"])
        return {k: tuple(dict.fromkeys(v)) for k, v in out.items()}

    def orphans(self) -> list[RunRecord]:
        """Runs left ``running`` by a dsbisect that is gone: of this host (killed, or its machine
        rebooted, or the row came with a copy of the store), or of another host whose lease
        expired."""
        return [r for r in self.runs(include_unfinished=True)
                if r.status is RunStatus.INTERRUPTED and r.finished is None]

    # ------------------------------------------------------------ reading rows

    def _records(self, rows: list[sqlite3.Row]) -> list[RunRecord]:
        return [r for r in (self._try_record(row) for row in rows) if r is not None]

    def _try_record(self, row: sqlite3.Row) -> RunRecord | None:
        """The row as a record, or None (and a note) when it holds values no run has."""
        values, problem = row_values(row)
        if problem:
            note = (f"run {row['id']}: its entry in {self.path} is not readable ({problem}); left out "
                    f"('dsbisect store repair --store {self.dir}' rebuilds the index from the run folders)")
            if note not in self.notes:
                self.notes.append(note)
            return None
        return self._record(values)

    def _liveness(self, v: dict) -> Liveness:
        return claims.judge(v.get("host"), socket.gethostname(), v.get("heartbeat") or v.get("started"),
                            time.time(), _pid_alive(v.get("pid"), v.get("started") or 0.0),
                            claims.writer_held(self.dir, v.get("writer")))

    def _record(self, v: dict) -> RunRecord:
        status, abandoned = RunStatus(v["status"]), ""
        if status is RunStatus.RUNNING:
            state = self._liveness(v)
            if state is Liveness.EXPIRED:
                age = time.time() - (v.get("heartbeat") or v["started"])
                abandoned = (f"its host {v['host']} sent no heartbeat for {age:.0f} s (the lease is "
                             f"{claims.LEASE_S:.0f} s): treated as abandoned")
            elif state is Liveness.DEAD:
                abandoned = f"the dsbisect that ran it (pid {v['pid']}) died"
            status = RunStatus.INTERRUPTED if abandoned else status
        return migrate.lifted(RunRecord(
            id=v["id"], case_name=v["case_name"], case_key=v["case_key"], point=Point.from_json(v["point"]),
            point_key=v["point_key"], env_key=v["env_key"], attempt=v["attempt"], status=status,
            outcome=Outcome(v["outcome"]) if v["outcome"] else None, exit_code=v["exit_code"],
            seconds=v["seconds"], started=v["started"], reason=v["reason"],
            run_dir=str(self._abs(v["run_dir"])) if v["run_dir"] else None, signature=v["signature"],
            evidence=Evidence.from_json(v["evidence"]), facts=RunFacts.from_json(v["facts"]), host=v["host"],
            pid=v["pid"], finished=v["finished"],
            heartbeat=v.get("heartbeat"), abandoned=abandoned,
        ))

    # ----------------------------------------------------------- import checks

    def import_check(self, env_key: str, key: tuple[str, ...]) -> ImportCheck | None:
        rows = self._all("SELECT * FROM import_checks WHERE env_key=? AND compat=?", (env_key, ",".join(key)))
        if not rows:
            return None
        return ImportCheck(bool(rows[0]["ok"]), rows[0]["reason"], RunFacts.from_json(json.loads(rows[0]["facts"])))

    def put_import_check(self, env_key: str, key: tuple[str, ...], check: ImportCheck) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO import_checks (env_key, compat, ok, reason, facts, created)"
                " VALUES (?,?,?,?,?,?)",
                (env_key, ",".join(key), int(check.ok), check.reason, json.dumps(check.facts.to_json()), time.time()))

    # -------------------------------------------------------------- bisections

    def bisection(self, key: str) -> BisectionRecord | None:
        rows = self._all("SELECT * FROM bisections WHERE key=?", (key,))
        return self._judged(_bisection(rows[0])) if rows else None

    def _judged(self, b: BisectionRecord) -> BisectionRecord:
        """A running bisection whose dsbisect is gone, read back as interrupted (``claims.judged``)."""
        return claims.judged(b, self.dir, socket.gethostname(), time.time(), _pid_alive)

    def bisections(self) -> list[BisectionRecord]:
        """Every bisection of the store, oldest first (by last update); a row that cannot be
        read is left out and named in ``notes``."""
        out = []
        for row in self._all("SELECT * FROM bisections ORDER BY updated, id"):
            try:
                out.append(self._judged(_bisection(row)))
            except (ValueError, TypeError, KeyError) as e:
                note = f"bisection {row['key']}: its entry in {self.path} is not readable ({type(e).__name__}); left out"
                if note not in self.notes:
                    self.notes.append(note)
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
            self._start_heartbeat()
        params = AskedFor.from_json(asked)  # the writer is kept as one of its other keys
        result = bounds.capped(redact_tree(result))
        old = self.bisection(key)
        record = BisectionRecord(old.id if old else 0, key, package, good, bad, params, status, result,
                                 old.created if old else now, now)
        self._write_bisection(record)
        return self._put_bisection(record)

    def _write_bisection(self, record: BisectionRecord) -> None:
        folder = self.dir / "bisections"
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

    def _put_bisection(self, b: BisectionRecord) -> int:
        """The bisection's row, as its file says (its id)."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO bisections (key, package, good, bad, params, status, result, created, updated)"
                " VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(key) DO UPDATE SET status=excluded.status,"
                " result=excluded.result, params=excluded.params, updated=excluded.updated",
                (b.key, b.package, b.good, b.bad, json.dumps(b.params.to_json()), b.status.value, json.dumps(b.result),
                 b.created, b.updated))
            (rid,) = db.execute("SELECT id FROM bisections WHERE key=?", (b.key,)).fetchone()
        return int(rid)

    # ----------------------------------------------------------------- repair

    def _import_records(self, replace: bool = False) -> int:
        """Index every run record and bisection file of the folders (``replace``: instead of
        the runs the index holds, in one transaction); the number of runs.  A record that cannot
        be read as one is moved to ``quarantine/`` and named; one of a newer dsbisect is left
        where it is, and named."""
        count = 0
        with self._tx() as db:  # one record at a time: memory is one record's, whatever the store's size
            unreadable = self._unreadable_rows(db) if replace else {}
            if replace:  # but the rows a record may not stand for: kept until one does
                db.execute(f"DELETE FROM runs WHERE id NOT IN ({', '.join('?' * len(unreadable))})",
                           tuple(unreadable.values()))
            for path in self.records():
                data = self._readable(path)
                if data is None:
                    continue
                stale = unreadable.pop(self._rel(path.parent), None)
                if stale is not None:
                    db.execute("DELETE FROM runs WHERE id=?", (stale,))
                self._index(db, data, path.parent)
                count += 1
        for folder, run_id in unreadable.items():
            self.notes.append(f"run {run_id}: its entry in the index is not readable and no run folder holds its "
                              f"record ({folder}): kept in the index as it is")
        for path in sorted((self.dir / "bisections").glob("*.json")):
            try:
                self._put_bisection(BisectionRecord.from_json(bounds.read_json(path)))
            except OSError as e:
                self.notes.append(f"{self._rel(path)}: not readable ({e.strerror or e}); left out")
            except (ValueError, KeyError, TypeError, AttributeError):
                self.notes.append(f"{self._rel(path)}: not readable; left out")
        return count

    def reindex(self) -> int:
        """The runs of the index rebuilt from the run folders, in place and in one transaction
        (``store repair`` of a sound index); the number of runs indexed."""
        found = self._import_records(replace=True)
        with self.lock, _store_errors(self.path):  # the WAL's copies of what was replaced, gone too
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return found

    def _unreadable_rows(self, db: sqlite3.Connection) -> dict[str, int]:
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

    def _readable(self, path: Path) -> dict | None:
        """The record at ``path``, checked (its pins' credentials masked in place when an older
        dsbisect kept them); None when it is not one (quarantined or named)."""
        try:
            data = bounds.read_json(path)
        except OSError as e:
            if e.errno == errno.EFBIG:
                self._quarantine(path, e.strerror)
            else:
                self.notes.append(f"{self._rel(path)}: not readable ({e.strerror}); left out")
            return None
        except ValueError as e:
            self._quarantine(path, f"not JSON ({e})")
            return None
        newer = version.newer_record(data, RECORD_FORMAT)
        if newer is not None:
            self.notes.append(f"{self._rel(path)}: written by a newer dsbisect (record format {newer}); left "
                              "as it is, not indexed")
            return None
        problem = record_problem(data)
        if problem:
            self._quarantine(path, problem)
            return None
        return self._masked_record(path, data)

    def _masked_record(self, path: Path, data: dict) -> dict:
        """A record whose point kept its pins' credentials (an older dsbisect), rewritten masked."""
        point = _kept_point(data["point"])
        if point == data["point"]:
            return data
        data = data | {"point": point, "point_key": Point.from_json(point).key}
        try:
            write_record(self.dir, data | {"folder": self._rel(path.parent)})
            self.notes.append(f"{self._rel(path)}: the credentials in its pins are masked now")
        except (OSError, DiskFull) as e:
            self.notes.append(f"{self._rel(path)}: holds its pins' credentials (not masked: {e})")
        return data

    def _index(self, db: sqlite3.Connection, data: dict, folder: Path) -> None:
        values = {c: data.get(c) for c in _RUN_COLUMNS}
        values["folder"] = self._rel(folder)
        values["run_dir"] = self._evidence_dir(data.get("run_dir"), data.get("folder")) or values["folder"]
        values = _kept(values)
        sql = f"INSERT INTO runs ({', '.join(_RUN_COLUMNS)}) VALUES ({', '.join('?' for _ in _RUN_COLUMNS)})"
        try:
            db.execute(sql, tuple(_db_value(c, values[c]) for c in _RUN_COLUMNS))
        except sqlite3.IntegrityError:  # two folders claim one id (a copied runs/): a new id
            db.execute(sql, tuple(None if c == "id" else _db_value(c, values[c]) for c in _RUN_COLUMNS))

    def _evidence_dir(self, run_dir: str | None, folder: str | None) -> str | None:
        """Where a record says its evidence is, when that is not its own folder and is there:
        a path of this store, or a folder outside every store (a Slurm job's); never another
        store's run folder (the store may have moved, or be a copy)."""
        run_dir = relative_run_dir(run_dir, folder)
        if not run_dir or run_dir == relative_folder(folder):
            return None
        here = self._abs(run_dir)
        if not here.is_dir() or (Path(run_dir).is_absolute() and _inside_runs(here)):
            return None
        return run_dir

    def _quarantine(self, record: Path, problem: str) -> None:
        """Move a run folder whose record cannot be read out of ``runs/`` (nothing is deleted)."""
        where = self.dir / "quarantine"
        target = where / record.parent.name
        while target.exists():
            target = where / f"{record.parent.name}-{secrets.token_hex(3)}"
        try:
            where.mkdir(exist_ok=True)
            record.parent.rename(target)
        except OSError as e:
            self.notes.append(f"{self._rel(record)}: {problem}; left out (could not move it aside: {e.strerror})")
            return
        self.notes.append(f"{self._rel(record)}: {problem}; moved to {self._rel(target)}")


def write_record(store: Path, values: dict) -> None:
    """The run's record as ``run.json`` in its folder (written whole, then renamed into place)."""
    folder = store / values["folder"] if values.get("folder") else None
    if folder is None:
        return
    target = folder / RunDir.RECORD
    tmp = target.with_name(target.name + ".tmp")
    try:
        folder.mkdir(parents=True, exist_ok=True)  # a run folder deleted by hand: the record still counts
        tmp.write_text(json.dumps({"format": RECORD_FORMAT} | values, indent=1))
        tmp.rename(target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if disk.is_full(e):
            raise DiskFull(disk.message(target)) from None
        raise


def _inside_runs(path: Path) -> bool:
    """A run folder of some store (``.../runs/<id>``): never another store's evidence to read."""
    return path.parent.name == "runs" and (path.parent.parent / DB).exists()


def _lock(folder: Path) -> StoreLock:
    with _full_as_one_line(folder / claims.LOCK):
        return StoreLock(folder)


def relative_folder(path: str | None) -> str | None:
    """``runs/<name>`` for a run folder of any store (an old index kept absolute paths)."""
    if not path:
        return None
    p = Path(path)
    return p.as_posix() if not p.is_absolute() else f"runs/{p.name}" if p.parent.name == "runs" else None


def relative_run_dir(run_dir: str | None, folder: str | None) -> str | None:
    """``run_dir`` relative to its store when it lies in it; the store is the one ``folder`` (an
    old index's absolute ``<store>/runs/<name>``) names.  Paths outside it stay as they are."""
    if not run_dir or not Path(run_dir).is_absolute():
        return run_dir
    if folder and Path(folder).is_absolute() and Path(folder).parent.name == "runs":
        old_store = Path(folder).parent.parent
        if Path(run_dir).is_relative_to(old_store):
            return Path(run_dir).relative_to(old_store).as_posix()
    return run_dir


def _relative_paths(db: sqlite3.Connection) -> None:
    """Migration 4: the absolute folder and run_dir of every row relative to the store (what a
    store made in its own folder always is); evidence kept outside the store stays absolute."""
    for row in db.execute("SELECT id, folder, run_dir FROM runs").fetchall():
        old = row["folder"] or row["run_dir"]  # before migration 3, run_dir was the run's folder
        folder = relative_folder(old) if row["folder"] or _inside_runs(Path(old or "/")) else row["folder"]
        db.execute("UPDATE runs SET folder=?, run_dir=? WHERE id=?",
                   (folder, relative_run_dir(row["run_dir"], old if folder else None), row["id"]))


def check_access(folder: Path, write: bool) -> None:
    """'permission denied: ...' when this user may not read (or write) the store: not damage."""
    db = folder / DB
    try:
        for p in (folder, *folder.parents):
            if p.exists():
                break
        exists = db.exists()
    except PermissionError:
        blocker = next(p for p in (folder, *folder.parents) if _visible(p))
        raise StoreError(f"permission denied: {db} cannot be read ({_who(blocker)} may not be entered); "
                         "ask its owner, or pass a --store of your own") from None
    if not exists:
        return
    need = os.R_OK | (os.W_OK if write else 0)
    for p in [db] + ([Path(f"{db}-wal"), Path(f"{db}-shm"), folder] if write else []):
        if p.exists() and not os.access(p, need | (os.X_OK if p == folder else 0)):
            if read_only_fs(p):
                return  # a read-only mount: not permissions (writing says so when it is tried)
            raise StoreError(f"permission denied: {_who(p)}; "
                             + ("dsbisect can read it (report, show) but not write it; pass a --store of your own"
                                if os.access(db, os.R_OK) else "ask its owner, or pass a --store of your own"))


def _visible(p: Path) -> bool:
    try:
        p.stat()
        return True
    except OSError:
        return False


def read_only_fs(p: Path) -> bool:
    try:
        return bool(os.statvfs(p).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _who(p: Path) -> str:
    """``path (owner NAME, mode 0700)``."""
    st = p.stat()
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    return f"{p} (owner {owner}, mode {stat.S_IMODE(st.st_mode):04o})"


def _no_index(folder: Path) -> DsbisectError:
    """The error of a store folder without its index: a lost index (run records, bisections, run
    folders or the store's own files are there) points to ``store repair``; only an empty or
    absent folder is "no store"."""
    records = len(list(folder.glob(f"runs/*/{RunDir.RECORD}")))
    bisections = len(list(folder.glob("bisections/*.json")))
    runs = len([d for d in folder.glob("runs/*") if d.is_dir()])
    repair_ = f"'dsbisect store repair --store {folder}'"
    if records or bisections:
        held = " and ".join(f"{n} {what}" for n, what in ((records, "run record(s) in runs/"),
                                                            (bisections, "bisection(s) in bisections/")) if n)
        return StoreError(f"{folder} has no index ({DB}) but holds {held}: {repair_} indexes them")
    if runs or (folder / claims.LOCK).exists() or (folder / claims.WRITERS).is_dir():
        left = f" ({runs} run folder(s), none with a record)" if runs else ""
        return StoreError(f"{folder} is a dsbisect store whose index ({DB}) is gone{left}: nothing recorded to "
                          f"read; {repair_} makes a new index")
    return InputError(f"no dsbisect store in {folder} (run 'dsbisect run' first, or pass --store)")


def _open_readonly(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise _no_index(path.parent)
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
def _full_as_one_line(path: Path) -> Iterator[None]:
    try:
        yield
    except OSError as e:
        if disk.is_full(e):
            raise DiskFull(disk.message(path)) from None
        raise


@contextmanager
def _store_errors(path: Path) -> Iterator[None]:
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


# ------------------------------------------------------------- checking values

_TYPES: dict[str, tuple[type, ...]] = {
    "id": (int,), "case_name": (str,), "case_key": (str,), "point_key": (str,), "point": (dict,),
    "env_key": (str, type(None)), "attempt": (int,), "status": (str,), "outcome": (str, type(None)),
    "exit_code": (int, type(None)), "seconds": (int, float, type(None)), "started": (int, float),
    "finished": (int, float, type(None)), "reason": (str,), "run_dir": (str, type(None)),
    "signature": (str,), "evidence": (dict,), "facts": (dict,), "pid": (int, type(None)),
    "host": (str, type(None)), "folder": (str, type(None)), "heartbeat": (int, float, type(None)),
    "writer": (str, type(None)),
}
_OPTIONAL = {"env_key", "outcome", "exit_code", "seconds", "finished", "run_dir", "pid", "host", "folder",
             "heartbeat", "writer", "signature", "reason", "evidence", "facts", "attempt"}
_DEFAULTS = {"signature": "", "reason": "", "evidence": {}, "facts": {}, "attempt": 1}


_NUM = (int, float)
# The keys of facts and evidence that reports and show read, with the types they read them as
# (a text or a number may be null, a list or an object may not): a record or row with anything
# else there is not readable.
_INNER: dict[str, dict[str, tuple[type, ...]]] = {
    "facts": {"python": (str,), "versions": (dict,), "cuda": (str,), "nccl": (str,), "nvcc": (str,),
              "gpus": (list,), "host": (dict,), "command": (list,), "inputs": (list,), "index": (str,),
              "shadowed": (list,), "accelerator": (str,), "slurm": (dict,)},
    "evidence": {"manual": (str,), "note": (str,), "notes": (list,), "survivors": (list,), "pids": (list,),
                 "escaped": (list,), "shm_removed": (list,), "hang_detected_after_s": _NUM, "files": (list,),
                 "taken": (list,)},
    "host": {"name": (str,), "topology": (str,), "gpus": (list,), "driver": (str,), "cpu_model": (str,),
             "ram_bytes": _NUM, "shm_bytes": _NUM},
    "source": {"package": (str,), "repo": (str,), "commit": (str,), "describe": (str,), "subject": (str,)},
}
_ITEMS = {("facts", "versions"): (str,), ("facts", "gpus"): (str,), ("facts", "inputs"): (dict,),
          ("facts", "command"): (str,), ("evidence", "notes"): (str,), ("evidence", "escaped"): (int,),
          ("evidence", "pids"): (int,), ("evidence", "files"): (str,)}


def _inner_problem(part: str, data: dict) -> str | None:
    """What a known key of ``data`` (facts, evidence, a host, a commit) holds that no run writes."""
    for key, types in _INNER[part].items():
        v = data.get(key)
        if v is None and key in data and types[0] in (list, dict):
            return f"{part}.{key} is null, not a {types[0].__name__}"
        if v is not None and (isinstance(v, bool) or not isinstance(v, types)):
            return f"{part}.{key} {v!r:.40} is not a {' or '.join(t.__name__ for t in types)}"
        items = _ITEMS.get((part, key))
        if items and v is not None:
            values = v.values() if isinstance(v, dict) else v
            if any(isinstance(x, bool) or not isinstance(x, items) for x in values):
                return f"{part}.{key} holds a value that is not a {items[0].__name__}"
        if key in _INNER and isinstance(v, dict):
            found = _inner_problem(key, v)
            if found:
                return found
    return None


def record_problem(data: object) -> str | None:
    """What makes ``data`` (a record or a row) not a run record, or None.  Fills defaults in."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__ if data is not None else 'null'}, not a run record"
    for c in _RUN_COLUMNS:
        if c not in data or data[c] is None and c in _DEFAULTS:
            if c not in _OPTIONAL:
                return f"no {c}"
            data[c] = _DEFAULTS.get(c)
        v = data[c]
        if isinstance(v, bool) or not isinstance(v, _TYPES[c]):
            return f"{c} {v!r:.60} is not a {' or '.join(t.__name__ for t in _TYPES[c] if t is not type(None))}"
    if data["status"] not in {s.value for s in RunStatus}:
        return f"status {data['status']!r:.40} is not one of {', '.join(s.value for s in RunStatus)}"
    if data["outcome"] is not None and data["outcome"] not in {o.value for o in Outcome}:
        return f"outcome {data['outcome']!r:.40} is not one of {', '.join(o.value for o in Outcome)}"
    if data["status"] == "done" and data["outcome"] is None:
        return "a finished run without an outcome"
    versions, pins = data["point"].get("versions"), data["point"].get("pins", [])
    if not isinstance(versions, list) or not all(isinstance(x, list) and len(x) == 2 and
                                                 all(isinstance(y, str) for y in x) for x in versions):
        return "point.versions is not a list of [name, version]"
    if not isinstance(pins, list) or not all(isinstance(x, str) for x in pins):
        return "point.pins is not a list of requirements"
    source = data["point"].get("source")
    for part, inner in (("facts", data["facts"]), ("evidence", data["evidence"]),
                        ("source", source if isinstance(source, dict) else {})):
        found = _inner_problem(part, inner)
        if found:
            return found
    try:
        Point.from_json(data["point"])
    except (KeyError, TypeError, ValueError) as e:
        return f"point is not a point ({type(e).__name__}: {e})"
    return None


def row_values(row: sqlite3.Row) -> tuple[dict, str | None]:
    """A row of the index as record values (JSON columns read), and what is wrong with it."""
    values = {c: row[c] for c in row.keys() if c in _RUN_COLUMNS}
    for c in _JSON_COLUMNS:
        try:
            values[c] = json.loads(values[c]) if isinstance(values.get(c), str) else values.get(c)
        except ValueError:
            return values, f"{c} is not JSON"
    return values, record_problem(values)


def _db_value(column: str, value: object) -> object:
    return json.dumps(value if value is not None else {}) if column in _JSON_COLUMNS else value


def _kept_point(point: dict) -> dict:
    """A point as the store keeps it: its pins' URL credentials masked (``Point.key`` is made
    from the same masked text, so the key and the stored point agree)."""
    return point | {"pins": [mask_text(p) if isinstance(p, str) else p for p in point.get("pins", [])]}


def _kept(values: dict) -> dict:
    """A run's values as the store keeps them: secrets masked, sizes capped (``bounds``)."""
    out = dict(values)
    if isinstance(out.get("point"), dict):
        out["point"] = _kept_point(out["point"])
    for c in ("reason", "signature", "evidence", "facts"):
        if out.get(c) is not None:
            out[c] = redact_tree(out[c])
    return bounds.capped(out)


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


def _pid_alive(pid: int | None, started: float) -> bool:
    """Is the process ``pid`` of this machine the one that started at ``started``?"""
    if pid is None:
        return False
    if pid == os.getpid():
        return True
    try:
        return psutil.Process(pid).create_time() <= started + 1
    except (psutil.Error, OverflowError, ValueError):
        return False


def _bisection(row: sqlite3.Row) -> BisectionRecord:
    return BisectionRecord.from_json(dict(row) | {"params": json.loads(row["params"]),
                                                  "result": json.loads(row["result"])})
