"""Records -> grid, Markdown and JSON: what a user pastes into an issue says what ran where."""

from __future__ import annotations

import json

from conftest import make_case
from dsbisect import report as rep
from dsbisect.bisection import Request, Result, Step
from dsbisect.model import Answer, Outcome, Point, RegressOn, Stage, Verdict
from dsbisect.store import Store

HOST = {"name": "gpu-node-7", "platform": "Linux-6.1", "cpus": 64, "gpus": ["NVIDIA H200", "NVIDIA H200"]}
FACTS = {"python": "3.12.3", "versions": {"torch": "2.11.0", "deepspeed": "0.12.4"}, "cuda": "13.0",
         "nccl": "2.28.9", "gpus": ["NVIDIA H200", "NVIDIA H200"], "host": HOST,
         "shadowed": [["numpy", "2.1.0", "1.26.4"]]}


def _record(st: Store, case: str, version: str, outcome: Outcome, **kw):
    point = Point(versions=(("deepspeed", version),))
    rid = st.start_run(case, f"key-{case}", point, "env", kw.pop("attempt", 1))
    st.finish_run(rid, outcome, kw.pop("exit_code", None), kw.pop("seconds", 30.0), facts=FACTS, **kw)
    return st.run(rid)


def test_grid_rows_cells_and_the_runs_hosts(tmp_path):
    st = Store(tmp_path)
    runs = [_record(st, "seed", "0.12.3", Outcome.PASS, exit_code=0),
            _record(st, "seed", "0.12.4", Outcome.HANG, signature="rank 0 in REDUCE numel 2 at SeqNum 1"),
            _record(st, "smoke", "0.12.4", Outcome.SKIP, reason="needs 2 CUDA GPUs; this machine has 0", seconds=0)]
    g = rep.grid(runs)
    assert g.cases == ("seed", "smoke")
    assert [label for label, _ in g.rows] == ["deepspeed 0.12.3", "deepspeed 0.12.4"]
    assert dict(g.rows)["deepspeed 0.12.4"]["seed"].text == "HANG (30 s)"

    md = rep.grid_markdown(g, "dsbisect run", compat=("numpy-bufsize",))
    assert "| deepspeed 0.12.4 | ⏳ HANG (30 s) | ⏭️ SKIP |" in md
    assert "- HANG `seed` · deepspeed 0.12.4: rank 0 in REDUCE numel 2 at SeqNum 1 (run 2)" in md
    assert "host gpu-node-7: Linux-6.1, 64 CPUs, 2 GPUs (NVIDIA H200)" in md  # the runs' machine
    assert "python 3.12.3, torch 2.11.0, CUDA 13.0, NCCL 2.28.9, 2× NVIDIA H200" in md
    assert "point venvs shadow the base's numpy 2.1.0 with 1.26.4" in md
    assert "compat shim in use (a possible confounder): numpy-bufsize" in md

    data = rep.grid_json(g, ("numpy-bufsize",))
    assert data["hosts"] == [HOST] and data["compat"] == ["numpy-bufsize"]
    assert [r["outcome"] for r in data["runs"]] == ["pass", "hang", "skip"]
    assert json.loads(json.dumps(data)) == data


def test_a_later_attempt_replaces_an_earlier_one_in_the_grid(tmp_path):
    st = Store(tmp_path)
    first = _record(st, "seed", "0.12.4", Outcome.SKIP, reason="index down", seconds=0)
    again = _record(st, "seed", "0.12.4", Outcome.FAIL, reason="RuntimeError: boom", exit_code=1)
    cell = dict(rep.grid([first, again]).rows)["deepspeed 0.12.4"]["seed"]
    assert cell.outcome is Outcome.FAIL and cell.runs == (again,)


def test_runs_before_hosts_were_recorded_say_so(tmp_path):
    st = Store(tmp_path)
    point = Point(versions=(("deepspeed", "0.12.4"),))
    rid = st.start_run("seed", "k", point, "env", 1)
    st.finish_run(rid, Outcome.PASS, 0, 1.0, facts={})
    assert rep.host_lines([st.run(rid)]) == ["host: not recorded (runs made by a dsbisect before 0.1.1)"]


def test_bisect_markdown_names_the_verdict_the_culprit_and_how_to_reproduce(tmp_path):
    st = Store(tmp_path)
    case = make_case(tmp_path, name="seed")
    req = Request(package="deepspeed", good="0.12.2", bad="0.12.4", case=case, pins=("pydantic<2",),
                  regress_on=RegressOn.ANY)
    good = _record(st, "seed", "0.12.3", Outcome.PASS, exit_code=0)
    bad = _record(st, "seed", "0.12.4", Outcome.FAIL, reason="DistBackendError: unhandled cuda error", exit_code=1)
    steps = (Step(Stage.RELEASE, "0.12.3", "0.12.3", None, "", Verdict.GOOD, (good,)),
             Step(Stage.RELEASE, "0.12.4", "0.12.4", None, "", Verdict.BAD, (bad,)))
    result = Result(req, ("0.12.2", "0.12.3", "0.12.4"), steps, Answer.FOUND, "0.12.3", "0.12.4")
    md = rep.bisect_markdown(result, "dsbisect bisect deepspeed 0.12.2 0.12.4 --case seed")
    assert "### dsbisect: deepspeed 0.12.2 → 0.12.4 (regression, regress on any)" in md
    assert "| release | 0.12.4 | ❌ FAIL | bad | 1 | 30.0 | DistBackendError: unhandled cuda error |" in md
    assert "- verdict: found" in md and "- first bad release: deepspeed 0.12.4" in md
    assert "- at the bad point: DistBackendError: unhandled cuda error" in md
    assert "- held pins: pydantic<2" in md
    assert "```\ndsbisect bisect deepspeed 0.12.2 0.12.4 --case seed\n```" in md


def test_envs_table_lists_what_the_cache_holds(tmp_path):
    from rich.console import Console

    from dsbisect.envs import CachedEnv

    env = CachedEnv("abc", tmp_path, "layered", ("deepspeed==0.12.4",), None, (("numpy", "2.1", "1.26"),),
                    80_000_000, 0.4)
    console = Console(width=200, record=True)
    console.print(rep.envs_table([env]))
    text = console.export_text()
    assert "deepspeed==0.12.4" in text and "numpy 2.1→1.26" in text and "80" in text and "0.4 s" in text
