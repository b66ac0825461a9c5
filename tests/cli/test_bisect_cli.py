"""`dsbisect bisect` end to end over toy releases, under the real deepspeed launcher on CPU."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import toypkg
from conftest import commit_toy, git, live_pids, offline, write_matrix

pytestmark = pytest.mark.slow


def _house(tmp_path_factory, name: str, releases: dict[str, str]) -> Path:
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp(name), releases, dist=name)


def _bisect(cli, tmp_path, cache_dir, house, package, good, bad, *extra, fmt="json", nproc=2):
    """One bisection of the toy case in its own matrix; the result as it came (some end in exit 1)."""
    write_matrix(tmp_path, [good], package=package, collective_timeout=3, nproc=nproc)
    args = ["bisect", package, good, bad, "--case", "toy", *offline(house, cache_dir), "-q", "--format", fmt, *extra]
    return cli(*args, cwd=tmp_path)


def _counted_matrix(folder: Path, package: str) -> None:
    """A toy matrix whose runs share a counter file: a "flaky" release hangs on every second run."""
    write_matrix(folder, ["1.0.0"], package=package, collective_timeout=3)
    matrix = folder / "matrix.yaml"
    matrix.write_text(matrix.read_text().replace(
        'env: {OMP_NUM_THREADS: "1"}', f'env: {{OMP_NUM_THREADS: "1", DSB_TOY_COUNTER: "{folder / "counter"}"}}'))


def _runs(tmp_path) -> list[tuple]:
    with sqlite3.connect(tmp_path / ".dsbisect" / "dsbisect.sqlite3") as con:
        return con.execute("SELECT id, point, outcome, evidence FROM runs WHERE status='done'").fetchall()


def test_finds_the_first_hanging_release_in_log2_runs(tmp_path, cli, cache_dir, wheelhouse):
    res = _bisect(cli, tmp_path, cache_dir, wheelhouse, "dsb-toy", "1.0.0", "1.7.0")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["verdict"], out["last_good"], out["first_bad"]) == ("found", "1.2.0", "1.3.0")
    assert out["candidates"] == [f"1.{i}.0" for i in range(8)]
    assert out["commit"] is None
    runs = _runs(tmp_path)
    assert len(runs) <= math.ceil(math.log2(8)) + 2
    assert sum(s["runs"] for s in out["steps"]) == len(runs)
    bad = next(s for s in out["steps"] if s["version"] == "1.3.0")
    assert bad["outcome"] == "hang" and "all_reduce" in bad["detail"]
    # no --regress-on: auto took the bad end's hang for the regression
    assert (out["regress_on"], out["regression"]["kind"], out["regression"]["learned_from"]) == ("hang", "hang", "1.7.0")
    assert out["regression"]["identity"].startswith("HANG")
    for _, _, _, evidence in runs:  # no process of any run is left
        assert not live_pids(json.loads(evidence).get("pids", []))
    with sqlite3.connect(tmp_path / ".dsbisect" / "dsbisect.sqlite3") as con:
        status, result = con.execute("SELECT status, result FROM bisections").fetchone()
    assert status == "done" and json.loads(result)["first_bad"] == "1.3.0"

    # Again: every run comes from the store, and the terminal report names the culprit.
    again = _bisect(cli, tmp_path, cache_dir, wheelhouse, "dsb-toy", "1.0.0", "1.7.0", fmt="table")
    assert again.exit_code == 0
    assert len(_runs(tmp_path)) == len(runs)  # nothing ran again
    assert "first bad release: dsb-toy 1.3.0" in again.stdout and "Reproduce with:" in again.stdout
    # ...and the way on: the clone the commit step needs (offline: no release date, the whole
    # history), and the same bisection with --git-repo; not in the JSON (its keys are pinned)
    assert "Next: find the commit" in again.stdout and "Next" not in res.stdout
    assert "git clone --filter=blob:none <the dsb-toy repository>" in again.stdout
    assert "dsbisect bisect dsb-toy 1.0.0 1.7.0 --git-repo dsb-toy" in again.stdout
    md = _bisect(cli, tmp_path, cache_dir, wheelhouse, "dsb-toy", "1.0.0", "1.7.0", fmt="markdown")
    assert "| release | 1.3.0 | ⏳ HANG | bad |" in md.stdout and "<details>" in md.stdout

    # Ends that do not behave as declared stop the bisection with exit 1 (from recorded runs).
    res = _bisect(cli, tmp_path, cache_dir, wheelhouse, "dsb-toy", "1.0.0", "1.2.0")
    assert res.exit_code == 1 and json.loads(res.stdout)["verdict"] == "not-reproduced"
    assert "1.2.0 (the bad end) passed: the regression does not reproduce here" in res.stderr
    res = _bisect(cli, tmp_path, cache_dir, wheelhouse, "dsb-toy", "1.3.0", "1.7.0")
    assert res.exit_code == 1 and "1.3.0 (the good end) also hung; widen the range" in res.stderr
    assert len(_runs(tmp_path)) == len(runs)


def test_untestable_release_is_stepped_around(tmp_path_factory, tmp_path, cli, cache_dir):
    # failures on one rank, not hangs on two: what is tested is the stepping around (2-4 s a run less)
    house = _house(tmp_path_factory, "dsb-skips", {"1.0.0": "ok", "1.1.0": "ok", "1.2.0": "import",
                                                   "1.3.0": "ok", "1.4.0": "raise", "1.5.0": "raise"})
    out = json.loads(_bisect(cli, tmp_path, cache_dir, house, "dsb-skips", "1.0.0", "1.5.0",
                             "--regress-on", "fail", nproc=1).stdout)
    assert (out["verdict"], out["last_good"], out["first_bad"]) == ("found", "1.3.0", "1.4.0")


@pytest.mark.soak
def test_adjacent_untestable_releases_give_a_range(tmp_path_factory, tmp_path, cli, cache_dir):
    house = _house(tmp_path_factory, "dsb-range", {"1.0.0": "ok", "1.1.0": "import", "1.2.0": "broken",
                                                   "1.3.0": "skip"})
    res = _bisect(cli, tmp_path, cache_dir, house, "dsb-range", "1.0.0", "1.3.0")
    out = json.loads(res.stdout)
    assert res.exit_code == 0
    assert out["verdict"] == "ambiguous" and out["maybe"] == ["1.1.0", "1.2.0", "1.3.0"]
    assert out["last_good"] == "1.0.0"


def test_find_fix_and_regress_on_fail(tmp_path_factory, tmp_path, cli, cache_dir):
    house = _house(tmp_path_factory, "dsb-fix", {"2.0.0": "raise", "2.1.0": "raise", "2.2.0": "ok", "2.3.0": "ok"})
    # --regress-on hang: a failing release is no regression of that kind.
    res = _bisect(cli, tmp_path, cache_dir, house, "dsb-fix", "2.0.0", "2.3.0", "--find-fix", "--regress-on", "hang",
                  nproc=1)  # "ok"/"raise" need no second rank
    assert res.exit_code == 1
    assert "untestable: 2.0.0 (the broken end) could not be tested: ValueError: dsb_toy: the loss went NaN" \
        in " ".join(res.stderr.split())
    for rule in (["--regress-on", "fail"], []):  # auto, the default: the broken end failed, so failures count
        res = _bisect(cli, tmp_path, cache_dir, house, "dsb-fix", "2.0.0", "2.3.0", "--find-fix", *rule, nproc=1)
        out = json.loads(res.stdout)
        assert res.exit_code == 0, res.output
        assert (out["mode"], out["verdict"], out["last_good"], out["first_bad"]) == ("find-fix", "found", "2.1.0", "2.2.0")
        assert (out["regress_on"], out["regression"]["learned_from"]) == ("fail", "2.0.0")
        assert out["regression"]["identity"] == "FAIL ValueError: dsb_toy: the loss went NaN at dsb_toy/__init__.py:step"


@pytest.mark.soak
def test_repeat_catches_an_intermittent_hang(tmp_path_factory, tmp_path, cli, cache_dir):
    house = _house(tmp_path_factory, "dsb-flaky", {"1.0.0": "ok", "1.1.0": "flaky", "1.2.0": "flaky"})
    _counted_matrix(tmp_path, "dsb-flaky")
    # The counter makes every second run of a flaky release hang: one run would see a pass.
    res = cli("bisect", "dsb-flaky", "1.0.0", "1.2.0", "--case", "toy", "--repeat", "2", *offline(house, cache_dir),
              "-q", "--format", "json", cwd=tmp_path)
    out = json.loads(res.stdout)
    assert res.exit_code == 0, res.output
    assert out["first_bad"] == "1.1.0"
    steps = {s["version"]: s for s in out["steps"]}
    assert steps["1.0.0"]["counts"] == {"pass": 2}
    assert steps["1.1.0"]["counts"] == {"pass": 1, "hang": 1}
    assert steps["1.2.0"]["counts"] == {"pass": 1, "hang": 1}


def test_confirm_reruns_the_boundary_and_catches_a_flaky_one(tmp_path_factory, tmp_path, cli, cache_dir):
    house = _house(tmp_path_factory, "dsb-conf", {"1.0.0": "ok", "1.1.0": "flaky", "1.2.0": "raise"})
    _counted_matrix(tmp_path, "dsb-conf")
    common = ["--case", "toy", "--regress-on", "any", *offline(house, cache_dir), "-q", "--format", "json"]
    # One run per point: 1.1.0's first run passes (the counter's odd run), so 1.2.0 is named.
    res = cli("bisect", "dsb-conf", "1.0.0", "1.2.0", *common, cwd=tmp_path)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["verdict"], out["last_good"], out["first_bad"]) == ("found", "1.1.0", "1.2.0")
    assert out["confirm"] is None

    # --confirm 2 runs the pair again: 1.1.0 hangs on its second run, so the answer does not stand.
    res = cli("bisect", "dsb-conf", "1.0.0", "1.2.0", "--confirm", "2", *common, cwd=tmp_path)
    assert res.exit_code == 1, res.output
    out = json.loads(res.stdout)
    assert out["verdict"] == "unconfirmed"
    conf = out["confirm"]
    assert conf["confirmed"] is False
    assert conf["last_good"] == {"point": "1.1.0", "agree": 1, "runs": 2, "as": "good"}
    assert conf["first_bad"] == {"point": "1.2.0", "agree": 2, "runs": 2, "as": "bad"}
    assert "not confirmed: last good 1.1.0 good in 1 of 2 runs" in res.stderr
    confirm_steps = {s["version"]: s for s in out["steps"] if s["stage"] == "confirm"}
    assert confirm_steps["1.1.0"]["counts"] == {"pass": 1, "hang": 1}
    assert confirm_steps["1.2.0"]["counts"] == {"fail": 2}


@pytest.mark.soak
def test_confirm_confirms_a_steady_boundary(tmp_path_factory, tmp_path, cli, cache_dir):
    # A steady boundary is confirmed: the recorded runs plus the ones it still needs.
    steady = _house(tmp_path_factory, "dsb-steady", {"1.0.0": "ok", "1.1.0": "ok", "1.2.0": "raise"})
    write_matrix(tmp_path, ["1.0.0"], package="dsb-steady", collective_timeout=3, nproc=1)
    res = cli("bisect", "dsb-steady", "1.0.0", "1.2.0", "--confirm", "2", "--case", "toy", "--regress-on", "fail",
              *offline(steady, cache_dir), "-q", "--format", "json",
              cwd=tmp_path)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["verdict"], out["first_bad"]) == ("found", "1.2.0")
    assert out["confirm"] == {"runs": 2, "confirmed": True,
                              "last_good": {"point": "1.1.0", "agree": 2, "runs": 2, "as": "good"},
                              "first_bad": {"point": "1.2.0", "agree": 2, "runs": 2, "as": "bad"}}
    table = cli("bisect", "dsb-steady", "1.0.0", "1.2.0", "--confirm", "2", "--case", "toy", "--regress-on", "fail",
                *offline(steady, cache_dir), "-q", cwd=tmp_path)
    assert "confirmed: last good 1.1.0 good in 2 of 2 runs; first bad 1.2.0 bad in 2 of 2 runs" in table.stdout


@pytest.mark.soak
def test_killed_bisect_resumes_from_the_store(tmp_path, cache_dir, wheelhouse):
    write_matrix(tmp_path, ["1.0.0"], collective_timeout=3)
    cmd = [sys.executable, "-m", "dsbisect", "bisect", "dsb-toy", "1.1.0", "1.4.0", "--case", "toy", *offline(wheelhouse, cache_dir),
           "-q", "--format", "json"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    db = tmp_path / ".dsbisect" / "dsbisect.sqlite3"
    done: list = []
    deadline = time.monotonic() + 600  # a guard: the loop ends at the event
    while time.monotonic() < deadline and len(done) < 2:
        if db.exists():
            try:
                with sqlite3.connect(db) as con:
                    done = con.execute("SELECT id FROM runs WHERE status='done'").fetchall()
            except sqlite3.OperationalError:  # the file is there, its tables not yet: look again
                pass
        time.sleep(0.2)
    assert len(done) >= 2
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    out = json.loads(res.stdout)
    assert out["first_bad"] == "1.3.0"
    used = {i for s in out["steps"] for i in s["run_ids"]}
    assert {i for (i,) in done} <= used  # what was recorded before the kill was reused


def test_commit_level_names_the_commit(tmp_path_factory, tmp_path, cli, cache_dir):
    repo = tmp_path_factory.mktemp("gittoy")
    git(repo, "init", "-q", "-b", "main")
    commit_toy(repo, "1.0.0", "ok", "release 1.0.0")
    git(repo, "tag", "v1.0.0")
    hashes = {}
    # A failure on one rank (hangs are the release-level tests' job): commits differ only in code.
    for i in range(1, 7):
        behaviour = "raise" if i >= 4 else "ok"
        subject = "Rank 0 raises in step (the bug)" if i == 4 else f"Harmless change {i}"
        hashes[i] = commit_toy(repo, "1.1.0", behaviour, subject)
    git(repo, "tag", "v1.1.0")
    house = _house(tmp_path_factory, "dsb-gittoy", {"1.0.0": "ok", "1.1.0": "raise"})
    write_matrix(tmp_path, ["1.0.0"], package="dsb-gittoy", collective_timeout=3, nproc=1)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(matrix.read_text().replace("defaults:\n", "defaults:\n  build_pins: []\n"))
    res = cli("bisect", "dsb-gittoy", "1.0.0", "1.1.0", "--case", "toy", "--git-repo", str(repo), "--offline",
              "--regress-on", "fail", "--find-links", str(house), "--cache-dir", str(cache_dir), "-q",
              "--format", "json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["first_bad"] == "1.1.0"
    assert out["commit"]["first_bad"] == hashes[4]
    assert out["commit"]["last_good"] == hashes[3]
    assert out["commit"]["subject"] == "Rank 0 raises in step (the bug)"
    assert out["commit"]["commits_in_range"] == 6
    commit_runs = [s for s in out["steps"] if s["stage"] == "commit"]
    assert len(commit_runs) <= math.ceil(math.log2(7)) + 2  # the two tags, built from source, are verified too


@pytest.mark.parametrize(
    "args, expected",
    [
        (["bisect", "no-such-toy", "1.0.0", "1.1.0", "--case", "toy"], "no-such-toy: no releases found"),
        (["bisect", "dsb-toy", "1.3.0", "1.1.0", "--case", "toy"], "good 1.3.0 is newer than bad 1.1.0"),
        (["bisect", "dsb-toy", "1.1.0", "1.1.0", "--case", "toy"], "good and bad are the same version"),
        (["bisect", "dsb-toy", "1.0.0", "9.9.9", "--case", "toy"], "dsb-toy==9.9.9 (bad end) is not on"),
        (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--case", "ghost"], "no case named 'ghost'"),
        (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--script", "missing.py"], "missing.py: no such script"),
        (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--case", "toy", "--pin", "dsb-toy==1.0.0"], "is the package being bisected"),
        (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--case", "toy", "--pin", "torch>>1"], "is not a requirement"),
        (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--case", "toy", "--git-repo", "nowhere"], "no such folder"),
        (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--case", "toy", "--deadline", "soon"], "give a duration such as 5h"),
        (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--case", "toy", "--max-runs", "4", "--confirm", "3"],
         "--confirm with --max-runs or --deadline"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, cli, wheelhouse, args, expected):
    write_matrix(tmp_path, ["1.0.0"])
    res = cli(*args, *offline(wheelhouse), "-q", cwd=tmp_path)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and expected in lines[0], res.output


def test_a_release_bisection_within_a_budget_ends_unfinished_and_goes_on(tmp_path, cli, cache_dir, wheelhouse):
    """--max-runs bounds a release search as it bounds a commit search: a budget that cannot
    hold the ends runs nothing; one that runs out mid-search answers ``unfinished`` (exit 75)
    with the releases left; the same command with the same store, no budget, goes on and reuses
    every run the budgeted ones made.  (A collective timeout of 30 s: a good release's ranks
    may start seconds apart on a loaded machine; the toy's deadlock is proven without it.)"""
    write_matrix(tmp_path, ["1.0.0"], collective_timeout=30)

    def bisect(*extra: str) -> tuple[int, dict, list]:
        res = cli("bisect", "dsb-toy", "1.0.0", "1.7.0", "--case", "toy", *offline(wheelhouse, cache_dir), "-q",
                  "--format", "json", *extra, cwd=tmp_path)
        out = json.loads(res.stdout)
        steps = [(s["version"], s["outcome"], s["detail"][:80]) for s in out["steps"]]
        return res.exit_code, out, steps

    code, out, steps = bisect("--max-runs", "1")
    assert code == 75, (out, steps)
    assert (out["verdict"], out["last_good"], out["first_bad"]) == ("unfinished", "1.0.0", None)
    assert out["maybe"] == [f"1.{i}.0" for i in range(1, 8)] and _runs(tmp_path) == []
    assert "the budget ran out (--max-runs 1: 0 runs made, the next step needs 2)" in out["message"]

    code, out, steps = bisect("--max-runs", "3")
    made = _runs(tmp_path)
    assert code == 75 and out["verdict"] == "unfinished" and 2 <= len(made) <= 3, steps
    assert "1.3.0" in out["maybe"] and out["last_good"] < "1.3.0" and len(out["maybe"]) < 7, steps
    assert "the same command with the same store goes on" in out["message"]

    code, out, steps = bisect()
    assert code == 0, steps
    assert (out["verdict"], out["last_good"], out["first_bad"]) == ("found", "1.2.0", "1.3.0"), steps
    ids = sorted(i for s in out["steps"] for i in s["run_ids"])
    assert ids[:len(made)] == sorted(r[0] for r in made) and len(_runs(tmp_path)) == len(ids)
