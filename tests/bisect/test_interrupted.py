"""A real bisection stopped mid-way (issue 36: Ctrl-C, SIGTERM or kill -9 left it `not finished
(running)` / "status": "running" forever with no process alive): the report, its JSON and
`log` say interrupted, since when and how to resume; the same command resumes it, reusing the
runs it finished, and ends done.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

import pytest

from conftest import offline, stopped_dsbisect, write_matrix

pytestmark = pytest.mark.slow


def _done_runs(store: Path) -> list[tuple[int, str]]:
    try:
        with sqlite3.connect(store / "dsbisect.sqlite3") as con:
            return con.execute("SELECT id, point_key FROM runs WHERE status='done' ORDER BY id").fetchall()
    except sqlite3.Error:
        return []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_bisection_reads_interrupted_and_resumes(tmp_path, cli, cache_dir, wheelhouse, sig):
    write_matrix(tmp_path, ["1.0.0"], collective_timeout=10)  # a rendezvous on a loaded machine
    args = ["bisect", "dsb-toy", "1.0.0", "1.7.0", "--case", "toy", *offline(wheelhouse, cache_dir), "-q",
            "--format", "json"]
    store = tmp_path / ".dsbisect"
    pid = stopped_dsbisect(args, tmp_path, lambda: len(_done_runs(store)) >= 1 and list(store.glob("bisections/*.json")),
                           300, "the bisection's first finished run", sig)
    finished = _done_runs(store)
    res = cli("report", "--store", str(store), "--format", "json")
    assert res.exit_code == 0, res.output
    (b,) = json.loads(res.stdout)["bisections"]
    assert b["status"] == "interrupted" and b["verdict"] is None, b
    text = " ".join(b["answer"])
    assert f"pid {pid}" in text and "last seen" in text and "to resume" in text, text
    assert "(interrupted)" in cli("log", "--store", str(store)).stdout.splitlines()[0]
    again = cli(*args, cwd=tmp_path)  # the same command: resumed, its finished runs reused
    assert again.exit_code == 0, again.output
    res = json.loads(cli("report", "--store", str(store), "--format", "json").stdout)
    (b,) = res["bisections"]
    assert b["status"] == "done" and b["verdict"] == "found", b
    keys = [k for _, k in _done_runs(store)]
    assert all(keys.count(k) == 1 for _, k in finished), "a finished point was run again"
