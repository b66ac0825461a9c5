"""--confidence end to end: a flaky toy regression (rank 0 fails now and then from 1.3.0 on),
bisected as a real job, one rank without a launcher; the figure in the JSON and the report."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import toypkg
from conftest import write_matrix
from test_revert_proof import _bisect as _proof_bisect, history, scratch_tmp  # noqa: F401 (a fixture)

from dsbisect.search.confidence import Confidence, ends_problem, proof_runs
from dsbisect.search.bayes import Status
from dsbisect.core.mode import Mode
from dsbisect.core.model import Answer, Outcome, Stage

RANGE = {"1.0.0": "ok", "1.1.0": "ok", "1.2.0": "ok", "1.3.0": "flakyfail", "1.4.0": "flakyfail",
         "1.5.0": "flakyfail"}
SEED = "15"  # the toy's draws (the same every time): 1.3.0 passes its first run, as a single-run search would be fooled by


def _bisect(cli, folder: Path, cache_dir, house, *extra):
    return cli("bisect", "dsb-flaky", "1.0.0", "1.5.0", "--case", "toy", "--offline", "--find-links", str(house),
               "--cache-dir", str(cache_dir), "-q", *extra, cwd=folder)


@pytest.mark.slow
def test_a_flaky_toy_regression_is_found_with_its_figure(tmp_path_factory, cli, cache_dir):
    house = toypkg.build_wheelhouse(tmp_path_factory.mktemp("dsb-flaky"), RANGE, dist="dsb-flaky")
    folder = tmp_path_factory.mktemp("flaky")
    (folder / "draws").mkdir()
    env = f'env: {{OMP_NUM_THREADS: "1", DSB_TOY_DRAWS: "{folder / "draws"}", DSB_TOY_SEED: "{SEED}", DSB_TOY_RATE: "0.6"}}'
    matrix = write_matrix(folder, ["1.0.0"], package="dsb-flaky", collective_timeout=3, nproc=1)
    matrix.write_text(matrix.read_text().replace('env: {OMP_NUM_THREADS: "1"}', env))
    res = _bisect(cli, folder, cache_dir, house, "--confidence", "0.9", "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["verdict"], out["last_good"], out["first_bad"]) == ("found", "1.2.0", "1.3.0")
    conf = out["confidence"]
    assert conf["asked"] == 0.9 and conf["commit"] is None
    rel = conf["release"]
    assert rel["sure"] and rel["status"] == "sure" and rel["probability"] >= 0.9
    assert (rel["last_good"], rel["first_bad"], rel["maybe"]) == ("1.2.0", "1.3.0", ["1.3.0"])
    runs = [(s["version"], s["outcome"]) for s in out["steps"]]
    assert rel["runs"] == len(runs) == sum(s["runs"] for s in out["steps"])  # one run per probe
    bad = [o for v, o in runs if v >= "1.3.0"]
    assert "pass" in bad, runs  # the toy was flaky: a single-run search could have been fooled
    assert all(o == "pass" for v, o in runs if v < "1.3.0")
    assert rel["failure_rate"] == pytest.approx(bad.count("fail") / len(bad), abs=1e-4)
    assert rel["sentence"] == (f"first bad 1.3.0 with probability {rel['probability']:.2f} ({len(runs)} runs; "
                               f"bad points failed {round(100 * rel['failure_rate'])} % of the time, good points never)")
    assert out["regression"]["identity"].startswith("FAIL ValueError: dsb_toy: the loss went NaN (now and then)")
    # the existing keys are all there, unchanged in kind
    assert {"verdict", "steps", "candidates", "regression", "different", "proof", "confirm"} <= set(out)

    # again: the recorded runs are the evidence (nothing runs), and the table says the sentence
    db = folder / ".dsbisect" / "dsbisect.sqlite3"
    assert db.is_file()
    before = sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    table = _bisect(cli, folder, cache_dir, house, "--confidence", "0.9", "--format", "table")
    assert table.exit_code == 0, table.output
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone()[0] == before == len(runs)
    assert rel["sentence"] in " ".join(table.stdout.split())
    md = _bisect(cli, folder, cache_dir, house, "--confidence", "0.9", "--format", "markdown")
    assert f"- {rel['sentence']}" in md.stdout


def test_bad_confidence_input_is_one_line_and_exit_2(cli, tmp_path):
    script = tmp_path / "x.py"
    script.write_text("pass\n")
    for extra, words in ((["--confidence", "0.5"], "between 0.5 and 1"), (["--confidence", "1.2"], "between 0.5 and 1"),
                         (["--confidence", "0.9", "--repeat", "5"], "--confidence and --repeat do not go together"),
                         (["--confidence", "0.9", "--confirm", "3"], "--confidence and --confirm"),):
        res = cli("bisect", "dsb-toy", "1.0.0", "1.3.0", "--script", str(script), "--offline", *extra, cwd=tmp_path)
        assert res.exit_code == 2 and words in res.output and "Traceback" not in res.output, res.output
        assert not (tmp_path / ".dsbisect").exists()
    res = cli("bisect", "dsb-toy", "auto", "1.3.0", "--script", str(script), "--confidence", "0.9", cwd=tmp_path)
    assert res.exit_code == 2 and "needs a GOOD release" in res.output


def test_the_sentence_and_the_ends():
    c = Confidence(0.95, Stage.RELEASE, Status.SURE, 0.9712, 17, 0.68, "1.3.0", "1.4.0", ("1.4.0",))
    assert c.describe() == "first bad 1.4.0 with probability 0.97 (17 runs; bad points failed 68 % of the time, " \
                           "good points never)"
    capped = Confidence(0.95, Stage.RELEASE, Status.CAPPED, 0.81, 66, 0.4, "1.3.0", "1.4.0", ("1.4.0",))
    assert capped.describe() == ("most likely first bad 1.4.0 with probability 0.81; not sure (66 runs, the cap; "
                                 "bad points failed 40 % of the time, good points never; asked for 0.95)")
    fix = Confidence(0.9, Stage.RELEASE, Status.SURE, 0.9996, 9, 0.5, "2.0", "2.2", ("2.1", "2.2"), Mode.FIND_FIX)
    assert fix.describe() == ("first fixed one of 2.1, 2.2 (untestable points between 2.0 and 2.2) with probability "
                              "0.99 (9 runs; broken points failed 50 % of the time, fixed points never)")
    steps = (("ValueError: x", Outcome.FAIL), ("", Outcome.HANG))
    assert ends_problem(Status.NOT_REPRODUCED, Mode.REGRESSION, ("1.5", "1.0"), steps, {}, 16) == (
        Answer.NOT_REPRODUCED, "1.5 (the bad end) passed 16 of 16 runs: the regression does not reproduce here")
    assert ends_problem(Status.OTHER_END_FAILS, Mode.REGRESSION, ("1.5", "1.0"), steps, {}, 3) == (
        Answer.GOOD_END_BAD, "1.0 (the good end) also hung; widen the range")
    assert ends_problem(Status.FLAKY_END_SKIP, Mode.REGRESSION, ("1.5", "1.0"), steps, {}, 1) == (
        Answer.UNTESTABLE, "1.5 (the bad end) could not be tested: ValueError: x")
    assert ends_problem(Status.SURE, Mode.REGRESSION, ("1.5", "1.0"), steps, {}, 4) is None
    # the revert proof runs until a still-flaky tree would have failed with probability P
    assert proof_runs((c,)) == 3 and proof_runs(()) == 0  # 0.32 ** 3 < 0.05


@pytest.mark.slow
@pytest.mark.soak  # ~200 s on 2 cores: the commit stage runs the same _flaky search the release test drives
def test_the_commit_stage_of_a_confidence_search(tmp_path, cli, cache_dir, scratch_tmp):
    """--confidence with --git-repo: the commits are searched the same way (the proof's run count
    under --confidence is test_the_sentence_and_the_ends')."""
    repo = tmp_path / "clone"
    h = history(repo, "clean")
    args, res = _proof_bisect(cli, tmp_path, cache_dir, repo, "--confidence", "0.9", "--no-prove")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["verdict"] == "found" and out["commit"]["first_bad"] == h["bug"]
    conf = out["confidence"]
    assert conf["release"]["first_bad"] == "1.1.0" and conf["commit"]["first_bad"] == h["bug"][:10]
    assert conf["commit"]["sure"] and conf["commit"]["failure_rate"] == 1.0
    assert out["proof"] is None
