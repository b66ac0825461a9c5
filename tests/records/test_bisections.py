"""A bisection's record: what it was asked (``params``) written and read back typed, key for key,
in the shapes dsbisect wrote (the committed stores of docs/results hold the oldest)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from conftest import make_case
from dsbisect.core.mode import Mode
from dsbisect.core.model import Outcome, RegressOn
from dsbisect.records.bisections import AskedFor, BisectionRecord, BisectionStatus
from dsbisect.records.results import Request
from dsbisect.verdict.identity import Identity, Rule

STORES = Path(__file__).parents[2] / "docs" / "results" / "stores"

# what dsbisect wrote for a release bisection with every part, and for an environment bisection
RELEASE = {"case": "c", "pins": ["a==1"], "regress_on": "fail", "find_fix": True, "repeat": 2, "signature": "boom",
           "confidence": 0.9,
           "regression": {"kind": "fail", "error": "ValueError", "message": "boom <n>", "frames": ["a.py:f"],
                          "identity": "FAIL ValueError: boom 3 at a.py:f", "shown": "ValueError: boom 3"},
           "argv": ["dsb-toy", "1.0", "1.2", "--find-fix"], "cwd": "/work"}
ENVIRONMENT = {"case": "c", "hold": ["torch"], "regress_on": "auto", "find_fix": False, "repeat": 1, "signature": None,
               "envbisect": True, "argv": ["--good-env=g.txt", "--bad-env=b.txt"], "cwd": "/work"}


def _committed_params() -> list[dict]:
    out = []
    for db in sorted(STORES.glob("*.sqlite3")):
        con = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
        out += [json.loads(p) for (p,) in con.execute("SELECT params FROM bisections")]
        con.close()
    return out


@pytest.mark.parametrize("params", [RELEASE, ENVIRONMENT, *_committed_params()], ids=lambda p: json.dumps(p)[:60])
def test_params_read_back_as_written_key_for_key(params):
    asked = AskedFor.from_json(params)
    assert asked.to_json() == params and list(asked.to_json()) == list(params)
    assert AskedFor.from_json(json.loads(json.dumps(asked.to_json()))) == asked


def test_the_committed_stores_params_read_typed():
    found = {(a.case, a.pins, a.regress_on, a.mode) for a in map(AskedFor.from_json, _committed_params())}
    assert found == {("checkpoint_after_training", (), RegressOn.ANY, Mode.REGRESSION),
                     ("checkpoint_after_training_nofill", (), RegressOn.ANY, Mode.REGRESSION),
                     ("zero3_from_pretrained", ("deepspeed==0.9.5",), RegressOn.HANG, Mode.REGRESSION),
                     ("zero3_from_pretrained", ("transformers==4.39.2",), RegressOn.HANG, Mode.FIND_FIX)}


def test_the_typed_fields_of_each_shape():
    rel, env = AskedFor.from_json(RELEASE), AskedFor.from_json(ENVIRONMENT)
    assert (rel.mode, rel.repeat, rel.signature, rel.confidence, rel.argv[-1], rel.cwd) == \
        (Mode.FIND_FIX, 2, "boom", 0.9, "--find-fix", "/work")
    assert rel.regression == Identity(Outcome.FAIL, "ValueError", "boom <n>", ("a.py:f",), "ValueError: boom 3")
    assert not rel.environment and env.environment and env.hold == ("torch",) and env.regress_on is RegressOn.AUTO
    odd = AskedFor.from_json({"case": "c", "newer": [1], "repeat": "two"})  # a key it does not know is kept
    assert odd.repeat == 1 and odd.to_json()["newer"] == [1] and odd.to_json()["repeat"] == "two"


def test_a_release_request_is_recorded_with_its_rule(tmp_path):
    req = Request("dsb-toy", "1.0", "1.2", make_case(tmp_path, "c"), pins=("a==1",), mode=Mode.FIND_FIX, repeat=2,
                  signature="boom", confidence=0.9, argv=("dsb-toy", "1.0", "1.2", "--find-fix"))
    learned = Identity.from_json(RELEASE["regression"])
    assert AskedFor.of_release(req, Rule(RegressOn.FAIL, "boom", learned), "/work").to_json() == RELEASE
    bare = AskedFor.of_release(Request("p", "1", "2", make_case(tmp_path, "c")), Rule(RegressOn.AUTO), "/work")
    assert bare.to_json() == {"case": "c", "pins": [], "regress_on": "auto", "find_fix": False, "repeat": 1,
                              "signature": None}  # no command line recorded: no cwd either
    token = AskedFor.from_json(RELEASE | {"argv": ["--hub_token=hf_abcdefghijklmnopqrstuvwxyz0123"]}).masked()
    assert "hf_abcdefghijklmnopqrstuvwxyz0123" not in json.dumps(token.to_json())


def test_a_bisection_record_reads_its_status_and_result_typed():
    data = {"id": 2, "key": "k", "package": "dsb-toy", "good": "1.0", "bad": "1.2", "params": RELEASE,
            "status": "running", "result": {"candidates": ["1.0", "1.1", "1.2"], "steps": []}, "created": 1.0,
            "updated": 2.0}
    b = BisectionRecord.from_json(data)
    assert b.status is BisectionStatus.RUNNING and b.recorded.verdict is None
    assert b.recorded.answers[0].candidates == ("1.0", "1.1", "1.2") and b.to_json() == data
