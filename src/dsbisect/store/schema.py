"""The index's schema: its tables, the migrations that bring an older index up to date, and
the paths an old index kept absolute (a store is a folder of its own: paths in it are relative).

The schema's version is SQLite's ``user_version``: the number of scripts of ``SCHEMA`` run so
far.  A script is added, never changed; ``version`` refuses an index of a newer dsbisect.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from dsbisect.store import version

DB = "dsbisect.sqlite3"

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
    # the store by relative_paths, run once with it
    """
    ALTER TABLE runs ADD COLUMN heartbeat REAL;
    ALTER TABLE runs ADD COLUMN writer TEXT;
    """,
]
RELATIVE_PATHS = 4  # the migration after which folder and run_dir are relative to the store


def migrate(db: sqlite3.Connection, path: Path) -> bool:
    """Bring the schema of ``db`` (at ``path``) up to date, inside the transaction its caller
    holds (IMMEDIATE: a second dsbisect on a fresh store waits for it); True when the database
    had no schema at all."""
    (at,) = db.execute("PRAGMA user_version").fetchone()
    if at > len(SCHEMA):  # a newer dsbisect's, committed since the header was read
        raise version.newer(path, at, len(SCHEMA))
    for i, script in enumerate(SCHEMA[at:], start=at + 1):
        for stmt in script.split(";"):
            if stmt.strip():
                db.execute(stmt)
        if i == RELATIVE_PATHS:
            relative_paths(db)
        db.execute(f"PRAGMA user_version = {i}")
    return at == 0


def inside_runs(path: Path) -> bool:
    """A run folder of some store (``.../runs/<id>``): never another store's evidence to read."""
    return path.parent.name == "runs" and (path.parent.parent / DB).exists()


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


def relative_paths(db: sqlite3.Connection) -> None:
    """Migration 4: the absolute folder and run_dir of every row relative to the store (what a
    store made in its own folder always is); evidence kept outside the store stays absolute."""
    for row in db.execute("SELECT id, folder, run_dir FROM runs").fetchall():
        old = row["folder"] or row["run_dir"]  # before migration 3, run_dir was the run's folder
        folder = relative_folder(old) if row["folder"] or inside_runs(Path(old or "/")) else row["folder"]
        db.execute("UPDATE runs SET folder=?, run_dir=? WHERE id=?",
                   (folder, relative_run_dir(row["run_dir"], old if folder else None), row["id"]))
