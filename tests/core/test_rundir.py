"""rundir: the run folder's layout, written down once — the one rank-log naming, the tails by
rank, the flight recorder's dump files."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsbisect.core.rundir import RankLogs, RunDir, flight_recorder_env, rank_of_log


@pytest.mark.parametrize(("name", "rank"), [
    ("ranks/rank0.log", 0),  # dsbisect's own (direct), srun's --output=rank%t.log
    ("ranks/rank12.log", 12),
    ("ranks/20261130064152_rank1.log", 1),  # the deepspeed launcher's --enable_each_rank_log
    ("ranks/none_abc/attempt_0/3/stdout.log", 3),  # torchrun's --log-dir, by local rank
    ("ranks/none_abc/attempt_2/0/stderr.log", 0),
    ("ranks/myrank3.log", None),  # not a rank's name (forensics used to read it as rank 3)
    ("ranks/none_abc/attempt_0/3/error.json", None),  # torchrun's error file is no log
    ("ranks/rank1.log.1", None),
    ("launcher.log", None),
])
def test_one_rank_log_naming(name, rank):
    assert rank_of_log(Path("/run") / name) == rank


def test_tails_read_each_rank_by_its_logs_name(tmp_path):
    run = RunDir(tmp_path)
    logs = {"ranks/rank0.log": "direct 0", "ranks/20260101_rank1.log": "deepspeed 1",
            "ranks/id/attempt_0/2/stdout.log": "torchrun 2 out", "ranks/id/attempt_0/2/stderr.log": "torchrun 2 err",
            "ranks/other.log": "no rank", "launcher.log": "launcher"}
    for name, text in logs.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text + "\n")
    every, by_rank = run.tails()
    assert by_rank == {0: "direct 0", 1: "deepspeed 1", 2: "torchrun 2 err\ntorchrun 2 out"}
    assert every.endswith("launcher") and "no rank" in every  # rank logs first, then the launcher's


def test_every_naming_is_one_alternative():
    assert {n.name for n in RankLogs} == {"DIRECT", "DEEPSPEED", "TORCHRUN", "NONE"}
    assert rank_of_log(Path("/r/ranks/rank_x.log")) is None


def test_the_flight_recorder_dumps_into_the_run_folder(tmp_path):
    run = RunDir(tmp_path)
    env = flight_recorder_env(run)
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == env["TORCH_FR_DUMP_TEMP_FILE"] == str(tmp_path / "nccl_trace_rank_")
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    (tmp_path / "nccl_trace_rank_1").write_bytes(b"")
    (tmp_path / "nccl_trace_rank_x").write_bytes(b"")
    assert run.fr_dumps() == [(1, tmp_path / "nccl_trace_rank_1"), (None, tmp_path / "nccl_trace_rank_x")]
