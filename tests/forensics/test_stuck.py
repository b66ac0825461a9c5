"""forensics: real hang evidence in, per-rank states and a one-line signature out.

Data: tests/data/nccl-hang-seed2 is a real 2×H200 NCCL hang (see its README);
tests/data/forensics holds real gloo/py-spy/faulthandler samples made on CPU (see its README).
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsbisect.forensics.deadlock import Proof
from dsbisect.forensics.stuck import Frame, Signature, analyze, hang_signature, own_frames, render_stack

DATA = Path(__file__).parents[1] / "data"
SEED = DATA / "nccl-hang-seed2"
GLOO = DATA / "forensics" / "gloo-each-rank-log"
GLOO_COMBINED = DATA / "forensics" / "gloo-combined"
PHASES = DATA / "forensics" / "two-phases"

SITE = "/envs/point/lib/python3.12/site-packages"
SEED_TEXT = (
    "rank 0 in _ALLGATHER_BASE numel 2048 at SeqNum 122, "
    "rank 1 in _ALLGATHER_BASE numel 2048 at SeqNum 121; "
    "ranks at different SeqNum: 0@122, 1@121; "
    "first mismatch at SeqNum 121: rank 0 numel 32 (completed) vs rank 1 numel 2048 — "
    "partition_parameters.py:_allgather_params_coalesced ← partition_parameters.py:_all_gather"
    " ← modeling_utils.py:_load_pretrained_model"
)


def _copy(src: Path, dst: Path, *names: str) -> Path:
    for name in names:
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / name, dst / name)
    return dst


def _summary(sig) -> list[tuple]:
    return [(r.rank, r.op, r.seq, r.numel_in, r.numel_out, r.group, r.sources) for r in sig.ranks]


def _labels(frames) -> list[str]:
    return [f"{Path(f.file).name}:{f.function}" for f in frames]


# ---------------------------------------------------------------- the real NCCL hang


def test_seed_ranks_come_from_the_flight_recorder_and_the_watchdog():
    sig = analyze(SEED)
    assert _summary(sig) == [
        (0, "_ALLGATHER_BASE", 122, 2048, 4096, "default_pg", ("flight-recorder", "watchdog")),
        (1, "_ALLGATHER_BASE", 121, 2048, 4096, "default_pg", ("flight-recorder", "watchdog")),
    ]
    assert sig.notes == ()


def test_seed_signature_names_the_seq_split_and_the_first_size_mismatch():
    # Verified by hand in the dumps: SeqNum 1-120 agree on both ranks; at 121 rank 0
    # gathered [[32]] (completed: NCCL does not check sizes) while rank 1 gathered [[2048]]
    # (still scheduled), so rank 0 moved on to 122 ([[2048]]) and waits there.
    sig = analyze(SEED)
    assert sig.text == SEED_TEXT
    assert "\n" not in sig.text and len(sig.text) < 400


def test_seed_stack_is_the_stuck_entrys_enqueue_stack():
    rank0 = analyze(SEED).ranks[0]
    assert len(rank0.frames) == 14
    assert rank0.frames[0] == Frame(
        "all_gather_into_tensor",
        "/opt/torch/.venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", 4186)
    assert rank0.frames[-1] == Frame("<module>", "repro_scripts/zero3_from_pretrained.py", 137)
    assert _labels(own_frames(rank0.frames)) == [
        "partition_parameters.py:_allgather_params_coalesced",
        "partition_parameters.py:_all_gather",
        "modeling_utils.py:_load_pretrained_model",
    ]
    assert _labels(own_frames(rank0.frames, limit=20)) == [
        "partition_parameters.py:_allgather_params_coalesced",
        "partition_parameters.py:_all_gather",
        "partition_parameters.py:all_gather",
        "partition_parameters.py:__enter__",
        "modeling_utils.py:_load_pretrained_model",
        "modeling_utils.py:from_pretrained",
        "zero3_from_pretrained.py:main",
        "zero3_from_pretrained.py:<module>",
    ]


def test_launcher_log_alone_gives_the_same_ranks_and_stacks(tmp_path):
    both = analyze(SEED)
    sig = analyze(_copy(SEED, tmp_path, "launcher.log"))
    assert _summary(sig) == [
        (0, "_ALLGATHER_BASE", 122, 2048, 4096, "default_pg", ("watchdog",)),
        (1, "_ALLGATHER_BASE", 121, 2048, 4096, "default_pg", ("watchdog",)),
    ]
    # "Stack trace of the failed collective" repeats the flight recorder's frames
    assert [r.frames for r in sig.ranks] == [r.frames for r in both.ranks]
    assert sig.text == (
        "rank 0 in _ALLGATHER_BASE numel 2048 at SeqNum 122, "
        "rank 1 in _ALLGATHER_BASE numel 2048 at SeqNum 121; "
        "ranks at different SeqNum: 0@122, 1@121 — "
        "partition_parameters.py:_allgather_params_coalesced ← partition_parameters.py:_all_gather"
        " ← modeling_utils.py:_load_pretrained_model"
    )


def test_render_stack_marks_own_frames():
    text = render_stack(analyze(SEED).ranks[1])
    lines = text.splitlines()
    assert lines[0] == ("rank 1: _ALLGATHER_BASE SeqNum 121 numel 2048->4096 in default_pg "
                        "(from flight-recorder, watchdog)")
    assert len(lines) == 15
    assert lines[5] == f"    log_wrapper ({SITE}/deepspeed/comm/comm.py:116)"
    assert lines[6] == (f"  * _allgather_params_coalesced "
                        f"({SITE}/deepspeed/runtime/zero/partition_parameters.py:1315)")
    assert lines[-1] == "  * <module> (repro_scripts/zero3_from_pretrained.py:137)"


# ---------------------------------------------------------------- unreadable dumps


class _Evil:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_dump_is_refused_and_reported(tmp_path):
    run = _copy(SEED, tmp_path / "run", "launcher.log", "nccl_trace_rank_0")
    marker = tmp_path / "pwned"
    (run / "nccl_trace_rank_1").write_bytes(pickle.dumps(_Evil(marker)))
    sig = analyze(run)
    assert not marker.exists()
    assert sig.notes == (
        f"nccl_trace_rank_1: could not be read (UnpicklingError: refused to load "
        f"{os.system.__module__}.system)",
    )
    assert _summary(sig) == [
        (0, "_ALLGATHER_BASE", 122, 2048, 4096, "default_pg", ("flight-recorder", "watchdog")),
        (1, "_ALLGATHER_BASE", 121, 2048, 4096, "default_pg", ("watchdog",)),
    ]
    assert "first mismatch" not in sig.text


@pytest.mark.parametrize(
    ("content", "note"),
    [
        (b"not a pickle", "nccl_trace_rank_1: could not be read (UnpicklingError: "),
        ((SEED / "nccl_trace_rank_1").read_bytes()[:5000], "nccl_trace_rank_1: could not be read ("),
        (pickle.dumps([1, 2, 3]), "nccl_trace_rank_1: not a flight-recorder dump (no entries)"),
        (b"{", "nccl_trace_rank_1: could not be read (JSONDecodeError: "),
    ],
)
def test_broken_dump_becomes_a_note(tmp_path, content, note):
    (tmp_path / "nccl_trace_rank_1").write_bytes(content)
    sig = analyze(tmp_path)
    assert sig.ranks == ()
    assert len(sig.notes) == 1 and sig.notes[0].startswith(note)
    assert sig.text == "no rank left evidence that could be read"


# ---------------------------------------------------------------- real gloo hangs


def test_gloo_hang_rank0_in_all_reduce_rank1_elsewhere():
    sig = analyze(GLOO)
    assert _summary(sig) == [
        (0, "all_reduce", None, None, None, None, ("py-spy", "faulthandler", "traceback")),
        (1, None, None, None, None, None, ("py-spy", "faulthandler")),
    ]
    rank0, rank1 = sig.ranks
    assert rank0.frames == (  # py-spy's MainThread, not the heartbeat thread
        Frame("all_reduce", "torch/distributed/distributed_c10d.py", 3252),
        Frame("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83),
        Frame("step", "toy.py", 13),
        Frame("main", "toy.py", 29),
        Frame("<module>", "toy.py", 35),
    )
    assert rank1.frames == (Frame("main", "toy.py", 31), Frame("<module>", "toy.py", 35))
    assert sig.text == ("rank 0 in all_reduce, rank 1 not in a collective — "
                        "toy.py:step ← toy.py:main ← toy.py:<module> "
                        "(rank 1: toy.py:main ← toy.py:<module>)")
    assert sig.notes == ()


def test_gloo_traceback_in_the_combined_launcher_log():
    sig = analyze(GLOO_COMBINED)
    assert _summary(sig) == [(0, "all_reduce", None, None, None, None, ("traceback",))]
    assert sig.ranks[0].frames[2:] == (
        Frame("step", "/repo/toy.py", 13),
        Frame("main", "/repo/toy.py", 29),
        Frame("<module>", "/repo/toy.py", 35),
    )
    assert sig.text == "rank 0 in all_reduce — toy.py:step ← toy.py:main ← toy.py:<module>"


def test_gloo_rank_log_traceback_alone(tmp_path):
    run = _copy(GLOO, tmp_path, "ranks/20261130064152_rank0.log", "ranks/20261130064152_rank1.log")
    sig = analyze(run)
    assert _summary(sig) == [(0, "all_reduce", None, None, None, None, ("traceback",))]
    assert sig.ranks[0].frames[0] == Frame(
        "all_reduce", "/envs/point/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
        3252)


def test_faulthandler_dump_alone_uses_the_main_thread(tmp_path):
    run = _copy(GLOO, tmp_path, "stacks/rank0.pid5305.txt", "stacks/rank1.pid5306.txt")
    sig = analyze(run)
    assert _summary(sig) == [
        (0, "all_reduce", None, None, None, None, ("faulthandler",)),
        (1, None, None, None, None, None, ("faulthandler",)),
    ]
    assert _labels(sig.ranks[0].frames) == [
        "distributed_c10d.py:all_reduce", "c10d_logger.py:wrapper",
        "toy.py:step", "toy.py:main", "toy.py:<module>",
    ]
    assert sig.ranks[1].frames == (Frame("main", "/repo/toy.py", 31),
                                   Frame("<module>", "/repo/toy.py", 35))


# ---------------------------------------------------------------- which dump wins


def test_latest_pyspy_tag_and_last_faulthandler_dump_win():
    sig = analyze(PHASES)
    (rank0,) = sig.ranks
    assert rank0.sources == ("py-spy", "faulthandler")
    assert rank0.frames == (Frame("second_phase", "phases.py", 12), Frame("<module>", "phases.py", 17))
    assert sig.notes == ()
    assert sig.text == "rank 0 not in a collective — phases.py:second_phase ← phases.py:<module>"


def test_pyspy_error_output_is_skipped_with_a_note(tmp_path):
    run = _copy(PHASES, tmp_path, "stacks/pyspy.rank0.deadline.txt", "stacks/pyspy.rank0.quiet.txt")
    sig = analyze(run)
    assert sig.ranks[0].frames == (Frame("first_phase", "phases.py", 8),
                                   Frame("<module>", "phases.py", 16))
    assert sig.notes == ("pyspy.rank0.deadline.txt: no Python stack in it",)


def test_faulthandler_takes_the_last_of_appended_dumps(tmp_path):
    run = _copy(PHASES, tmp_path, "stacks/rank0.pid6568.txt")
    assert analyze(run).ranks[0].frames == (Frame("second_phase", "/repo/phases.py", 12),
                                            Frame("<module>", "/repo/phases.py", 17))


def test_pyspy_dump_without_a_rank_is_reported(tmp_path):
    (tmp_path / "stacks").mkdir()
    shutil.copy(GLOO / "stacks" / "pyspy.rank0.quiet.txt", tmp_path / "stacks" / "pyspy.rank?.quiet.txt")
    sig = analyze(tmp_path)
    assert sig.ranks == ()
    assert sig.notes == ("pyspy.rank?.quiet.txt: no rank number in the name; not used",)


# ---------------------------------------------------------------- no evidence


def test_empty_folder_gives_none(tmp_path):
    assert analyze(tmp_path) is None


def test_unsignalled_faulthandler_file_and_empty_logs_give_none(tmp_path):
    run = _copy(GLOO, tmp_path, "ranks/20261130064152_rank1.log")
    (run / "stacks").mkdir()
    (run / "stacks" / "rank1.pid5306.txt").write_text("")
    (run / "launcher.log").write_text("[2026-11-30 06:41:30,790] [INFO] [runner.py:618:main] cmd = x\n")
    assert analyze(run) is None


# ---------------------------------------------------------------- watchdog line formats

OLD = ("[E ProcessGroupNCCL.cpp:474] [Rank {r}] Watchdog caught collective operation timeout: "
       "WorkNCCL(SeqNum={s}, OpType=REDUCE, NumelIn=2, NumelOut=2, Timeout(ms)=1800000) "
       "ran for 1800475 milliseconds before timing out.\n")


def test_torch_2_1_watchdog_lines_merge_equal_ranks(tmp_path):
    lines = [OLD.format(r=r, s=1) for r in range(8)]
    (tmp_path / "launcher.log").write_text("".join(lines + lines))  # repeats are deduplicated
    sig = analyze(tmp_path)
    assert [r.rank for r in sig.ranks] == list(range(8))
    assert sig.text == "ranks 0-7 in REDUCE numel 2 at SeqNum 1"


def test_one_rank_behind_is_named(tmp_path):
    lines = [OLD.format(r=r, s=2 if r == 3 else 1) for r in range(8)]
    (tmp_path / "launcher.log").write_text("".join(lines))
    assert analyze(tmp_path).text == (
        "ranks 0-2,4-7 in REDUCE numel 2 at SeqNum 1, rank 3 in REDUCE numel 2 at SeqNum 2; "
        "ranks at different SeqNum: 0-2,4-7@1, 3@2")


def test_pg_prefixed_watchdog_line_gives_the_group(tmp_path):
    (tmp_path / "launcher.log").write_text(
        "[rank2]:[E1130 05:59:25.101434383 ProcessGroupNCCL.cpp:689] [PG ID 1 PG GUID 1(tp_group)"
        " Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
        "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=40000) ran for 40000 milliseconds "
        "before timing out.\n")
    sig = analyze(tmp_path)
    assert _summary(sig) == [(2, "ALLREDUCE", 9, 1, 1, "tp_group", ("watchdog",))]


# ---------------------------------------------------------------- own_frames

C10D = Frame("all_reduce", "torch/distributed/distributed_c10d.py", 3252)
THREADING = Frame("Thread.run", "threading.py", 982)
STDLIB = Frame("run", "/usr/lib/python3.11/threading.py", 982)
DS_COMM = Frame("all_reduce", f"{SITE}/deepspeed/comm/comm.py", 640)
DS_ENGINE = Frame("backward", f"{SITE}/deepspeed/runtime/engine.py", 2000)
DS_STAGE3 = Frame("reduce_ipg_grads", f"{SITE}/deepspeed/runtime/zero/stage3.py", 1200)
HF_TRAINER = Frame("training_step", f"{SITE}/transformers/trainer.py", 3000)
ACCEL = Frame("backward", f"{SITE}/accelerate/accelerator.py", 2100)
NUMPY = Frame("sum", f"{SITE}/numpy/core/fromnumeric.py", 88)
SCRIPT = Frame("main", "repro_scripts/train.py", 40)


@pytest.mark.parametrize(
    ("frames", "limit", "expected"),
    [
        # each library the stack crosses into keeps its innermost frame
        ((C10D, DS_COMM, DS_STAGE3, DS_ENGINE, ACCEL, HF_TRAINER, SCRIPT), 3,
         (DS_STAGE3, ACCEL, HF_TRAINER)),
        ((C10D, DS_COMM, DS_STAGE3, DS_ENGINE, ACCEL, HF_TRAINER, SCRIPT), 5,
         (DS_STAGE3, DS_ENGINE, ACCEL, HF_TRAINER, SCRIPT)),
        ((C10D, DS_COMM, DS_STAGE3, DS_ENGINE, HF_TRAINER, SCRIPT), 2, (DS_STAGE3, HF_TRAINER)),
        ((C10D, DS_COMM, DS_STAGE3, DS_ENGINE, SCRIPT), 3, (DS_STAGE3, DS_ENGINE, SCRIPT)),
        ((C10D, NUMPY, STDLIB, THREADING), 3, ()),
        ((C10D, SCRIPT), 0, ()),
        ((), 3, ()),
    ],
)
def test_own_frames_table(frames, limit, expected):
    assert own_frames(frames, limit) == expected


POOL = [C10D, THREADING, STDLIB, DS_COMM, DS_ENGINE, DS_STAGE3, HF_TRAINER, ACCEL, NUMPY, SCRIPT]


@given(st.lists(st.sampled_from(POOL), max_size=12), st.integers(min_value=0, max_value=6))
def test_own_frames_is_an_ordered_pick_of_the_own_frames(frames, limit):
    frames = tuple(frames)
    every = own_frames(frames, limit=len(frames))
    picked = own_frames(frames, limit)
    assert len(picked) == min(limit, len(every))
    it = iter(frames)
    assert all(f in it for f in picked)  # a subsequence: innermost first, no reordering
    assert all(f in every for f in picked)
    if picked:
        assert picked[0] == every[0]  # the innermost own frame is always kept


def test_committed_samples_hold_no_machine_paths():
    # Where these samples were made: the repository's parent, the home and the temp folders
    # (the device machine lays them out as this one does).
    local = {str(Path(__file__).resolve().parents[3]), str(Path.home()), tempfile.gettempdir()}
    for path in DATA.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for folder in local:
                assert (folder.rstrip("/") + "/").encode() not in data, f"{path} holds {folder!r}"



def test_real_gpu_hang_recorded_by_dsbisect():
    """The seed-2 hang as dsbisect captured it on 2x H200 (deepspeed 0.9.5 + transformers
    4.37.0): flight recorder, watchdog, py-spy and faulthandler stacks; the launcher's own
    KeyboardInterrupt traceback (dsbisect's teardown) must not count as a rank."""
    sig = analyze(DATA / "nccl-hang-gpu")
    assert [r.rank for r in sig.ranks] == [0, 1]
    r0, r1 = sig.ranks
    assert (r0.op, r0.seq, r0.numel_in) == ("_ALLGATHER_BASE", 121, 2048)
    assert (r1.op, r1.seq, r1.numel_in) == ("_ALLGATHER_BASE", 122, 2048)
    assert set(r0.sources) >= {"flight-recorder", "watchdog", "py-spy", "faulthandler"}
    assert "first mismatch at SeqNum 121: rank 0 numel 2048 vs rank 1 numel 32 (completed)" in sig.text
    assert sig.text.endswith("partition_parameters.py:_allgather_params_coalesced ← "
                             "partition_parameters.py:_all_gather ← modeling_utils.py:_load_pretrained_model")


# ---------------------------------------------------------------- the signature's parts


def test_the_seed_signature_is_built_from_its_typed_parts():
    sig = analyze(SEED)
    assert sig.text == f"{sig.where} — {sig.stack}" == SEED_TEXT
    assert sig.stack == ("partition_parameters.py:_allgather_params_coalesced ← partition_parameters.py:_all_gather"
                         " ← modeling_utils.py:_load_pretrained_model")


WAITS = "rank 0 waits in ALLREDUCE #2 (4), rank 1 in BARRIER #2"
PROOF = Proof(rule="op", at=9.3, where=WAITS, why="different ops at #2", waits=())
LONG = "x" * 500


@pytest.mark.parametrize(("sig", "proof", "expected"), [
    (None, None, ""),
    (None, PROOF, WAITS),
    (Signature((), "rank 0 in all_reduce", "", ()), None, "rank 0 in all_reduce"),
    (Signature((), "rank 0 in all_reduce", "toy.py:step", ()), None, "rank 0 in all_reduce — toy.py:step"),
    (Signature((), "rank 0 in all_reduce", "", ()), PROOF, WAITS),
    (Signature((), "rank 0 in all_reduce", "toy.py:step ← toy.py:<module>", ()), PROOF,
     f"{WAITS} — toy.py:step ← toy.py:<module>"),
    # the text stays one short line: where is clipped, the stack is not
    (Signature((), LONG, "", ()), None, "x" * 399 + "…"),
    (Signature((), LONG, "s" * 100, ()), None, "x" * 296 + "… — " + "s" * 100),
    (Signature((), LONG, "s" * 390, ()), None, "x" * 79 + "… — " + "s" * 390),
])
def test_hang_signature(sig, proof, expected):
    assert hang_signature(sig, proof) == expected


def test_a_proofs_text_is_made_of_its_parts():
    assert PROOF.text == f"deadlock proven at 9.3 s: {WAITS} — different ops at #2"
