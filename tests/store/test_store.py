"""The SQLite store: rows survive, a dead writer's 'running' rows read as interrupted."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

from dsbisect.core.model import GitSource, Outcome, Point, RunStatus
from dsbisect.records.run import Evidence, ImportCheck, RunFacts
from dsbisect.store.store import Store
from dsbisect.records.bisections import AskedFor, BisectionStatus

P = Point(versions=(("deepspeed", "0.12.4"),), pins=("pydantic<2",))


def test_run_roundtrip(tmp_path):
    st = Store(tmp_path)
    rid = st.start_run("seed", "case1", P, "env1", 1)
    assert st.run(rid).status is RunStatus.RUNNING
    st.finish_run(rid, Outcome.HANG, None, 61.5, reason="wall", signature="rank 0 in REDUCE",
                  evidence=Evidence.of(files=["a"]), facts=RunFacts.of(python="3.11"))
    st.close()
    again = Store(tmp_path)
    (r,) = again.done_runs("case1", P.key)
    assert (r.outcome, r.seconds, r.signature, r.evidence.files, r.point) == (Outcome.HANG, 61.5, "rank 0 in REDUCE", ("a",), P)
    assert sqlite3.connect(again.path).execute("PRAGMA user_version").fetchone()[0] == 4


def test_running_row_of_dead_process_reads_interrupted(tmp_path):
    code = (
        "import sys; sys.path[:0] = sys.argv[1:2]\n"
        "from dsbisect.store.store import Store\nfrom dsbisect.core.model import Point\n"
        f"Store({str(tmp_path)!r}).start_run('c', 'k', Point(versions=(('x','1'),)), None, 1)\n"
    )
    subprocess.run([sys.executable, "-c", code, ""], check=True)
    (r,) = Store(tmp_path).runs(include_unfinished=True)
    assert r.status is RunStatus.INTERRUPTED
    assert Store(tmp_path).done_runs("k", r.point_key) == []


def test_commit_points_are_keyed_by_commit_not_clone(tmp_path):
    a = Point(versions=(("deepspeed", "0.12.4"),), source=GitSource("deepspeed", "/a", "abc123", "v0.12.3-1", "x"))
    b = Point(versions=(("deepspeed", "0.12.4"),), source=GitSource("deepspeed", "/b", "abc123", "v0.12.3-1", "x"))
    c = Point(versions=(("deepspeed", "0.12.4"),), source=GitSource("deepspeed", "/a", "def456", "v0.12.3-2", "y"))
    assert a.key == b.key != c.key
    st = Store(tmp_path)
    rid = st.start_run("c", "k", a, None, 1)
    assert st.run(rid).point.source.commit == "abc123"


def test_import_check_cache_and_bisection_upsert(tmp_path):
    st = Store(tmp_path)
    assert st.import_check("e", ("numpy-bufsize",)) is None
    st.put_import_check("e", ("numpy-bufsize",), ImportCheck(False, "import deepspeed failed", RunFacts.of(python="3.12")))
    assert st.import_check("e", ("numpy-bufsize",)) == ImportCheck(False, "import deepspeed failed", RunFacts.of(python="3.12"))
    assert st.import_check("e", ()) is None
    asked = AskedFor.from_json({"case": "c", "a": 1})
    i = st.save_bisection("k", "deepspeed", "0.12.2", "0.12.4", asked, BisectionStatus.RUNNING, {})
    j = st.save_bisection("k", "deepspeed", "0.12.2", "0.12.4", asked, BisectionStatus.DONE, {"first_bad": "0.12.4"})
    assert i == j and st.bisection("k").result == {"first_bad": "0.12.4"}
    assert st.bisection("k").status is BisectionStatus.DONE and st.bisection("k").params.extra == {"a": 1}


def test_a_store_made_inside_a_clone_does_not_show_in_git_status(tmp_path):
    """README as a script (issue 23 item 6): running from a subfolder makes ``<it>/.dsbisect/``;
    it carries its own ``*`` .gitignore, so ``git status`` of the clone stays clean."""
    from conftest import git

    git(tmp_path, "init", "-q")
    sub = tmp_path / "repro_scripts" / "byo"
    sub.mkdir(parents=True)
    (sub / "job.py").write_text("pass\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    st = Store(sub / ".dsbisect")
    rid = st.start_run("job", "case1", P, "env1", 1)
    st.finish_run(rid, Outcome.PASS, 0, 1.0)
    st.close()
    assert any((sub / ".dsbisect").rglob("run.json")) or (sub / ".dsbisect" / "dsbisect.sqlite3").is_file()
    assert (sub / ".dsbisect" / ".gitignore").read_text() == "*\n"
    assert git(tmp_path, "status", "--porcelain", "--untracked-files=all") == ""
    # --store at a folder of the user's that exists: left alone (``*`` there would hide their files)
    mine = tmp_path / "results"
    mine.mkdir()
    Store(mine).close()
    assert not (mine / ".gitignore").exists()
    Store(tmp_path / "new-store").close()  # a folder dsbisect makes: ignored
    assert (tmp_path / "new-store" / ".gitignore").read_text() == "*\n"
