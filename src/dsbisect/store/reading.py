"""Reading runs: rows of the index as ``RunRecord``s, and the questions the runner, reports and
``show`` ask of them (a point's finished runs, a case's peak memory, the last skip).

A row left ``running`` is judged as it is read: its dsbisect is alive (this host's pid, or
another host's fresh heartbeat), or it reads back as ``interrupted``, saying why (``claims``).
A row that holds values no run has is left out and named in ``notes``, never a traceback.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time

import psutil

from dsbisect.core.errors import StoreError
from dsbisect.core.model import Outcome, Point, RunStatus, digest
from dsbisect.records import migrate
from dsbisect.records.run import Evidence, RunFacts, RunRecord
from dsbisect.store import claims
from dsbisect.store.claims import Liveness
from dsbisect.store.index import Index
from dsbisect.store.values import row_values


class RunReader:
    """The runs of ``index``, read."""

    def __init__(self, index: Index):
        self.index = index

    # ------------------------------------------------------------ rows as records

    def records(self, rows: list[sqlite3.Row]) -> list[RunRecord]:
        return [r for r in (self.try_record(row) for row in rows) if r is not None]

    def try_record(self, row: sqlite3.Row) -> RunRecord | None:
        """The row as a record, or None (and a note) when it holds values no run has."""
        values, problem = row_values(row)
        if problem:
            self.index.note(f"run {row['id']}: its entry in {self.index.path} is not readable ({problem}); left "
                            f"out ('dsbisect store repair --store {self.index.dir}' rebuilds the index from the "
                            "run folders)")
            return None
        return self.record(values)

    def liveness(self, v: dict) -> Liveness:
        """Whether the dsbisect of a ``running`` row's values is still at work (``claims.judge``)."""
        return claims.judge(v.get("host"), socket.gethostname(), v.get("heartbeat") or v.get("started"),
                            time.time(), pid_alive(v.get("pid"), v.get("started") or 0.0),
                            claims.writer_held(self.index.dir, v.get("writer")))

    def record(self, v: dict) -> RunRecord:
        """Checked values (``row_values``) as a record; a ``running`` one of a dsbisect that is
        gone as ``interrupted``, with why."""
        status, abandoned = RunStatus(v["status"]), ""
        if status is RunStatus.RUNNING:
            state = self.liveness(v)
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
            run_dir=str(self.index.abs(v["run_dir"])) if v["run_dir"] else None, signature=v["signature"],
            evidence=Evidence.from_json(v["evidence"]), facts=RunFacts.from_json(v["facts"]), host=v["host"],
            pid=v["pid"], finished=v["finished"],
            heartbeat=v.get("heartbeat"), abandoned=abandoned,
        ))

    # -------------------------------------------------------------------- queries

    def done_runs(self, case_key: str, point_key: str) -> list[RunRecord]:
        rows = self.index.rows("SELECT * FROM runs WHERE case_key=? AND point_key=? AND status='done' ORDER BY id",
                               (case_key, point_key))
        return self.records(rows)

    def peak_rss(self, case_name: str, last: int = 50) -> list[int]:
        """The peak memory (bytes) of the case's last runs that recorded one (evidence.peak_rss)."""
        rows = self.index.rows("SELECT evidence FROM runs WHERE case_name=? AND status='done' ORDER BY id DESC LIMIT ?",
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
        rows = self.index.rows("SELECT * FROM runs WHERE case_name=? AND point_key=? AND case_key<>? AND status='done'"
                               " AND outcome<>'skip' ORDER BY id DESC LIMIT 1", (case_name, point_key, case_key))
        found = self.records(rows)
        return found[0] if found else None

    def same_skip(self, case_key: str, point_key: str, reason: str, host: str) -> RunRecord | None:
        """The last run of this point if it was skipped on this host for this very reason."""
        rows = self.index.rows("SELECT * FROM runs WHERE case_key=? AND point_key=? AND status='done' ORDER BY id DESC"
                               " LIMIT 1", (case_key, point_key))
        last = self.try_record(rows[0]) if rows else None
        if last and last.outcome is Outcome.SKIP and last.reason == reason and \
                last.facts.host_name == host:
            return last
        return None

    def run(self, run_id: int) -> RunRecord | None:
        rows = self.index.rows("SELECT * FROM runs WHERE id=?", (run_id,)) if -2**63 <= run_id < 2**63 else []
        if not rows and run_id in self.index.too_big:
            raise StoreError(f"run {run_id}'s entry in {self.index.path} is too large to read; 'dsbisect store repair "
                             f"--store {self.index.dir}' rebuilds the index from the run folders")
        if not rows:
            return None
        values, problem = row_values(rows[0])
        if problem:
            raise StoreError(f"run {run_id}'s entry in {self.index.path} is not readable ({problem}); "
                             f"'dsbisect store repair --store {self.index.dir}' rebuilds the index from the run folders")
        return self.record(values)

    def runs(self, case_names: list[str] | None = None, include_unfinished: bool = False) -> list[RunRecord]:
        """The runs (of these case names: recorded under one, or under another name of the same
        case key, see ``name_case``), oldest first."""
        out = self.records(self.index.rows("SELECT * FROM runs ORDER BY id"))
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
        folder = self.index.dir / "names"
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
        folder = self.index.dir / "names"
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


def pid_alive(pid: int | None, started: float) -> bool:
    """Is the process ``pid`` of this machine the one that started at ``started``?"""
    if pid is None:
        return False
    if pid == os.getpid():
        return True
    try:
        return psutil.Process(pid).create_time() <= started + 1
    except (psutil.Error, OverflowError, ValueError):
        return False
