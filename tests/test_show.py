"""show: one run, from its record and its folder."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from dsbisect.marks import record
from dsbisect.matrix import script_case
from dsbisect.model import Outcome, Point
from dsbisect.records import Evidence, RunFacts
from dsbisect.show import render_run
from dsbisect.store import Store

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
