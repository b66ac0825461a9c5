"""crash: the traceback of the rank that raised first, read from literal logs.

The rank the launcher names as the root cause, else the lowest rank whose exception is not a
consequence of another's end; the traceback whole (frames with their long paths, a chain as
one block, a multi-line message), nothing of the log after it; every other rank in one line.
"""

from __future__ import annotations

from pathlib import Path

from dsbisect.forensics.crash import Crash, crash, read_crash, root_rank, tracebacks

SITE = "/home/u/.cache/dsbisect/envs/d0a322101f9b755b/lib/python3.11/site-packages"
RANK0 = f"""\
[W1202 05:45:39.382552183 Utils.hpp:137] Warning: Environment variable TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated
[rank0]: Traceback (most recent call last):
[rank0]:   File "/x/train.py", line 5, in <module>
[rank0]:     engine.step()
[rank0]:   File "{SITE}/deepspeed/runtime/zero/stage_1_and_2.py", line 2012, in step
[rank0]:     self._all_gather()
[rank0]:   File "{SITE}/deepspeed/comm/torch.py", line 209, in all_gather_into_tensor
[rank0]:     return work.wait()
[rank0]:            ^^^^^^^^^^^
[rank0]: ValueError: the loss went NaN
"""
RANK1 = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/x/train.py", line 6, in <module>
[rank1]:     dist.barrier()
[rank1]: RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:13200
"""
LAUNCHER = """\
Traceback (most recent call last):
  File "/usr/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_05:45:42
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 26785)
"""


def test_the_rank_that_raised_first_is_whole_and_named_and_the_others_one_line_each():
    found = [*tracebacks("launcher.log", LAUNCHER, None), *tracebacks("ranks/1/stderr.log", RANK1, 1),
             *tracebacks("ranks/0/stderr.log", RANK0, 0)]
    c = crash(found, root_rank(LAUNCHER))
    assert c.first.rank == 0 and c.first.error == "ValueError: the loss went NaN"
    assert c.heading == "rank 0 raised first (ranks/0/stderr.log, the launcher's root cause)"
    # whole lines: the file name and the line number at the end of a long path are kept
    assert f'  File "{SITE}/deepspeed/comm/torch.py", line 209, in all_gather_into_tensor' in c.first.lines
    assert c.first.lines[0] == "Traceback (most recent call last):" and c.first.lines[-1] == "ValueError: the loss went NaN"
    assert not any("Warning" in ln for ln in c.first.lines)  # the log's line before it is not the traceback
    assert c.other_lines() == ["rank 1 also raised: RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection "
                               "closed by peer [127.0.0.1]:13200"]


def test_without_a_root_cause_a_consequence_does_not_come_first():
    """Rank 0 failed because rank 1 went away: rank 1 raised first, whatever the rank order."""
    reset = "[rank0]: Traceback (most recent call last):\n[rank0]:   File \"a.py\", line 1, in f\n" \
            "[rank0]: RuntimeError: Connection reset by peer\n"
    real = "[rank1]: Traceback (most recent call last):\n[rank1]:   File \"a.py\", line 2, in g\n" \
           "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    c = crash(tracebacks("launcher.log", reset + real, None))  # one stream, the ranks by their prefixes
    assert (c.first.rank, c.first.error) == (1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert c.heading == "rank 1 raised first (launcher.log)" and c.root_rank is None
    # a root cause named by the launcher wins over the rule
    assert crash(tracebacks("launcher.log", reset + real, None), root=0).first.rank == 0


def test_a_chain_is_one_traceback_and_a_message_keeps_its_lines_up_to_a_blank_one():
    log = """\
Traceback (most recent call last):
  File "x.py", line 3, in load
    open(p)
FileNotFoundError: [Errno 2] No such file or directory: 'ckpt/0.pt'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "x.py", line 9, in <module>
    load()
RuntimeError: could not load the checkpoint:
  the shard of rank 0 is missing

step 12 done
"""
    (t,) = tracebacks("ranks/rank0.log", log, 0)
    assert t.error == "RuntimeError: could not load the checkpoint:"
    assert "FileNotFoundError: [Errno 2] No such file or directory: 'ckpt/0.pt'" in t.lines
    assert "The above exception was the direct cause of the following exception:" in t.lines
    assert t.lines[-1] == "  the shard of rank 0 is missing" and "step 12 done" not in t.lines


def test_interleaved_ranks_of_one_log_are_told_apart_and_a_launcher_traceback_is_no_ranks():
    log = ("[rank1]: Traceback (most recent call last):\n[rank0]: Traceback (most recent call last):\n"
           "[rank1]:   File \"t.py\", line 4, in <module>\n[rank0]:   File \"t.py\", line 7, in <module>\n"
           "[rank0]: KeyError: 'labels'\n[rank1]: KeyError: 'labels'\n")
    c = crash(tracebacks("launcher.log", log, None))
    assert (c.first.rank, c.first.lines) == (0, ("Traceback (most recent call last):",
                                                 '  File "t.py", line 7, in <module>', "KeyError: 'labels'"))
    assert [t.rank for t in c.others] == [1]
    only_launcher = crash(tracebacks("launcher.log", LAUNCHER, None))
    assert only_launcher.first.rank is None and only_launcher.first.consequence and only_launcher.others == ()
    assert crash([]) == Crash(None, ()) and crash([]).heading == ""


def test_read_crash_reads_the_run_folder(tmp_path: Path):
    (tmp_path / "ranks" / "0").mkdir(parents=True)
    (tmp_path / "ranks" / "1").mkdir(parents=True)
    (tmp_path / "ranks" / "0" / "stderr.log").write_text(RANK0)
    (tmp_path / "ranks" / "1" / "stderr.log").write_text(RANK1)
    (tmp_path / "launcher.log").write_text(LAUNCHER)
    c = read_crash(tmp_path)
    assert c.first.rank == 0 and c.first.log == "ranks/0/stderr.log" and c.root_rank == 0
