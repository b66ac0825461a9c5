"""show: one run, from its record and its folder."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from dsbisect.bisect.marks import record
from dsbisect.run.matrix import script_case
from dsbisect.core.model import Outcome, Point
from dsbisect.records.run import Evidence, RunFacts
from dsbisect.render.show import render_run
from dsbisect.store.store import Store

P = Point(versions=(("dsb-toy", "1.2.0"),))


def _text(r) -> str:
    console = Console(width=120, record=True, file=io.StringIO(), force_terminal=False)
    console.print(render_run(r))
    return console.export_text()


def test_a_run_shows_its_environment_notes_escaped_pids_and_its_logs(tmp_path):
    st = Store(tmp_path)
    rid = st.start_run("c", "k", P, "env", 1)
    run_dir = Path(st.run(rid).run_dir)
    (run_dir / "ranks").mkdir()
    (run_dir / "ranks" / "rank0.log").write_text("step 1\nValueError: dsb_toy: the loss went NaN\n")
    st.finish_run(rid, Outcome.FAIL, 1, 3.25, reason="ValueError: dsb_toy: the loss went NaN",
                  evidence=Evidence.of(notes=["a note of the run"], escaped=[4242]),
                  facts=RunFacts.of(python="3.12.3", versions={"torch": "2.4.0", "dsb-toy": "1.2.0"}, cuda="12.4",
                                    gpus=["NVIDIA H200"]))
    text = _text(st.run(rid))
    assert f"run {rid}  FAIL  c · dsb-toy 1.2.0" in text
    assert "python 3.12.3, torch 2.4.0, CUDA 12.4, 1× NVIDIA H200" in text
    assert "note: a note of the run" in text and "stopped by their tag: pid(s) 4242" in text
    assert "ranks/rank0.log" in text and "the loss went NaN" in text
    assert "marked" not in text


def test_a_mark_shows_who_gave_it_and_has_no_environment(tmp_path):
    st = Store(tmp_path)
    (tmp_path / "rep.py").write_text("pass\n")
    r = record(st, script_case(tmp_path / "rep.py", 2), P, "bad", "hang on 64 GPUs")
    text = _text(r)
    assert "FAIL (marked by hand)" in text and "marked      bad by hand: hang on 64 GPUs" in text
    assert "environment —" in " ".join(text.split())


def test_a_record_of_odd_shapes_shows_as_far_as_it_goes(tmp_path):
    """Values the store does not check, of another shape than a run writes (a hand edit, another
    dsbisect): kept aside, shown without a traceback, written back as they were."""
    st = Store(tmp_path)
    rid = st.start_run("c", "k", P, "env", 1)
    st.finish_run(rid, Outcome.FAIL, 1, 1.0, reason="boom")
    evidence = '{"peak_rss": "big", "error_frames": "a.py:f", "newer": [1]}'
    facts = '{"versions": {"torch": "2"}, "fingerprint": [1], "index": null}'
    st.db.execute("UPDATE runs SET evidence=?, facts=? WHERE id=?", (evidence, facts, rid))
    r = st.run(rid)
    assert r.evidence.peak_rss is None and r.evidence.error_frames is None and r.facts.fingerprint is None
    assert r.evidence.to_json() == {"peak_rss": "big", "error_frames": "a.py:f", "newer": [1]}
    assert r.facts.extra == {"fingerprint": [1], "index": None} and r.identity().frames == ()
    text = _text(r)
    assert "torch 2, no GPU" in text and "reason      boom" in text


SITE = "/home/u/.cache/dsbisect/envs/d0a322101f9b755b/lib/python3.11/site-packages"
CRASHED = f"""\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/x/train.py", line 12, in <module>
[rank1]:     engine.step()
[rank1]:   File "{SITE}/deepspeed/runtime/zero/stage_1_and_2.py", line 2012, in step
[rank1]:     self._all_gather()
[rank1]:   File "{SITE}/deepspeed/comm/torch.py", line 209, in all_gather_into_tensor
[rank1]:     return work.wait()
[rank1]: RuntimeError: dsb: all_gather got a tensor of the wrong size (token hf_abcdefghijklmnopqrstuvwxyz0123)
"""
PEER = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/x/train.py", line 13, in <module>
[rank0]:     dist.barrier()
[rank0]: RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:13200
"""
# What faulthandler wrote of rank 1 while its op compiled, long before it died elsewhere.
STALE = f"""\
Current thread 0x00007f0001 (most recent call first):
  File "{SITE}/torch/utils/file_baton.py", line 42 in wait
  File "{SITE}/torch/utils/cpp_extension.py", line 2180 in _jit_compile
  File "/x/train.py", line 3 in <module>
"""


def _crashed_run(st: Store, logs: dict[str, str], stacks: dict[str, str] | None = None):
    rid = st.start_run("train", "k", P, "env", 1)
    run_dir = Path(st.run(rid).run_dir)
    for name, text in logs.items():
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text(text)
    for name, text in (stacks or {}).items():
        (run_dir / "stacks").mkdir(exist_ok=True)
        (run_dir / "stacks" / name).write_text(text)
    st.finish_run(rid, Outcome.FAIL, 1, 9.0, reason="RuntimeError: dsb: all_gather got a tensor of the wrong size",
                  facts=RunFacts.of(command=["torchrun", "--nproc-per-node", "2", "train.py", "--deepspeed", "ds.json"],
                                    inputs=[{"path": "/x/ds.json", "sha256": "0123456789abcdef0000", "bytes": 120,
                                             "copy": "inputs/00-ds.json"}]))
    return st.run(rid)


def _piped(r, width: int = 80) -> str:
    """As `dsbisect show` prints into a pipe or a file: the CLI's console, not a terminal."""
    console = Console(width=width, record=True, file=io.StringIO(), force_terminal=False, soft_wrap=True)
    console.print(render_run(r))
    return console.export_text()


def test_a_crash_shows_the_first_ranks_traceback_whole_the_command_and_no_stale_stack(tmp_path):
    st = Store(tmp_path)
    r = _crashed_run(st, {"ranks/0/stderr.log": PEER, "ranks/1/stderr.log": CRASHED}, {"rank1.pid77.txt": STALE})
    text = _piped(r)
    lines = text.splitlines()
    assert "  command     torchrun --nproc-per-node 2 train.py --deepspeed ds.json" in lines
    assert "  file        /x/ds.json (120 B, sha256 0123456789abcdef, a copy in inputs/00-ds.json)" in lines
    # rank 1 raised first (rank 0 only lost its peer), and its traceback is whole at 80 columns
    assert "── traceback: rank 1 raised first (ranks/1/stderr.log) ──" in lines
    assert f'  File "{SITE}/deepspeed/comm/torch.py", line 209, in all_gather_into_tensor' in lines
    assert "rank 0 also raised: RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer " \
           "[127.0.0.1]:13200" in lines
    # the log tails too: no line cut at the edge
    assert f'[rank1]:   File "{SITE}/deepspeed/runtime/zero/stage_1_and_2.py", line 2012, in step' in lines
    # the stack sampled while the op compiled is not shown as where the rank was
    assert "_jit_compile" not in text and "last stack seen" not in text
    assert "hf_abcdefghijklmnopqrstuvwxyz0123" not in text  # the token in the message is masked


def test_without_a_traceback_a_sampled_stack_says_when_it_was_taken(tmp_path):
    st = Store(tmp_path)
    r = _crashed_run(st, {"ranks/1/stderr.log": "Segmentation fault (core dumped)\n"}, {"rank1.pid77.txt": STALE})
    text = _piped(r, width=200)
    heading = next(ln for ln in text.splitlines() if ln.startswith("── rank 1:"))
    assert " s into the run, before the run ended" in heading and "not necessarily where it failed" in heading
    assert "_jit_compile" in text and "traceback:" not in text
