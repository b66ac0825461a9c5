"""The subprocess seam and the run-folder layout."""

from __future__ import annotations

import sys

from dsbisect.core import proc
from dsbisect.core.rundir import RunDir, tail_text


def test_run_reports_output_and_failure_without_raising():
    done = proc.run([sys.executable, "-c", "import sys; print('out'); print('first\\nlast', file=sys.stderr); sys.exit(3)"])
    assert (done.returncode, done.ok, done.stdout) == (3, False, "out\n")
    assert done.last_line() == "last"  # a line, never a list's repr


def test_run_names_a_missing_program_and_a_timeout():
    missing = proc.run(["/nonexistent/program", "x"])
    assert missing.returncode is None and missing.last_line() == "/nonexistent/program: No such file or directory"
    slow = proc.run([sys.executable, "-c", "import time; time.sleep(10)"], timeout=0.5)
    assert slow.returncode is None and slow.error == "no answer within 0.5 s"


def test_clean_env_drops_what_would_confuse_a_venv(monkeypatch):
    monkeypatch.setenv("VIRTUAL_ENV", "/some/venv")
    monkeypatch.setenv("PYTHONPATH", "/x")
    env = proc.clean_env({"A": "1"})
    assert "VIRTUAL_ENV" not in env and "PYTHONPATH" not in env and env["A"] == "1"


def test_run_dir_layout_and_its_readers(tmp_path):
    run = RunDir(tmp_path)
    run.ranks.mkdir()
    (run.ranks / "x_rank1.log").write_text("r1\n")
    run.launcher_log.write_text("launcher\n")
    run.stacks.mkdir()
    run.pyspy(0, "quiet").write_text("py-spy")
    (run.stacks / "pyspy.rankX.idle.txt").write_text("?")
    run.faulthandler(1, 4242).write_text("fh")
    (tmp_path / "nccl_trace_rank_1").write_bytes(b"x")
    (tmp_path / "nccl_trace_rank_bad").write_bytes(b"x")
    assert run.logs() == [run.launcher_log, run.ranks / "x_rank1.log"]
    assert run.pyspy_dumps() == [(0, "quiet", run.stacks / "pyspy.rank0.quiet.txt"),
                                 (None, "", run.stacks / "pyspy.rankX.idle.txt")]
    assert run.faulthandler_dumps() == [(1, 4242, run.stacks / "rank1.pid4242.txt")]
    assert run.fr_dumps() == [(1, tmp_path / "nccl_trace_rank_1"), (None, tmp_path / "nccl_trace_rank_bad")]
    assert run.fr_prefix.endswith("/nccl_trace_rank_")
    assert run.tails()[0] == "r1\nlauncher"


def test_tail_reads_only_the_end_of_a_large_log(tmp_path):
    big = tmp_path / "big.log"
    big.write_text("".join(f"line {i}\n" for i in range(200_000)))
    text = tail_text(big, 4096)
    assert len(text) <= 4096 and text.endswith("line 199999\n") and text.startswith("line ")
    assert tail_text(tmp_path / "missing.log", 10) is None
