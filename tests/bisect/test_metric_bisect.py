"""Regressions as numbers end to end (issue 38): toy releases that differ in a reported loss and
in the memory each rank holds, bisected as real 2-rank jobs with ``--metric``; the numbers per
point in the JSON, the table and the Markdown; bad input one line and exit 2."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import toypkg
from conftest import write_matrix

LOSS = {"1.0.0": "loss1", "1.1.0": "loss1", "1.2.0": "loss2", "1.3.0": "loss2"}
SLOW = {"4.0.0": "ok", "4.1.0": "slow", "4.2.0": "slow"}
RAM = {"2.0.0": "ram", "2.1.0": "ram", "2.2.0": "ram256", "2.3.0": "ram256"}


def _bisect(cli, folder: Path, cache_dir, house, dist: str, good: str, bad: str, *extra):
    return cli("bisect", dist, good, bad, "--case", "toy", "--offline", "--find-links", str(house),
               "--cache-dir", str(cache_dir), "-q", *extra, cwd=folder)


@pytest.mark.slow
def test_a_loss_that_changes_is_bisected_to_its_release(tmp_path_factory, cli, cache_dir):
    house = toypkg.build_wheelhouse(tmp_path_factory.mktemp("dsb-loss"), LOSS, dist="dsb-loss")
    folder = tmp_path_factory.mktemp("loss")
    write_matrix(folder, ["1.0.0"], package="dsb-loss")
    res = _bisect(cli, folder, cache_dir, house, "dsb-loss", "1.0.0", "1.3.0",
                  "--metric", "loss@step5", "--worse-if", "differs by 1%", "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["verdict"], out["last_good"], out["first_bad"]) == ("found", "1.1.0", "1.2.0")
    nums = out["numbers"]
    assert nums["metric"] == "loss@step5" and nums["shape"] == "step"
    by = {p["label"]: p for p in nums["points"]}
    assert by["1.0.0"]["values"] == [1.5] * len(by["1.0.0"]["values"]) and by["1.3.0"]["median"] == 1.75
    assert by["1.3.0"]["call"] == "worse" and by["1.0.0"]["call"] == "not-worse"
    assert "loss@step5 1.5 → 1.75" in nums["answer"] and "at 1.2.0" in nums["answer"]
    # every existing key is still there; the steps' runs are the runs that gave the values
    assert {"verdict", "steps", "candidates", "regression", "proof", "confirm", "confidence"} <= set(out)
    assert sum(s["runs"] for s in out["steps"]) == nums["runs"]
    # the same from the printed lines, through the user's pattern: the recorded runs, read again
    md = _bisect(cli, folder, cache_dir, house, "dsb-loss", "1.0.0", "1.3.0", "--metric", "printed@step5",
                 "--worse-if", "differs by 1%", "--metric-pattern", r"step (?P<step>\d+) loss (?P<value>\S+)",
                 "--format", "markdown")
    assert md.exit_code == 0, md.output
    assert "| 1.2.0 | 1.75 " in md.stdout and "first bad release: dsb-loss 1.2.0" in md.stdout
    # the HTML report's answer for the bisection has the values per point too
    page = cli("report", "--format", "html", "-q", "-o", str(folder / "r.html"), cwd=folder)
    assert page.exit_code == 0, page.output
    assert "1.2.0: 1.75 (" in (folder / "r.html").read_text() and "), worse" in (folder / "r.html").read_text()
    # equal ends: not reproduced, with both values; a name no rank reports: untestable, said
    same = _bisect(cli, folder, cache_dir, house, "dsb-loss", "1.0.0", "1.1.0", "--metric", "loss@step5",
                   "--worse-if", "differs by 1%")
    assert same.exit_code == 1 and "not reproduced: within noise (good 1.5, bad 1.5)" in " ".join(same.output.split())
    none = _bisect(cli, folder, cache_dir, house, "dsb-loss", "1.0.0", "1.3.0", "--metric", "accuracy",
                   "--worse-if", "lower by 1%")
    said = " ".join(none.output.split())
    assert none.exit_code == 1 and "1.0.0: no rank reported accuracy; its runs reported" in said and "loss" in said


@pytest.mark.slow
def test_memory_each_rank_holds_is_measured_and_bisected(tmp_path_factory, cli, cache_dir, monkeypatch):
    """2.1.0's first run fails, as a run may on a loaded machine (once the full suite answered
    ambiguous here, 2.1.0 left out, in about as few runs as one of 2.1.0 takes): a failed run of a
    point is followed by one more before the point is untestable."""
    house = toypkg.build_wheelhouse(tmp_path_factory.mktemp("dsb-ram"), RAM, dist="dsb-ram")
    folder = tmp_path_factory.mktemp("ram")
    monkeypatch.setenv("DSB_TOY_FAIL_ONCE", f"2.1.0:{folder / 'failed-once'}")
    # no hang is asked about here: collectives that wait out a loaded machine
    write_matrix(folder, ["2.0.0"], package="dsb-ram", collective_timeout=120, timeout=600)
    res = _bisect(cli, folder, cache_dir, house, "dsb-ram", "2.0.0", "2.3.0",
                  "--metric", "peak_rss", "--worse-if", "higher by 20%", "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["verdict"], out["last_good"], out["first_bad"]) == ("found", "2.1.0", "2.2.0"), out["message"]
    (mid,) = [s for s in out["steps"] if s["version"] == "2.1.0"]
    assert mid["counts"]["fail"] == 1 and mid["counts"]["pass"] >= 1 and (folder / "failed-once").exists(), mid
    by = {p["label"]: p for p in out["numbers"]["points"]}
    assert out["numbers"]["unit"] == "B"
    assert by["2.3.0"]["median"] - by["2.0.0"]["median"] > 200e6  # 256 MiB more, in each rank
    # the run's own record keeps each rank's reading and the conditions it ran under
    run = out["steps"][0]["run_ids"][0]
    db = folder / ".dsbisect" / "dsbisect.sqlite3"
    evidence, facts = sqlite3.connect(db).execute("SELECT evidence, facts FROM runs WHERE id = ?", (run,)).fetchone()
    ranks = {r.get("rank") for r in json.loads(evidence)["readings"] if r["name"] == "peak_rss"}
    assert ranks == {0, 1} and "load_start" in json.loads(facts)["conditions"]


@pytest.mark.slow
def test_a_slower_release_is_found_by_wall_time_within_its_noise(tmp_path_factory, cli, cache_dir):
    """The one timing case: 12 s more a run (about 3x a run's wall here), judged with its noise
    (more runs where the runs cannot tell); the answer only, no timed assertion."""
    house = toypkg.build_wheelhouse(tmp_path_factory.mktemp("dsb-slow"), SLOW, dist="dsb-slow")
    folder = tmp_path_factory.mktemp("slow")
    write_matrix(folder, ["4.0.0"], package="dsb-slow")
    res = _bisect(cli, folder, cache_dir, house, "dsb-slow", "4.0.0", "4.2.0",
                  "--metric", "wall_time", "--worse-if", "higher by 50%", "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    busy = out["numbers"]["notes"]
    weak = any("timing verdicts are weak here" in n for n in busy)
    if out["verdict"] != "found":
        # On a loaded machine a run's start-up can swing by more than the 12 s (seen at load
        # 9-16: the good end's runs 13-36 s): then the answer must say it is unsure and why,
        # with the truth inside what it left open, and never name a release.
        assert out["verdict"] == "ambiguous" and weak, out["message"]
        assert out["last_good"] in (None, "4.0.0") and out["first_bad"] in (None, "4.1.0", "4.2.0"), out
        return
    assert (out["last_good"], out["first_bad"]) == ("4.0.0", "4.1.0"), out["message"]
    by = {p["label"]: p for p in out["numbers"]["points"]}
    # The answer rests on the step between levels: 4.1.0's runs pooled with 4.2.0's are surely
    # slower than the good end's. A point's own call weighs its runs alone against the good end's:
    # at load 10-15 (two suites side by side) 4.1.0's few runs could not tell, "unsure", though
    # the answer was right. Never "not worse": the first bad point is not judged like the good one.
    assert by["4.1.0"]["call"] in ("worse", "unsure"), by["4.1.0"]
    if by["4.1.0"]["call"] == "worse":
        assert by["4.0.0"]["median"] + 6 < by["4.1.0"]["median"], by
    assert busy == [] or weak


@pytest.mark.parametrize("extra, words", [
    (["--metric", "loss", "--worse-if", "faster by x"], "--worse-if 'faster by x'"),
    (["--metric", "lo ss", "--worse-if", "lower by 5%"], "a metric name is"),
    (["--metric", "loss"], "--metric and --worse-if go together"),
    (["--metric", "loss", "--worse-if", "lower by 100%"], "cannot get lower by 100 %"),
    (["--metric", "loss", "--worse-if", "lower by 5%", "--metric-pattern", "loss ("], "not a regular expression"),
    (["--metric", "loss", "--worse-if", "lower by 5%", "--metric-pattern", "loss (\\S+)"], "no group named value"),
    (["--metric", "loss", "--worse-if", "lower by 5%", "--confidence", "0.9"], "does not go with --confidence"),
    (["--metric", "loss", "--worse-if", "higher by 5%", "--find-fix"], "turn --worse-if round"),
])
def test_bad_metric_input_is_one_line_and_exit_2(cli, tmp_path, extra, words):
    script = tmp_path / "x.py"
    script.write_text("pass\n")
    res = cli("bisect", "dsb-toy", "1.0.0", "1.3.0", "--script", str(script), "--offline", *extra, cwd=tmp_path)
    assert res.exit_code == 2 and words in res.output and "Traceback" not in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / ".dsbisect").exists()
