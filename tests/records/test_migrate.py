"""Old records through one door (``records.migrate``): each shape an older dsbisect wrote, taken
from the committed stores and outputs of docs/results, is read as the current one, once; a
record of the current shape passes through unchanged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dsbisect.core.model import Outcome
from dsbisect.records import migrate
from dsbisect.records.bisections import AskedFor
from dsbisect.records.results import Recorded, Result
from dsbisect.records.run import Evidence, SkipCause
from dsbisect.store.store import Store
from dsbisect.verdict.identity import Failure, HangSignature
from recorded import record

DOCS = Path(__file__).resolve().parents[2] / "docs" / "results"
OUTPUTS = sorted(p for p in [*DOCS.glob("*.json"), *DOCS.glob("zoo-runs/*.json")]
                 if isinstance(json.loads(p.read_text()), dict) and "steps" in json.loads(p.read_text()))


def _store(tmp_path: Path, name: str) -> Store:
    """A copy of a committed store (an older dsbisect's: no skip causes, no typed hangs, no hosts)."""
    for suffix in ("", "-wal", "-shm"):
        src = DOCS / "stores" / f"{name}.sqlite3{suffix}"
        if src.exists():
            shutil.copy(src, tmp_path / f"dsbisect.sqlite3{suffix}")
    return Store(tmp_path, readonly=True)


# ------------------------------------------------------------------ runs


def test_an_old_hang_is_read_typed_from_its_signature_text(tmp_path):
    run = _store(tmp_path, "2026-11-30-h200x2-seed2").run(2)
    assert run.outcome is Outcome.HANG and run.evidence.hang is None  # recorded before hangs were typed
    assert run.hang.waits == ((0, "_ALLGATHER_BASE"), (1, "_ALLGATHER_BASE"))
    assert run.hang.frames == ("partition_parameters.py:_allgather_params_coalesced",
                               "partition_parameters.py:_all_gather", "modeling_utils.py:_load_pretrained_model")
    assert run.identity().message == "ranks 0-1 in _ALLGATHER_BASE" and run.failure is None and run.skip_cause is None


def test_an_old_failure_is_read_typed_from_its_reason(tmp_path):
    st = _store(tmp_path, "2026-11-30-h200x2-seed1")
    run = st.run(1)
    assert run.failure == Failure("DistBackendError", run.reason.split(": ", 1)[1], run.reason)
    assert run.identity().error == "DistBackendError" and run.hang is None
    skips = [r for r in st.runs() if r.outcome is Outcome.SKIP]
    assert skips and all(r.skip_cause is None for r in skips)  # "import check: ..." named no cause then


@pytest.mark.parametrize("reason, error, message", [
    ("RuntimeError: boom", "RuntimeError", "boom"),
    ("torch.distributed.DistBackendError: NCCL error", "DistBackendError", "NCCL error"),
    ("ValueError: bad (from KeyError: 'w')", "ValueError", "bad (from KeyError: 'w')"),  # the chain stays its message
    ("rank 1 killed by SIGSEGV (Fatal Python error)", "", "rank 1 killed by SIGSEGV (Fatal Python error)"),
    ("  exit 1\n", "", "exit 1"),
])
def test_a_failure_from_the_reason_the_classifier_wrote(reason, error, message):
    assert migrate.failure(reason) == Failure(error, message, reason.strip())


def test_a_skip_of_dsbisect_0_1_1_says_its_cause_in_the_words_of_then():
    assert record(Outcome.SKIP, "needs 2 CUDA GPUs; this machine has 0").skip_cause is SkipCause.GPUS
    assert record(Outcome.SKIP, "venv could not be built: uv said no").skip_cause is SkipCause.VENV
    assert record(Outcome.SKIP, "import check: no").skip_cause is None
    recorded = Evidence(skip_cause=SkipCause.OOM)  # the current shape: the cause as recorded, whatever the words
    assert record(Outcome.SKIP, "needs 2 CUDA GPUs; this machine has 0", evidence=recorded).skip_cause is SkipCause.OOM
    assert record(Outcome.FAIL, "venv could not be built: x", evidence=recorded).skip_cause is None


def test_a_typed_hang_is_taken_as_recorded():
    typed = HangSignature(((0, "ALLREDUCE"), (1, "BARRIER")), ("toy.py:step",), "rank 0 waits in ALLREDUCE #2")
    run = record(Outcome.HANG, "timed out", "other text", evidence=Evidence.of(hang=typed.to_json()))
    assert run.hang == typed and run.identity().shown == "other text"


# ------------------------------------------------------------------ results and params


@pytest.mark.parametrize("path", OUTPUTS, ids=lambda p: p.name)
def test_lifting_an_output_is_done_once_and_changes_nothing_it_says(path):
    out = json.loads(path.read_text())
    once = migrate.result(out)
    assert migrate.result(once) == once and Result.from_json(once) == Result.from_json(out)
    changed = {k for k in out if once[k] != out[k]}
    assert changed <= {"regression", "releases"}  # only a learned failure gets its typed waits


def test_an_environment_result_from_before_kind_is_known_by_its_env_diff():
    d = json.loads((DOCS / "2026-12-02-cpu-envdiff-accelerate.json").read_text())
    old = {k: v for k, v in d.items() if k != "kind"}
    assert migrate.result(old)["kind"] == "environment"
    assert Recorded.from_json(old) == Recorded.from_json(d) and Recorded.from_json(old).environment


def test_a_hang_learned_before_its_waits_were_typed_is_lifted_in_a_result_and_in_params():
    failure = {"kind": "hang", "error": "", "message": "rank 0 in ALLREDUCE, rank 1 in BARRIER", "frames": [],
               "identity": "HANG rank 0 in ALLREDUCE, rank 1 in BARRIER", "shown": "rank 0 in all_reduce"}
    waits = ((0, "ALLREDUCE"), (1, "BARRIER"))
    res = {"package": "p", "good": "1", "bad": "2", "mode": "regression", "verdict": "found", "steps": [],
           "regression": {"kind": "hang", "asked": "auto", "learned_from": "2", "failure": failure}}
    assert Result.from_json(res).regression.identity.hang.waits == waits
    asked = AskedFor.from_json({"case": "c", "regress_on": "hang", "regression": failure})
    assert asked.regression.hang_waits() == waits and asked.to_json()["regression"]["hang"]["waits"] == [
        [0, "ALLREDUCE"], [1, "BARRIER"]]
    text_only = failure | {"hang": "rank 0 waits in ALLREDUCE #2 (4), rank 1 in BARRIER #2"}
    assert migrate.identity(text_only)["hang"]["waits"] == [[0, "ALLREDUCE"], [1, "BARRIER"]]
    fail = {"kind": "fail", "error": "E", "message": "m", "frames": [], "identity": "FAIL E: m", "shown": "E: m"}
    assert migrate.identity(fail) is fail  # nothing to lift
