"""Writing runs: a run's row and folder when it starts (``claim`` waits for no one but a live
dsbisect running the same point), its record and row when it ends, and the heartbeat that
keeps this writer's ``running`` rows (and bisections) alive while the store is open.

The record comes first: ``run.json`` is written whole, then renamed into place, before the row
is committed, so a kill between the two leaves a record the index can be rebuilt from.  What
is written is masked and capped (``values.kept``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import socket
import sqlite3
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from dsbisect.core.errors import DiskFull, StoreError
from dsbisect.core.model import Outcome, Point
from dsbisect.core.redact import redact, redact_tree
from dsbisect.core.rundir import RunDir
from dsbisect.records.run import Evidence, RunFacts, RunRecord
from dsbisect.store import bounds, claims, version
from dsbisect.store.access import full_as_one_line, writer
from dsbisect.store.claims import Liveness, StoreLock
from dsbisect.store.index import Index
from dsbisect.store.reading import RunReader
from dsbisect.store.values import (JSON_COLUMNS, RECORD_FORMAT, RUN_COLUMNS, db_value, kept, kept_point,
                                   record_problem, write_record)


@dataclass(frozen=True)
class Claim:
    """``Store.claim``'s answer: a new run (``run``), or the live run of another process to wait for."""

    run: RunRecord | None = None
    busy: RunRecord | None = None


class Heartbeat:
    """Refreshes this writer's running rows, and touches its writer file, every
    ``claims.HEARTBEAT_S`` from ``start()`` until ``stop()`` or until the index is gone."""

    def __init__(self, index: Index, hold: StoreLock | None):
        self.index = index
        self.hold = hold
        self.beating: threading.Event | None = None

    def start(self) -> None:
        if self.beating is not None or self.hold is None:
            return
        self.beating = stop = threading.Event()
        ref, token = weakref.ref(self.index), self.hold.token  # the thread keeps neither alive

        def beat() -> None:
            while not stop.wait(claims.HEARTBEAT_S):
                index = ref()
                if index is None:
                    return
                claims.touch(index.dir, token)  # a running bisection's sign of life
                try:
                    with index.tx() as db:
                        db.execute("UPDATE runs SET heartbeat=? WHERE status='running' AND writer=?",
                                   (time.time(), token))
                except (StoreError, DiskFull, sqlite3.Error):
                    pass  # the next beat tries again; the run itself reports what is wrong
                del index

        threading.Thread(target=beat, name="dsbisect-heartbeat", daemon=True).start()

    def stop(self) -> None:
        if self.beating is not None:
            self.beating.set()


class RunWriter:
    """The runs of ``index`` started, finished and abandoned by this process."""

    def __init__(self, index: Index, reader: RunReader, heartbeat: Heartbeat, hold: StoreLock | None):
        self.index = index
        self.reader = reader
        self.heartbeat = heartbeat
        self.hold = hold

    @property
    def runs_dir(self) -> Path:
        return self.index.dir / "runs"

    def new_run_dir(self, run_id: int) -> RunDir:
        """A folder no run has used: ``runs/<id>``, or ``runs/<id>-<random>`` when a stale one
        (from a lost database, or a copied ``runs/``) already has that name."""
        with full_as_one_line(self.runs_dir):
            self.runs_dir.mkdir(parents=True, exist_ok=True)
        name = f"{run_id:06d}"
        while True:
            path = self.runs_dir / name
            try:
                with full_as_one_line(path):
                    path.mkdir()
                return RunDir(path)
            except FileExistsError:
                name = f"{run_id:06d}-{secrets.token_hex(3)}"

    def claim(self, case_name: str, case_key: str, point: Point, attempt: int) -> Claim:
        """Start a run of ``point`` (a row ``running`` and its own folder), unless another live
        dsbisect is running that point of that case right now: then return its run."""
        with self.index.tx() as db:
            rows = db.execute("SELECT * FROM runs WHERE case_key=? AND point_key=? AND status='running'",
                              (case_key, point.key)).fetchall()
            for row in rows:
                if row["pid"] != os.getpid() and self.reader.liveness(dict(row)) is Liveness.ALIVE:
                    busy = self.reader.try_record(row)
                    if busy is not None:
                        return Claim(busy=busy)
            run_id = self.insert(db, case_name, case_key, point, attempt)
        # this process runs the point it was given (the store keeps its pins' credentials masked)
        return Claim(run=dataclasses.replace(self.reader.run(run_id), point=point))

    def start_run(self, case_name: str, case_key: str, point: Point, env_key: str | None,
                  attempt: int) -> int:
        """A run that starts now, with a folder of its own (``claim`` without the wait)."""
        with self.index.tx() as db:
            return self.insert(db, case_name, case_key, point, attempt, env_key)

    def insert(self, db: sqlite3.Connection, case_name: str, case_key: str, point: Point, attempt: int,
               env_key: str | None = None) -> int:
        """The row of a run that starts now (in ``db``'s transaction), and its folder; its id."""
        now = time.time()
        cur = db.execute(
            "INSERT INTO runs (case_name, case_key, point_key, point, env_key, attempt, status, started, pid, host,"
            " heartbeat, writer) VALUES (?,?,?,?,?,?,'running',?,?,?,?,?)",
            (case_name, case_key, point.key, json.dumps(kept_point(point.to_json())), env_key, attempt, now,
             os.getpid(), socket.gethostname(), now, writer(self.hold, self.index.dir)))
        run_id = int(cur.lastrowid)
        folder = self.index.rel(self.new_run_dir(run_id).path)
        db.execute("UPDATE runs SET run_dir=?, folder=? WHERE id=?", (folder, folder, run_id))
        self.heartbeat.start()
        return run_id

    def finish_run(self, run_id: int, outcome: Outcome, exit_code: int | None, seconds: float,
                   reason: str = "", signature: str = "", evidence: Evidence | None = None,
                   facts: RunFacts | None = None, env_key: str | None = None,
                   run_dir: Path | None = None) -> RunRecord:
        """Record the run's end; ``run_dir`` when its evidence lives elsewhere (a Slurm job's folder)."""
        with self.index.lock:
            values = self.values(run_id)
            values |= {"status": "done", "outcome": outcome.value, "exit_code": exit_code, "seconds": seconds,
                       "finished": time.time(), "reason": redact(reason), "signature": redact(signature),
                       "evidence": redact_tree((evidence or Evidence()).to_json()),
                       "facts": redact_tree((facts or RunFacts()).to_json())}
            if env_key is not None:
                values["env_key"] = env_key
            if run_dir is not None:
                values["run_dir"] = self.index.rel(run_dir)
            return self.commit(values)

    def abandon_run(self, run_id: int, note: str = "") -> RunRecord:
        """A run stopped by a signal: not an outcome, so it is kept as interrupted, never reused.
        A run whose record says it finished (its dsbisect died before the index was updated)
        is indexed as its record says instead."""
        with self.index.lock:
            values = self.values(run_id)
            on_disk = self.record_file(values)
            if on_disk is not None and on_disk.get("status") == "done" and on_disk.get("id") == run_id:
                self.index.notes.append(f"run {run_id} had finished; its index entry is taken from its {RunDir.RECORD}")
                return self.commit(values | {c: on_disk[c] for c in RUN_COLUMNS if c in on_disk
                                             and c not in ("folder", "run_dir")})
            return self.commit(values | {"status": "interrupted", "finished": time.time(), "reason": note})

    def values(self, run_id: int) -> dict:
        """The values of run ``run_id``'s row, its JSON columns read."""
        (row,) = self.index.rows("SELECT * FROM runs WHERE id=?", (run_id,))
        values = dict(row)
        for c in JSON_COLUMNS:
            values[c] = json.loads(values[c])
        return values

    def commit(self, values: dict) -> RunRecord:
        """The record first (the folders are the truth), then the index; both capped in size and
        with no secret a pattern can find (a pin's URL credentials too)."""
        values = kept(values)
        write_record(self.index.dir, values)
        sets = [c for c in RUN_COLUMNS if c != "id"]
        with self.index.tx() as db:
            db.execute(f"UPDATE runs SET {', '.join(f'{c}=?' for c in sets)} WHERE id=?",
                       (*(db_value(c, values[c]) for c in sets), values["id"]))
        return self.reader.record(values)

    def record_file(self, values: dict) -> dict | None:
        """The record in the run's folder, when it is one this dsbisect reads; else None."""
        folder = self.index.abs(values.get("folder"))
        try:
            data = bounds.read_json(folder / RunDir.RECORD) if folder else None
        except (OSError, ValueError):
            return None
        if version.newer_record(data, RECORD_FORMAT) is not None:
            return None
        return data if isinstance(data, dict) and record_problem(data) is None else None
