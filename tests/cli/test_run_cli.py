"""`dsbisect run` end to end: real venvs, the real deepspeed launcher on 2 CPU ranks, a real store."""

from __future__ import annotations

import json
import os
import platform
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

import toypkg
from conftest import live_pids, offline, write_matrix

pytestmark = pytest.mark.slow

GRID = {"3.0.0": "ok", "3.1.0": "skip", "3.2.0": "raise", "3.3.0": "import", "3.4.0": "broken"}


@pytest.fixture(scope="module")
def grid_house(tmp_path_factory):
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("grid-wheels"), GRID, dist="dsb-grid")




def test_grid_matches_the_toy_releases(tmp_path, cli, grid_house, cache_dir):
    write_matrix(tmp_path, list(GRID), package="dsb-grid", collective_timeout=5)
    # --no-early-hang: the collective timeout, not the early proof that races it, ends the hang
    common = (*offline(grid_house, cache_dir), "-q", "--no-early-hang")
    res = cli("run", "matrix.yaml", "--format", "json", *common, cwd=tmp_path)
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    cells = {row["point"]: row["cells"]["toy"]["outcome"] for row in report["grid"]}
    assert cells == {"dsb-grid 3.0.0": "pass", "dsb-grid 3.1.0": "hang", "dsb-grid 3.2.0": "fail",
                     "dsb-grid 3.3.0": "skip", "dsb-grid 3.4.0": "skip"}
    runs = {r["point"]: r for r in report["runs"]}
    assert "ValueError: dsb_toy: the loss went NaN" in runs["dsb-grid 3.2.0"]["reason"]
    assert "import dsb_toy" in runs["dsb-grid 3.3.0"]["reason"] and "ImportError" in runs["dsb-grid 3.3.0"]["reason"]
    assert "dsb-nonexistent-dependency" in runs["dsb-grid 3.4.0"]["reason"]

    hang = runs["dsb-grid 3.1.0"]
    # Ended by the 5 s collective timeout (gloo's own line), not by the wall timeout or a
    # 30-minute watchdog; how fast that is measured in benchmarks/, not asserted here.
    assert "Timed out waiting 5000ms" in hang["reason"], hang["reason"]
    assert "all_reduce" in hang["signature"] and "rank 0" in hang["signature"]
    assert hang["evidence"]["pids"] and not live_pids(hang["evidence"]["pids"])
    assert hang["evidence"]["survivors"] == []
    # No assertion on the stacks here: rank 0 leaves the all_reduce when gloo's timeout fires, so
    # whether a dump still catches it there is a race with the machine's load (seen lost on CI).
    # The stacks of ranks dsbisect itself holds in a wait are asserted where it ends the hang:
    # tests/run/test_runner.py (the proven deadlock) and tests/run/test_direct.py (the idle hang).

    # The report re-renders from the store, as Markdown for a GitHub issue.
    md = cli("report", "--format", "markdown", cwd=tmp_path)
    assert md.exit_code == 0
    assert "| dsb-grid 3.1.0 | ⏳ HANG" in md.stdout and "| dsb-grid 3.0.0 | ✅ PASS" in md.stdout
    assert "<details><summary>Stacks of hung run" in md.stdout
    table = cli("report", cwd=tmp_path)
    assert "HANG" in table.stdout and "SKIP" in table.stdout

    # Each run records the machine it ran on; a report made elsewhere (a store copied back from
    # a GPU node) describes that machine, not the one rendering it.
    assert report["hosts"] == [hang["environment"]["host"]]
    assert report["hosts"][0]["name"] == platform.node() and report["hosts"][0]["cpus"] == os.cpu_count()
    with sqlite3.connect(tmp_path / ".dsbisect" / "dsbisect.sqlite3") as con:
        con.execute("UPDATE runs SET facts = json_set(facts, '$.host.name', 'gpu-node-7', '$.host.gpus',"
                    " json_array('NVIDIA H200', 'NVIDIA H200'))")
    md = cli("report", "--format", "markdown", cwd=tmp_path)
    assert "- host gpu-node-7: " in md.stdout and "2 GPUs (NVIDIA H200)" in md.stdout
    assert platform.node() not in md.stdout

    # A second run reuses everything recorded (PASS/FAIL/HANG) and retries only the SKIPs.
    again = cli("run", "matrix.yaml", "--format", "json", *common, cwd=tmp_path)
    ids = {r["point"]: r["id"] for r in json.loads(again.stdout)["runs"]}
    for point in ("dsb-grid 3.0.0", "dsb-grid 3.1.0", "dsb-grid 3.2.0"):
        assert ids[point] == runs[point]["id"]
    assert ids["dsb-grid 3.3.0"] != runs["dsb-grid 3.3.0"]["id"]

    show = cli("show", str(hang["id"]), cwd=tmp_path)
    assert show.exit_code == 0 and "signature" in show.stdout and "rank 0" in show.stdout


def test_killed_run_resumes_without_losing_or_repeating(tmp_path, grid_house, cache_dir):
    write_matrix(tmp_path, ["3.0.0", "3.2.0"], package="dsb-grid", collective_timeout=5)
    cmd = [sys.executable, "-m", "dsbisect", "run", "matrix.yaml", *offline(grid_house, cache_dir), "-q"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    db = tmp_path / ".dsbisect" / "dsbisect.sqlite3"
    deadline = time.monotonic() + 600  # a guard: the loop ends at the event
    first = None
    while time.monotonic() < deadline:
        if db.exists():
            try:
                with sqlite3.connect(db) as con:
                    row = con.execute("SELECT id, outcome FROM runs WHERE status='done'").fetchone()
                    started = con.execute("SELECT count(*) FROM runs WHERE status='running'").fetchone()[0]
            except sqlite3.OperationalError:  # the file is there, its tables not yet: look again
                row = started = None
            if row and started:
                first = row
                break
        time.sleep(0.2)
    assert first is not None, "the first run never finished"
    os.killpg(proc.pid, signal.SIGKILL)  # kill -9 dsbisect and everything it started
    proc.wait()

    res = subprocess.run(cmd + ["--format", "json"], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(res.stdout)
    ids = sorted(r["id"] for r in report["runs"])
    assert first[0] in ids  # the recorded run was reused, not repeated
    assert {row["point"]: row["cells"]["toy"]["outcome"] for row in report["grid"]} == {
        "dsb-grid 3.0.0": "pass", "dsb-grid 3.2.0": "fail"}
    with sqlite3.connect(db) as con:
        statuses = dict(con.execute("SELECT id, status FROM runs").fetchall())
    assert statuses[first[0]] == "done"
    assert len([s for s in statuses.values() if s == "done"]) == 2
