"""The bisection's result types: to_json is `bisect --format json`, from_json reads any version back.

Round trips on real outputs: the committed docs/results/*.json and docs/results/zoo-runs/*.json
(outputs of older dsbisect versions, with fewer keys), the result column of the committed
stores of the GPU sessions, and a toy bisection run here (slow) down to the commit, its revert
proof and --confirm.  Plus: unknown keys are passed over, missing ones take their defaults, a
step's tally comes from its runs, and the one worst-outcome order.
"""

from __future__ import annotations

import itertools
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import make_case

from dsbisect.records.run import Evidence
from dsbisect.render import grid
from dsbisect.core.mode import Mode
from dsbisect.core.model import WORST_FIRST, Answer, Outcome, Point, RegressOn, Stage, Verdict, worst
from dsbisect.records.proof import Proof, ProofVerdict
from dsbisect.records import migrate
from dsbisect.records.results import Recorded, Request, Result, Step
from dsbisect.store.store import Store

DOCS = Path(__file__).resolve().parents[2] / "docs" / "results"
OUTPUTS = sorted(p for p in [*DOCS.glob("*.json"), *DOCS.glob("zoo-runs/*.json")]
                 if isinstance(json.loads(p.read_text()), dict) and "steps" in json.loads(p.read_text()))
STORES = sorted((DOCS / "stores").glob("*.sqlite3"))


def _release_results(out: dict) -> list[dict]:
    """The release bisections of an output: itself, or an environment bisection's per culprit."""
    return list(out["releases"]) if out.get("kind") == "environment" else [out]


def _covers(new, old, where: str = "") -> None:
    """``new`` has every key of ``old`` with the same value (an older output has fewer keys)."""
    if isinstance(old, dict):
        assert isinstance(new, dict), where
        for k, v in old.items():
            assert k in new, f"{where}/{k} is lost"
            _covers(new[k], v, f"{where}/{k}")
    elif isinstance(old, list):
        assert isinstance(new, list) and len(new) == len(old), where
        for i, (a, b) in enumerate(zip(new, old)):
            _covers(a, b, f"{where}[{i}]")
    else:
        assert new == old, f"{where}: {new!r} != {old!r}"


def _round_trip(out: dict) -> None:
    back = Result.from_json(out)
    again = back.to_json()
    _covers(again, out)
    assert Result.from_json(again) == back
    if set(again) == set(out) and all(set(s) == set(a) for s, a in zip(out["steps"], again["steps"])):
        assert again == migrate.result(out)  # an output of this version (its older parts lifted): key for key


def test_the_committed_outputs_cover_old_and_current_versions():
    assert len(OUTPUTS) >= 20 and len(STORES) == 2
    versions = {frozenset(r) for p in OUTPUTS for r in _release_results(json.loads(p.read_text()))}
    assert len(versions) >= 3  # outputs of several dsbisect versions, not one shape


@pytest.mark.parametrize("path", OUTPUTS, ids=lambda p: p.name)
def test_committed_outputs_read_back_and_write_the_same_json(path):
    out = json.loads(path.read_text())
    for r in _release_results(out):
        _round_trip(r)
    recorded = Recorded.from_json(out)
    assert [s.to_json() for s in recorded.steps] == [_with_manual(s) for s in out["steps"]]
    assert recorded.verdict is Answer(out["verdict"])
    assert recorded.environment is (out.get("kind") == "environment")
    if recorded.environment:
        assert recorded.culprits == tuple(out["env_diff"]["culprits"])
        assert [a.request.package for a in recorded.answers] == [r["package"] for r in out["releases"]]


def test_an_environment_bisections_trials_and_confounders_read_back():
    from dsbisect.records.results import Confounder, TrialRun

    envs = [json.loads(p.read_text()) for p in OUTPUTS if json.loads(p.read_text()).get("kind") == "environment"]
    assert envs
    for out in envs:
        trials = out["env_diff"]["ends"] + out["env_diff"]["trials"]
        assert trials and all(TrialRun.from_json(t).to_json() == t for t in trials)
        assert all(isinstance(TrialRun.from_json(t).outcome, Outcome) for t in trials)
        assert all(Confounder.from_json(c).to_json() == c for c in out["confounders"])
    made = Confounder("dsb-a", "1.2", ("c 1.0 -> 2.0",), "uv: no solution")
    assert Confounder.from_json(made.to_json() | {"later": 1}) == made


def _with_manual(step: dict) -> dict:
    return {"manual": False} | step  # an older step has no "manual": read back, it was not marked by hand


@pytest.mark.parametrize("path", STORES, ids=lambda p: p.name)
def test_old_stores_result_column_reads_back(tmp_path, path):
    copy = tmp_path / "dsbisect.sqlite3"
    shutil.copy(path, copy)
    with sqlite3.connect(copy) as con:
        rows = con.execute("SELECT status, result FROM bisections").fetchall()
    assert rows
    for status, text in rows:
        out = json.loads(text)
        _round_trip(out)
        back = Result.from_json(out)
        assert status == "done" and back.verdict is Answer(out["verdict"]) and back.steps


OLD_ANSWERS = {  # what `dsbisect log` says of the committed stores' bisections (as main said it before results.py)
    "ff21480344b2c7cb": "# answer: last good 0.12.3, first bad 0.12.4, first bad commit 2afa1c7f2f Communication "
                        "Optimization for Large-Scale Training (#4695)",
    "b1dc43688309ac3b": None,  # not reproduced: no answer line
    "384d4b5038e236c8": "# answer: last good 4.36.2, first bad 4.37.0",
    "c36b1d076da92350": "# answer: last broken 0.9.5, first fixed 0.10.0, first fixed commit f8551b439e Fix racing "
                        "condition in GatheredParameters (#3819)",
}


def test_log_reads_the_bisections_of_old_stores(tmp_path, cli):
    """The GPU sessions' stores (an older dsbisect): each bisection's log names its answer and
    one mark line per run, with the step's stage for commit steps."""
    seen = {}
    for path in STORES:
        store = tmp_path / path.stem
        store.mkdir()
        shutil.copy(path, store / "dsbisect.sqlite3")
        with sqlite3.connect(store / "dsbisect.sqlite3") as con:
            con.row_factory = sqlite3.Row
            rows = [dict(r) for r in con.execute("SELECT * FROM bisections")]
        (store / "bisections").mkdir()
        for row in rows:  # the folder form the store keeps beside the index
            row |= {"params": json.loads(row["params"]), "result": json.loads(row["result"])}
            (store / "bisections" / f"{row['key']}.json").write_text(json.dumps(row))
        for row in rows:
            res = cli("log", row["key"], "--store", str(store), cwd=tmp_path)
            assert res.exit_code == 0, res.output
            lines = res.stdout.splitlines()
            seen[row["key"]] = next((ln for ln in lines if ln.startswith("# answer:")), None)
            ran = {i for s in row["result"]["steps"] for i in s["run_ids"]}
            assert len([ln for ln in lines if ln.startswith("dsbisect mark ")]) == len(ran)
            assert f"(done: {row['result']['verdict']})" in lines[0]
    assert seen == OLD_ANSWERS


def test_unknown_keys_are_passed_over_and_missing_ones_defaulted():
    out = json.loads(next(p for p in OUTPUTS if "zoo-runs" in str(p)).read_text())
    noisy = out | {"from_the_future": {"x": 1}, "commit": (out["commit"] or {}) | {"new": 1},
                   "steps": [s | {"new_key": [1, 2]} for s in out["steps"]]}
    assert Result.from_json(noisy) == Result.from_json(out)
    empty = Result.from_json({})
    assert (empty.verdict, empty.steps, empty.commit, empty.regression) == (Answer.UNTESTABLE, (), None, None)
    step = Step.from_json({"stage": "commit", "commit": "a" * 40, "verdict": "bad"})
    assert (step.label, step.outcome, step.tally.run_ids, step.detail) == ("a" * 10, Outcome.SKIP, (), "")
    running = Recorded.from_json({"candidates": ["1.0", "1.1"], "steps": [out["steps"][0]]})
    assert running.verdict is None and len(running.steps) == 1 and not running.environment
    assert (running.answers[0].candidates, running.answers[0].first_bad) == (("1.0", "1.1"), None)  # so far


def _run(st: Store, version: str, outcome: Outcome, seconds: float = 1.0, **kw):
    rid = st.start_run("c", "key-c", Point(versions=(("dsb-toy", version),)), "env", 1)
    return st.finish_run(rid, outcome, None, seconds, **kw)


def test_a_steps_tally_is_counted_from_its_runs(tmp_path):
    st = Store(tmp_path / "store")
    runs = (_run(st, "1.0", Outcome.PASS, reason="ok"), _run(st, "1.0", Outcome.HANG, 2.5, signature="rank 0 in all_reduce"),
            _run(st, "1.0", Outcome.FAIL, reason="boom"), _run(st, "1.0", Outcome.PASS, evidence=Evidence.from_json({"manual": "good"})))
    step = Step(Stage.RELEASE, "1.0", "1.0", None, "", Verdict.BAD, runs)
    assert step.outcome is Outcome.HANG and step.seconds == 5.5
    assert step.detail == "rank 0 in all_reduce"  # the first run that did not pass
    assert step.tally.counts == ((Outcome.PASS, 2), (Outcome.FAIL, 1), (Outcome.HANG, 1))
    assert step.tally.run_ids == tuple(r.id for r in runs) and step.tally.manual
    j = step.to_json()
    assert j == {"stage": "release", "version": "1.0", "commit": None, "subject": "", "verdict": "bad",
                 "outcome": "hang", "runs": 4, "counts": {"pass": 2, "fail": 1, "hang": 1},
                 "run_ids": [r.id for r in runs], "seconds": 5.5, "detail": "rank 0 in all_reduce", "manual": True}
    assert Step.from_json(j).to_json() == j and Step.from_json(j).runs == ()
    passed = Step(Stage.RELEASE, "1.1", "1.1", None, "", Verdict.GOOD, (_run(st, "1.1", Outcome.PASS, reason="fine"),))
    assert (passed.outcome, passed.detail, passed.tally.manual) == (Outcome.PASS, "fine", False)
    assert Step(Stage.RELEASE, "1.2", "1.2", None, "", Verdict.SKIP).outcome is Outcome.SKIP  # no run


def test_one_worst_outcome_order_for_a_step_and_a_grid_cell(tmp_path):
    """A hang is worse than a failure, a failure than a pass; a skip says the least.  The grid's
    cell and the bisection's step take the same outcome for the same runs, for every mix."""
    assert WORST_FIRST == (Outcome.HANG, Outcome.FAIL, Outcome.PASS, Outcome.SKIP)
    assert grid.RANK == {o: WORST_FIRST.index(o) for o in Outcome}
    st = Store(tmp_path / "store")
    made = {o: _run(st, "1.0", o) for o in Outcome}
    for n in range(1, 5):
        for mix in itertools.combinations(list(Outcome), n):
            runs = tuple(made[o] for o in mix)
            step = Step(Stage.RELEASE, "1.0", "1.0", None, "", Verdict.SKIP, runs)
            assert step.outcome is grid.cell(list(runs)).outcome is worst(mix) is min(mix, key=WORST_FIRST.index)
    assert worst([]) is Outcome.SKIP and worst([None, Outcome.PASS]) is Outcome.PASS


def test_a_result_with_every_part_writes_the_json_it_reads(tmp_path):
    from dsbisect.verdict.identity import Identity
    from dsbisect.records.results import Agreement, CommitResult, Confirmation, Regression

    st = Store(tmp_path / "store")
    req = Request("dsb-toy", "1.0", "1.2", make_case(tmp_path, "c"), pins=("a==1",), regress_on=RegressOn.AUTO,
                  mode=Mode.FIND_FIX, signature="boom")
    steps = (Step(Stage.RELEASE, "1.0", "1.0", None, "", Verdict.BAD, (_run(st, "1.0", Outcome.FAIL, reason="boom"),)),
             Step(Stage.COMMIT, "abcdef0123", "1.2", "abcdef0123" * 4, "Fix", Verdict.GOOD,
                  (_run(st, "1.2", Outcome.PASS),)))
    ident = Identity(Outcome.FAIL, "ValueError", "boom <n>", ("a.py:f",), "ValueError: boom 3")
    result = Result(req, ("1.0", "1.1", "1.2"), steps, Answer.UNCONFIRMED, "1.1", "1.2", ("1.2",), "flaky",
                    CommitResult("1" * 40, "2" * 40, "Fix", ("2" * 40,), 7, Answer.FOUND), "note",
                    Confirmation(2, (Agreement("last broken", "1.1", "bad", 2, 2),
                                     Agreement("first fixed", "1.2", "good", 1, 2))),
                    "walked back", ("1.1.1 (yanked)",),
                    Proof("2" * 40, "v1.2", "3" * 40, ProofVerdict.PROVEN, Mode.FIND_FIX, False, Outcome.FAIL, 2, 2,
                          run_ids=(5, 6)),
                    Regression(RegressOn.FAIL, ident, "1.0", "broken end", RegressOn.AUTO), ("1.1 failed differently",))
    j = result.to_json()
    assert list(j) == ["package", "good", "bad", "mode", "regress_on", "regression", "different", "signature_filter",
                       "case", "pins", "candidates", "steps", "verdict", "message", "last_good", "first_bad",
                       "maybe", "commit", "commit_message", "good_end", "caveats", "confirm", "proof", "confidence"]
    assert j["confidence"] is None  # no --confidence
    assert j["confirm"] == {"runs": 2, "confirmed": False, "last_broken": {"point": "1.1", "agree": 2, "runs": 2,
                                                                         "as": "bad"},
                            "first_fixed": {"point": "1.2", "agree": 1, "runs": 2, "as": "good"}}
    assert (j["regress_on"], j["mode"], j["commit"]["commits_in_range"]) == ("fail", "find-fix", 7)
    back = Result.from_json(json.loads(json.dumps(j)))
    assert back.to_json() == j
    assert (back.proof, back.regression, back.confirm, back.commit) == (result.proof, result.regression,
                                                                        result.confirm, result.commit)
    assert back.request.regress_on is RegressOn.AUTO and back.request.mode is Mode.FIND_FIX and back.request.case.name == "c"


def test_a_confidence_figure_reads_back(tmp_path):
    from dataclasses import replace

    from dsbisect.search.bayes import Status
    from dsbisect.search.confidence import Confidence

    req = Request("dsb-toy", "1.0", "1.3", make_case(tmp_path, "c"), confidence=0.9)
    fig = Confidence(0.9, Stage.RELEASE, Status.SURE, 0.9167, 12, 0.75, "1.1", "1.2", ("1.2",))
    result = Result(req, ("1.0", "1.1", "1.2", "1.3"), (), Answer.FOUND, "1.1", "1.2", ("1.2",), confidence=(fig,))
    j = json.loads(json.dumps(result.to_json()))
    assert j["confidence"]["asked"] == 0.9 and j["confidence"]["release"]["probability"] == 0.9167
    assert j["confidence"]["commit"] is None
    back = Result.from_json(j)
    assert back.confidence == (fig,) and back.request.confidence == 0.9 and back.to_json() == j
    odd = {**j, "confidence": {"asked": 0.9, "release": {"stage": "nowhere"}}}
    assert Result.from_json(odd).confidence == () and replace(result, confidence=()).request.confidence == 0.9


@pytest.mark.slow
def test_a_toy_bisection_to_the_commit_reads_back_as_it_was_written(tmp_path, cli, cache_dir, scratch_tmp):
    """Release, commit, revert proof and --confirm: stdout's JSON, the result column and `log`."""
    from test_revert_proof import _bisect, history

    h = history(tmp_path / "clone", "clean")
    _, res = _bisect(cli, tmp_path, cache_dir, tmp_path / "clone", "--confirm", "2")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["commit"]["first_bad"] == h["bug"] and out["proof"]["verdict"] == "proven"
    assert out["confirm"]["confirmed"] and out["regression"] is not None
    assert {s["stage"] for s in out["steps"]} == {"release", "commit", "confirm", "prove"}
    assert Result.from_json(out).to_json() == out  # exactly, key for key
    with sqlite3.connect(tmp_path / ".dsbisect" / "dsbisect.sqlite3") as con:
        (column,) = con.execute("SELECT result FROM bisections").fetchone()
    assert json.loads(column) == out and Result.from_json(json.loads(column)).to_json() == out
    log = cli("log", cwd=tmp_path)
    assert log.exit_code == 0, log.output
    assert f"# answer: last good 1.0.0, first bad 1.1.0, first bad commit {h['bug'][:10]}" in log.stdout
    assert "the revert proof" in log.stdout and "(confirm " in log.stdout


@pytest.fixture
def scratch_tmp(tmp_path, monkeypatch):
    import tempfile

    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return folder


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_JSONS = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
                      lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
                      max_leaves=6)
_KEYS = ["verdict", "mode", "regress_on", "steps", "candidates", "commit", "confirm", "proof", "regression", "maybe",
         "last_good", "kind", "env_diff", "releases", "steps.0", "steps.0.outcome", "steps.0.run_ids", "steps.0.counts",
         "steps.0.seconds", "steps.0.stage", "commit.commits_in_range", "confirm.last_good", "proof.run_ids",
         "regression.failure", "regression.kind"]


@settings(max_examples=80, deadline=None)
@given(key=st.sampled_from(_KEYS), value=_JSONS, env=st.booleans())
def test_no_value_in_a_recorded_result_breaks_reading_it(key, value, env):
    """An odd record (hand-edited, truncated, of a version to come) reads back: what is not
    what it should be takes its default, nothing raises."""
    out = json.loads(next(p for p in OUTPUTS if "zoo-runs" in str(p)).read_text())
    out |= {"confirm": {"runs": 2, "last_good": {"point": "1", "agree": 2, "runs": 2, "as": "good"}},
            "proof": {"commit": "a", "verdict": "proven", "run_ids": [1]},
            "regression": {"kind": "fail", "failure": {"kind": "fail", "message": "x"}}}
    inner, *path = key.split(".")
    holder = out
    for k in [inner, *path][:-1]:
        holder = holder[int(k)] if isinstance(holder, list) else holder.setdefault(k, {})
    last = [inner, *path][-1]
    holder[int(last) if isinstance(holder, list) else last] = value
    if env:
        out = {"kind": "environment", "verdict": "found", "env_diff": {"culprits": ["a"]}, "releases": [out],
               "steps": out.get("steps")}
    recorded = Recorded.from_json(out)
    for r in recorded.answers:
        Result.from_json(r.to_json())
    assert all(isinstance(s.tally.run_ids, tuple) for s in recorded.steps)
