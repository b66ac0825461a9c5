"""grid: the runs of a store as one table per case, and what is said of the points that all skipped."""

from __future__ import annotations

from pathlib import Path

from dsbisect.render import grid
from dsbisect.core.model import Outcome, Point
from dsbisect.records.run import Evidence, Host, InputFile, RunFacts, SkipCause
from dsbisect.store.store import Store


def _run(st: Store, case: str, version: str, outcome: Outcome, reason: str = "",
         cause: SkipCause | None = None, **facts):
    rid = st.start_run(case, f"key-{case}", Point(versions=(("deepspeed", version),)), "env", 1)
    st.finish_run(rid, outcome, 0 if outcome is Outcome.PASS else None, 1.0, reason=reason,
                  evidence=Evidence(skip_cause=cause), facts=RunFacts.of(**facts))
    return st.run(rid)


def _skip_lines(runs) -> list[tuple[str, str]]:
    return grid.skip_lines(grid.case_views(grid.grid(runs)))


def test_the_recorded_cause_not_the_words_decides_what_a_skip_says(tmp_path):
    """A skip the machine caused reads as the subject's verb, with a hint to a case that ran here;
    another cause says its reason as it is, whatever words the reason holds."""
    st = Store(tmp_path)
    ran = [_run(st, "cpu", v, Outcome.PASS) for v in ("0.12.2", "0.12.3")]
    gpus = [_run(st, "gpu", v, Outcome.SKIP, "needs 2 CUDA GPUs; this machine has 0", SkipCause.GPUS)
            for v in ("0.12.2", "0.12.3")]
    assert _skip_lines(ran + gpus) == [("2 points of gpu need 2 CUDA GPUs; this machine has 0", "try --case cpu")]
    # words that once decided it, under other causes: no verb, no hint
    venv = [_run(st, "venv", "0.12.2", Outcome.SKIP, "venv could not be built: no wheel of torch for this machine",
                 SkipCause.VENV)]
    script = [_run(st, "own", "0.12.2", Outcome.SKIP, "needs a dataset; exit 125", SkipCause.EXIT_125)]
    lines = _skip_lines(ran + venv + script)
    assert ("1 point of venv: venv could not be built: no wheel of torch for this machine", "") in lines
    assert ("1 point of own: needs a dataset; exit 125", "") in lines
    # one point needs; nothing ran anywhere: no case to suggest
    (only,) = _skip_lines(gpus[:1])
    assert only == ("1 point of gpu needs 2 CUDA GPUs; this machine has 0", "")


def test_skips_of_one_reason_and_cause_are_one_line_for_all_their_cases(tmp_path):
    st = Store(tmp_path)
    runs = [_run(st, case, "0.12.2", Outcome.SKIP, "needs 8 CUDA GPUs; this machine has 0", SkipCause.GPUS)
            for case in ("a", "b")]
    runs.append(_run(st, "c", "0.12.2", Outcome.SKIP, "import check: import deepspeed failed", SkipCause.IMPORT))
    assert _skip_lines(runs) == [("2 points of 2 cases (a, b) need 8 CUDA GPUs; this machine has 0", ""),
                                 ("1 point of c: import check: import deepspeed failed", "")]
    view = grid.case_views(grid.grid(runs))[2]
    assert view.skipped() == "import check: import deepspeed failed" and view.skip_cause() is SkipCause.IMPORT


def test_a_cell_is_its_worst_outcome_shown_by_its_last_such_run(tmp_path):
    st = Store(tmp_path)
    runs = [_run(st, "c", "0.12.4", o, r) for o, r in ((Outcome.FAIL, "first"), (Outcome.PASS, ""),
                                                        (Outcome.FAIL, "second"))]
    c = grid.cell(runs)
    assert c.outcome is Outcome.FAIL and c.shown.id == runs[2].id and c.why == "second"
    assert c.tally == "fail 2, pass 1" and c.text.startswith(f"FAIL 1.0 s #{runs[2].id}")
    assert not hasattr(c, "last")


def test_displayable_keeps_what_renders_and_sets_aside_what_does_not(tmp_path):
    """Values inside the facts of other types than a run writes (a hand-edited row) are made
    text or left out; the known keys of another shape are not shown; everything else is."""
    st = Store(tmp_path)
    r = _run(st, "c", "0.12.4", Outcome.PASS)
    odd = RunFacts.from_json({"gpus": [1, "H200"], "versions": {"torch": 2}, "cuda": None, "newer": {"x": 1},
                              "host": {"name": "n", "cpus": "many", "gpus": ["A", 7]}, "inputs": [{"path": "a"}, 5]})
    shown = grid.displayable(type(r)(**{**r.__dict__, "facts": odd})).facts
    assert shown.gpus == ("1", "H200") and shown.versions == {"torch": "2"}
    assert shown.inputs == (InputFile(path="a"),) and shown.host == Host(name="n", gpus=("A", "7"))
    assert shown.to_json() == {"gpus": ["1", "H200"], "versions": {"torch": "2"}, "newer": {"x": 1},
                               "host": {"name": "n", "gpus": ["A", "7"]}, "inputs": [{"path": "a"}]}


def test_a_case_view_lists_the_command_its_runs_ran(tmp_path):
    st = Store(tmp_path)
    runs = [_run(st, "c", "0.12.4", Outcome.PASS, command=["deepspeed", "train.py", "--x", "a b"])]
    (view,) = grid.case_views(grid.grid(runs))
    assert view.commands == ("deepspeed train.py --x 'a b'",)
    assert Path(runs[0].run_dir).is_dir()


# ------------------------------------------------------------------ variants


def _keyed(st: Store, case: str, key: str, version: str, outcome: Outcome, command=None, inputs=None,
           fingerprint=None, reason: str = "", cause: SkipCause | None = None):
    rid = st.start_run(case, key, Point(versions=(("dsb-toy", version),)), "env", 1)
    facts = {k: v for k, v in (("command", command), ("inputs", inputs), ("fingerprint", fingerprint)) if v}
    st.finish_run(rid, outcome, None, 2.0, reason=reason, evidence=Evidence(skip_cause=cause),
                  facts=RunFacts.from_json(facts))
    return st.run(rid)


def _prints(fp_files, env=()) -> dict:
    return {"format": 1, "files": [list(f) for f in fp_files], "env": [list(e) for e in env],
            "interpreter": {"executable": "/usr/bin/python3", "python": "3.12.3", "torch": "2.4.0", "cuda": ""},
            "accelerator": "cpu"}


def test_one_script_under_several_launchers_is_one_variant_each_and_no_run_is_dropped(tmp_path):
    """The same fail_rank1.py under torchrun, accelerate, `python x.py` and python -m
    torch.distributed.run: four case keys of one name, each its own table, named by its launcher."""
    st = Store(tmp_path)
    lines = {"k-torchrun": ["torchrun", "--nproc-per-node", "2", "fail_rank1.py"],
             "k-accelerate": ["accelerate", "launch", "--num_processes", "2", "fail_rank1.py"],
             "k-python": ["python", "fail_rank1.py"],
             "k-module": ["python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "fail_rank1.py"]}
    runs = [_keyed(st, "fail_rank1", key, v, Outcome.PASS if v == "1.0.0" else Outcome.FAIL, command=line,
                   reason="ValueError: nan" if v != "1.0.0" else "")
            for key, line in lines.items() for v in ("1.0.0", "1.1.0")]
    g = grid.grid(runs)
    assert g.cases == ("fail_rank1 [torchrun]", "fail_rank1 [accelerate launch]", "fail_rank1 [python fail_rank1.py]",
                       "fail_rank1 [python -m torch.distributed.run]")
    assert sorted(i for v in g.variants for i in v.run_ids) == sorted(r.id for r in runs)
    assert {r.id for c in g.cells for r in c.runs} == {r.id for r in runs}  # every run in a cell
    # the same launcher with other arguments: the command lines tell them apart
    other = [_keyed(st, "fail_rank1", "k-torchrun-4", "1.1.0", Outcome.FAIL,
                    command=["torchrun", "--nproc-per-node", "4", "fail_rank1.py"])]
    g = grid.grid(runs[:2] + other)
    assert g.cases == ("fail_rank1 [torchrun --nproc-per-node 2 fail_rank1.py]",
                       "fail_rank1 [torchrun --nproc-per-node 4 fail_rank1.py]")


def test_an_edited_script_and_earlier_inputs_are_variants_named_by_what_differs(tmp_path):
    st = Store(tmp_path)
    old = [_keyed(st, "x", "k1", v, Outcome.FAIL, inputs=[{"path": "/p/x.py", "sha256": "aaaaaaaa11112222"}])
           for v in ("1.0.0", "1.1.0")]
    new = [_keyed(st, "x", "k2", "1.1.0", Outcome.PASS, inputs=[{"path": "/p/x.py", "sha256": "bbbbbbbb33334444"}])]
    g = grid.grid(old + new)
    assert g.cases == ("x [script aaaaaaaa]", "x [script bbbbbbbb]")
    # one key, run again at one point after MY_FIX was set: the earlier run is a variant of its own
    before = _keyed(st, "y", "k3", "1.1.0", Outcome.FAIL, fingerprint=_prints([("/p/y.py", "1")]))
    other = _keyed(st, "y", "k3", "1.0.0", Outcome.PASS, fingerprint=_prints([("/p/y.py", "1")]))
    after = _keyed(st, "y", "k3", "1.1.0", Outcome.PASS, fingerprint=_prints([("/p/y.py", "1")], [("MY_FIX", "d1")]))
    g = grid.grid([before, other, after])
    assert g.cases == ("y", "y [earlier inputs (since: MY_FIX set)]")
    (latest, earlier) = g.variants
    assert latest.run_ids == (other.id, after.id) and earlier.run_ids == (before.id,) and earlier.earlier


def test_two_case_names_of_one_key_show_the_same_runs_and_the_skip_line_counts_both(tmp_path):
    """checkpoint_after_training and its _nofill twin are one key on a CPU machine: the runs are
    recorded under the first name, and both names show them (12 points of 3 cases, not 9 of 2)."""
    st = Store(tmp_path)
    why = "needs 2 CUDA GPUs; this machine has 0"
    runs = [_keyed(st, "zero3", "kz", f"1.{i}.0", Outcome.SKIP, reason=why, cause=SkipCause.GPUS) for i in range(6)]
    runs += [_keyed(st, "ckpt", "kc", f"1.{i}.0", Outcome.SKIP, reason=why, cause=SkipCause.GPUS) for i in range(3)]
    names = {"kz": ("zero3",), "kc": ("ckpt", "ckpt_nofill")}
    shown = grid.named(runs, names)
    assert _skip_lines(shown) == [("12 points of 3 cases (zero3, ckpt, ckpt_nofill) need 2 CUDA GPUs; "
                                   "this machine has 0", "")]
    assert [r.case_name for r in grid.named(runs, names, ["ckpt_nofill"]) if r.case_name == "ckpt_nofill"] == \
        ["ckpt_nofill"] * 3
    g = grid.grid(shown)
    assert dict((v.label, v.same_as) for v in g.variants)["ckpt_nofill"] == ("ckpt",)
