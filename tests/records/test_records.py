"""records: what a run and a bisection leave behind, typed, read and written as the store keeps them."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
import toypkg
from conftest import _cuda_gpus, write_matrix
from hypothesis import given, settings
from hypothesis import strategies as st

from dsbisect.verdict.identity import Rule
from recorded import learned, record as _record
from dsbisect.core.model import Outcome, RegressOn, Verdict
from dsbisect.records.bisections import AskedFor, BisectionRecord, BisectionStatus
from dsbisect.records.run import Evidence, Host, InputFile, Manual, RunFacts, SkipCause
from dsbisect.store.store import Store

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                    max_leaves=8)
KEYS = st.sampled_from([*Evidence.SHAPES, *RunFacts.SHAPES, "error", "replayed", "newer_key"])


# ------------------------------------------------------------------ JSON both ways


@settings(max_examples=40, deadline=None)
@given(data=st.dictionaries(KEYS, JSON, max_size=8))
def test_any_json_object_reads_and_writes_back_the_same_keys_in_the_same_order(data):
    """Known keys of their shape become fields, anything else (an unknown key, a known key of
    another shape, null) is kept in extra: to_json gives back exactly what was read."""
    for kind in (Evidence, RunFacts):
        back = kind.from_json(data).to_json()
        assert back == data and list(back) == list(data)
        assert json.dumps(back) == json.dumps(data)


def test_a_known_key_of_another_shape_is_kept_aside_not_taken():
    e = Evidence.from_json({"notes": "one text", "peak_rss": True, "skip_cause": "a-cause-of-2030", "pids": [1, 2]})
    assert e.notes is None and e.peak_rss is None and e.skip_cause is None and e.pids == (1, 2)
    assert e.extra == {"notes": "one text", "peak_rss": True, "skip_cause": "a-cause-of-2030"}
    # a field set since it was read is written over what was there
    assert e.noted("x").to_json()["notes"] == ["x"]
    assert list(e.noted("x").to_json()) == ["notes", "peak_rss", "skip_cause", "pids"]
    assert Evidence.from_json([1, 2]) == Evidence() and RunFacts.from_json("text") == RunFacts()


@settings(max_examples=40, deadline=None)
@given(a=st.dictionaries(KEYS, JSON, max_size=6), b=st.dictionaries(KEYS, JSON, max_size=6))
def test_or_of_any_two_is_dict_or(a, b):
    for kind in (Evidence, RunFacts):
        got = (kind.from_json(a) | kind.from_json(b)).to_json()
        assert got == a | b and list(got) == list(a | b)


def test_or_is_dict_or():
    a = {"python": "3.12", "zz": [1], "host": {"name": "a"}}
    b = {"host": {"name": "b"}, "index": "https://pypi.org/simple", "yy": 2}
    got = RunFacts.from_json(a) | RunFacts.from_json(b)
    assert got.to_json() == a | b and list(got.to_json()) == list(a | b)
    made = RunFacts.of(accelerator="cpu", shadowed=[["numpy", "2", "1"]], host={"name": "h"})
    assert list(made.to_json()) == ["accelerator", "shadowed", "host"] and made.shadowed == (("numpy", "2", "1"),)


def test_a_mark_is_manual_evidence_and_its_cause_is_manual():
    e = Evidence.of_mark(Manual(Verdict.SKIP, "no node free"), {"replayed": "x.log:3"})
    assert e.to_json() == {"manual": "skip", "note": "no node free", "replayed": "x.log:3"}
    r = _record(Outcome.SKIP, evidence=e)
    assert r.manual == Manual(Verdict.SKIP, "no node free") and r.skip_cause is SkipCause.MANUAL
    assert _record(Outcome.SKIP, evidence=Evidence.from_json({"manual": "perhaps"})).manual is None


def test_skip_causes_are_recorded_and_older_records_read_by_their_words():
    assert _record(Outcome.SKIP, evidence=Evidence(skip_cause=SkipCause.OOM)).skip_cause is SkipCause.OOM
    assert Evidence(skip_cause=SkipCause.EXIT_125).to_json() == {"skip_cause": "exit_125"}
    # records of dsbisect 0.1.1 carry no cause: the runner's words of then say it
    old = _record(Outcome.SKIP, reason="needs 2 CUDA GPUs; this machine has 0")
    assert old.skip_cause is SkipCause.GPUS and old.skip_cause.machine
    assert _record(Outcome.SKIP, reason="venv could not be built: uv said no").skip_cause is SkipCause.VENV
    assert _record(Outcome.SKIP, reason="it needs 2 CUDA GPUs").skip_cause is None
    assert _record(Outcome.FAIL, evidence=Evidence(skip_cause=SkipCause.OOM)).skip_cause is None


def test_a_bisection_record_reads_back_as_written():
    b = BisectionRecord(3, "k", "deepspeed", "0.12.2", "0.12.4", AskedFor.from_json({"case": "c"}), BisectionStatus.DONE,
                        {"verdict": "found"}, 1.0, 2.0)
    assert BisectionRecord.from_json(b.to_json() | {"newer": 1}) == b
    with pytest.raises((KeyError, TypeError, ValueError)):
        BisectionRecord.from_json({"key": "k", "params": [], "result": {}})


# ------------------------------------------------------------------ the one verdict rule


@pytest.mark.parametrize("outcome, regress_on, want", [
    (Outcome.HANG, RegressOn.HANG, Verdict.BAD), (Outcome.FAIL, RegressOn.HANG, Verdict.SKIP),
    (Outcome.FAIL, RegressOn.FAIL, Verdict.BAD), (Outcome.HANG, RegressOn.FAIL, Verdict.SKIP),
    (Outcome.FAIL, RegressOn.ANY, Verdict.BAD), (Outcome.PASS, RegressOn.ANY, Verdict.GOOD),
    (Outcome.SKIP, RegressOn.ANY, Verdict.SKIP)])
def test_the_verdict_of_a_run(outcome, regress_on, want):
    assert _record(outcome, reason="RuntimeError: boom").verdict(regress_on) is want


def test_a_mark_by_hand_is_as_the_user_said_whatever_its_outcome_or_the_rule():
    for mark in ("good", "bad", "skip"):
        r = _record(Outcome.HANG, evidence=Evidence.of_mark(Manual(Verdict(mark))))
        for rule_on in (RegressOn.HANG, RegressOn.FAIL, RegressOn.ANY):
            assert r.verdict(rule_on, "some signature") is Verdict(mark)
    assert _record(None).verdict(RegressOn.ANY) is Verdict.SKIP  # no outcome: untestable


def test_a_signature_and_a_learned_failure_decide_what_is_bad():
    hang = _record(Outcome.HANG, signature="rank 0 in all_reduce, rank 1 in barrier")
    assert hang.verdict(RegressOn.HANG, "ALLREDUCE") is Verdict.BAD  # torch's name and OpType's are one
    assert hang.verdict(RegressOn.HANG, "ALLGATHER") is Verdict.SKIP
    end = learned(Outcome.FAIL, "ValueError: dsb_toy: the loss went NaN", "", ())
    other = _record(Outcome.FAIL, reason="AttributeError: module 'torch' has no attribute 'x'")
    assert other.verdict(RegressOn.FAIL, None, end) is Verdict.SKIP  # fails otherwise: stepped around
    assert other.verdict(Rule(RegressOn.FAIL, None, None)) is Verdict.BAD  # --any-failure
    same = _record(Outcome.FAIL, reason="ValueError: dsb_toy: the loss went NaN")
    assert same.verdict(RegressOn.FAIL, None, end) is Verdict.BAD
    # the frames the run recorded are part of its failure
    framed = _record(Outcome.FAIL, reason="ValueError: x", evidence=Evidence.of(error_frames=["dsb_toy/a.py:f"]))
    assert framed.identity().frames == ("dsb_toy/a.py:f",)


# ------------------------------------------------------------------ the store


def test_the_store_lists_its_bisections_oldest_first(tmp_path):
    store = Store(tmp_path)
    asked = AskedFor.from_json({"case": "c"})
    store.save_bisection("bbbb", "dsb-toy", "1.0.0", "1.3.0", asked, BisectionStatus.RUNNING, {})
    store.save_bisection("aaaa", "dsb-toy", "1.0.0", "1.2.0", asked, BisectionStatus.DONE, {"verdict": "found"})
    assert [b.key for b in store.bisections()] == ["bbbb", "aaaa"]
    on_disk = json.loads((tmp_path / "bisections" / "aaaa.json").read_text())
    assert store.bisection("aaaa") == store.bisections()[1]
    # the file of a new bisection says id 0 (it is written before its row): everything else is the row's
    assert replace(BisectionRecord.from_json(on_disk), id=store.bisections()[1].id) == store.bisections()[1]
    assert set(on_disk) == set(BisectionRecord.KEYS)
    store.db.execute("UPDATE bisections SET params='[not json' WHERE key='bbbb'")
    assert [b.key for b in store.bisections()] == ["aaaa"] and any("bbbb" in n for n in store.notes)
    store.close()


STORES = sorted((Path(__file__).parents[2] / "docs" / "results" / "stores").glob("*.sqlite3"))


@pytest.mark.parametrize("db", STORES, ids=[p.stem for p in STORES])
def test_the_committed_gpu_stores_rows_read_and_write_back_exactly(db):
    """The rows of real 2×H200 runs (hangs with flight-recorder evidence, CUDA facts, Slurm-free
    multi-point bisections) as the types and back: the same JSON, key for key."""
    with sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True) as con:
        rows = con.execute("SELECT evidence, facts FROM runs").fetchall()
    assert rows
    for evidence, facts in rows:
        for kind, text in ((Evidence, evidence), (RunFacts, facts)):
            data = json.loads(text)
            back = kind.from_json(data)
            assert back.to_json() == data and json.dumps(back.to_json()) == json.dumps(data)
            assert not set(back.extra) & set(kind.SHAPES), back.extra  # every known key took its field
    facts = [RunFacts.from_json(json.loads(f)) for _, f in rows]
    assert any(f.cuda and f.gpus for f in facts)


@pytest.mark.slow
def test_real_runs_records_read_and_write_back_exactly(tmp_path, cli, cache_dir):
    """A real toy job (pass, fail, exit 125, an import that fails, a venv that cannot be built,
    and a case that needs GPUs): each run's run.json and its row read into the types and write
    back exactly, and each SKIP records its cause."""
    house = toypkg.build_wheelhouse(tmp_path / "wheels", {"1.0.0": "ok", "1.1.0": "raise", "1.2.0": "exit125",
                                                          "1.3.0": "import", "1.4.0": "broken"})
    gpu_case = "  gpu:\n    script: toy_repro.py\n    accelerator: cuda\n    axes:\n      dsb-toy: [\"1.0.0\"]\n"
    write_matrix(tmp_path, ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0"], nproc=1, extra=gpu_case)
    res = cli("run", "matrix.yaml", "--offline", "--find-links", str(house), "--cache-dir", str(cache_dir), "-q",
              cwd=tmp_path)
    assert res.exit_code in (0, 1), res.output
    store = tmp_path / ".dsbisect"
    with sqlite3.connect(store / "dsbisect.sqlite3") as db:
        db.row_factory = sqlite3.Row
        rows = {r["id"]: r for r in db.execute("SELECT * FROM runs")}
    causes = {}
    for path in sorted((store / "runs").glob("*/run.json")):
        on_disk = json.loads(path.read_text())
        row = rows[on_disk["id"]]
        for part, kind in (("evidence", Evidence), ("facts", RunFacts)):
            for data in (on_disk[part], json.loads(row[part])):
                back = kind.from_json(data).to_json()
                assert back == data and list(back) == list(data), (part, data)
                assert json.dumps(back) == json.dumps(data)
        assert on_disk["evidence"] == json.loads(row["evidence"]) and on_disk["facts"] == json.loads(row["facts"])
        causes[(on_disk["case_name"], on_disk["point"]["versions"][0][1])] = on_disk["evidence"].get("skip_cause")
    want = {("toy", "1.0.0"): None, ("toy", "1.1.0"): None, ("toy", "1.2.0"): "exit_125",
            ("toy", "1.3.0"): "import", ("toy", "1.4.0"): "venv"}
    if not _cuda_gpus():
        want[("gpu", "1.0.0")] = "gpus"
    assert {k: v for k, v in causes.items() if k in want} == want
    run = Store(store, readonly=True)
    fail = next(r for r in run.runs() if r.outcome is Outcome.FAIL)
    assert fail.evidence.error_frames and fail.facts.version("dsb-toy") == "1.1.0" and fail.facts.host_name
    if not _cuda_gpus():  # the cause, not the words, makes the hint
        table = cli("report", "--store", str(store))
        assert "1 point of gpu needs 1 CUDA GPUs; this machine has 0" in table.stdout
        assert "try --case toy" in table.stdout


# ------------------------------------------------------------------ the host and the files, typed

HOST = {"name": "gpu-7", "dsbisect": "0.1.1", "host_python": "3.12.3", "platform": "Linux-6.8", "cpus": 32,
        "gpus": ["NVIDIA H200", "NVIDIA H200"], "cpu_model": "AMD EPYC", "ram_bytes": 270000000000,
        "shm_bytes": 135000000000, "driver": "570.86.15", "topology": "\tGPU0\tGPU1"}
FILES = [{"path": "/w/train.py", "sha256": "0da189e7" * 2, "bytes": 812, "copy": "inputs/00-train.py"},
         {"path": "/w/gone.json", "sha256": "missing", "bytes": None, "copy": None}]  # as launched.record_inputs writes


def test_a_runs_host_and_files_read_typed_and_write_back_key_for_key():
    data = {"python": "3.12.3", "host": HOST, "command": ["python", "train.py"], "inputs": FILES}
    f = RunFacts.from_json(data)
    assert f.to_json() == data and list(f.to_json()["inputs"][1]) == ["path", "sha256", "bytes", "copy"]
    assert (f.host.name, f.host.cpus, f.host.gpus, f.host_name) == ("gpu-7", 32, ("NVIDIA H200",) * 2, "gpu-7")
    assert f.inputs == (InputFile(path="/w/train.py", sha256="0da189e7" * 2, bytes=812, copy="inputs/00-train.py"),
                        InputFile.from_json(FILES[1]))
    assert (f.inputs[1].bytes, f.inputs[1].copy) == (None, None)
    made = RunFacts.of(command=["python", "train.py"], inputs=FILES, host=Host.from_json(HOST))  # as a run makes them
    assert made.to_json() == {"command": ["python", "train.py"], "inputs": FILES, "host": HOST}
    # an odd value is kept aside and written back: nothing recorded is lost
    odd = RunFacts.from_json({"host": {"name": "n", "cpus": "many"}, "inputs": [{"path": "a"}, 5]})
    assert odd.host.cpus is None and odd.inputs is None and odd.to_json() == {"host": {"name": "n", "cpus": "many"},
                                                                              "inputs": [{"path": "a"}, 5]}
