"""What "the regression" is, end to end over toy releases: --regress-on auto learns it from the
bad end, a probe that fails differently is stepped around, and one deadlock has one identity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import toypkg
from conftest import offline, write_matrix

from dsbisect.verdict.identity import Rule
from dsbisect.core.model import RegressOn, Verdict
from dsbisect.store.store import Store

pytestmark = pytest.mark.slow

# 1.1.0 fails with an unrelated AttributeError; the regression (a RuntimeError whose message
# begins with a newline) arrives in 1.3.0.  Four points: the search probes 1.1.0 first.
RANGE = {"1.0.0": "ok", "1.1.0": "other", "1.2.0": "ok", "1.3.0": "newline"}


def _bisect(cli, folder: Path, cache_dir, house, *extra):
    write_matrix(folder, ["1.0.0"], package="dsb-other", collective_timeout=3, nproc=1)
    return cli("bisect", "dsb-other", "1.0.0", "1.3.0", "--case", "toy", *offline(house, cache_dir),
               "-q", "--format", "json", *extra, cwd=folder)


def test_an_unrelated_failure_inside_the_range_does_not_move_the_answer(tmp_path_factory, cli, cache_dir):
    house = toypkg.build_wheelhouse(tmp_path_factory.mktemp("dsb-other"), RANGE, dist="dsb-other")
    folder = tmp_path_factory.mktemp("auto")
    res = _bisect(cli, folder, cache_dir, house)  # no --regress-on: auto
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["verdict"], out["last_good"], out["first_bad"]) == ("found", "1.2.0", "1.3.0")
    assert out["regress_on"] == "fail"
    reg = out["regression"]
    assert (reg["kind"], reg["asked"], reg["learned_from"]) == ("fail", "auto", "1.3.0")
    # the reason reads: the first non-empty line of a message that begins with a newline
    assert reg["identity"] == "FAIL RuntimeError: Output 0 of SplitBackward0 is a view and is being " \
                              "modified inplace (step 7). at dsb_toy/__init__.py:step"
    assert reg["failure"]["frames"] == ["dsb_toy/__init__.py:step"]
    assert reg["failure"]["message"] == "Output <n> of SplitBackward0 is a view and is being modified inplace (step <n>)."
    assert out["different"] == ["1.1.0 failed differently (AttributeError: module 'torch._C' has no attribute "
                                "'_cuda_setDevice' at dsb_toy/__init__.py:step): not counted; --any-failure counts it"]
    steps = {s["version"]: s for s in out["steps"]}
    assert (steps["1.1.0"]["outcome"], steps["1.1.0"]["verdict"]) == ("fail", "skip")
    assert steps["1.3.0"]["detail"].startswith("RuntimeError: Output 0 of SplitBackward0")

    table = _bisect(cli, folder, cache_dir, house, "--format", "table")  # from the store
    text = " ".join(table.stdout.split())
    assert "the regression: FAIL RuntimeError: Output 0 of SplitBackward0 is a view" in text
    assert "(learned from 1.3.0, the bad end)" in text and "1.1.0 failed differently (AttributeError" in text

    # --any-failure: today's rule, and today's (wrong) answer, from the same recorded runs
    again = tmp_path_factory.mktemp("any")
    res = _bisect(cli, again, cache_dir, house, "--any-failure")
    out = json.loads(res.stdout)
    assert (out["verdict"], out["last_good"], out["first_bad"]) == ("found", "1.0.0", "1.1.0")
    assert out["different"] == [] and out["regression"]["identity"] is None

    # dsbisect log replays the same rule (RunRecord.verdict is Probe.verdict's rule)
    log = cli("log", "--store", str(folder / ".dsbisect"), cwd=folder)
    assert log.exit_code == 0, log.output
    marks = {ln.split("dsb-other==")[1].split()[0]: ln.split()[2] for ln in log.stdout.splitlines()
             if ln.startswith("dsbisect mark")}
    assert marks == {"1.0.0": "good", "1.1.0": "skip", "1.2.0": "good", "1.3.0": "bad"}


def test_auto_counts_a_crash_where_an_explicit_hang_rule_does_not(tmp_path_factory, cli, cache_dir):
    """--regress-on hang on a crashing bad end is still the user's explicit choice."""
    house = toypkg.build_wheelhouse(tmp_path_factory.mktemp("dsb-crash"), {"1.0.0": "ok", "1.1.0": "raise"},
                                    dist="dsb-crash")
    folder = tmp_path_factory.mktemp("crash")
    write_matrix(folder, ["1.0.0"], package="dsb-crash", collective_timeout=3, nproc=1)
    args = ["bisect", "dsb-crash", "1.0.0", "1.1.0", "--case", "toy", *offline(house, cache_dir),
            "-q", "--format", "json"]
    res = cli(*args, "--regress-on", "hang", cwd=folder)
    assert res.exit_code == 1 and json.loads(res.stdout)["verdict"] == "untestable"
    res = cli(*args, cwd=folder)
    out = json.loads(res.stdout)
    assert res.exit_code == 0, res.output
    assert (out["verdict"], out["first_bad"], out["regression"]["kind"]) == ("found", "1.1.0", "fail")


def test_one_toy_deadlock_has_one_identity_early_and_at_the_timeout(toy_deadlock, toy_timeout_hang):
    """The "skip" toy (rank 1 skips the all_reduce), proven early (at a 300 s collective timeout),
    and again at the collective timeout (6 s) with --no-early-hang: two signature texts, one
    identity, one --signature match. (The session's two runs of it, which other tests read too.)"""
    runs = []
    for toy in (toy_deadlock, toy_timeout_hang):
        run = toy.run
        assert run["outcome"] == "hang"
        runs.append(Store(toy.store).run(run["id"]))
    early, late = runs
    assert early.signature != late.signature  # each rule words it its own way
    assert "ALLREDUCE" in early.signature and "all_reduce" in late.signature
    a, b = early.identity(), late.identity()
    assert a.message == b.message == "rank 0 in ALLREDUCE, rank 1 in BARRIER"
    assert a.describe() == b.describe()
    for wanted in ("ALLREDUCE", "all_reduce"):
        rule = Rule(RegressOn.HANG, wanted)
        assert early.verdict(rule) is late.verdict(rule) is Verdict.BAD
    assert late.verdict(Rule(RegressOn.HANG, None, a)) is Verdict.BAD


def test_stepping_around_a_different_failure_that_leaves_the_boundary_open_is_ambiguous(tmp_path_factory, cli,
                                                                                          cache_dir):
    house = toypkg.build_wheelhouse(tmp_path_factory.mktemp("dsb-amb"),
                                    {"1.0.0": "ok", "1.1.0": "other", "1.2.0": "newline"}, dist="dsb-amb")
    folder = tmp_path_factory.mktemp("amb")
    write_matrix(folder, ["1.0.0"], package="dsb-amb", collective_timeout=3, nproc=1)
    res = cli("bisect", "dsb-amb", "1.0.0", "1.2.0", "--case", "toy", *offline(house, cache_dir),
              "-q", "--format", "json", cwd=folder)
    out = json.loads(res.stdout)
    assert (out["verdict"], out["last_good"], out["maybe"]) == ("ambiguous", "1.0.0", ["1.1.0", "1.2.0"])
    assert "1.1.0 failed differently (AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'" \
        in out["message"]  # the reason, never a silent guess
