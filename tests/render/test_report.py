"""Records -> grid, Markdown and JSON: what a user pastes into an issue says what ran where.

The grid must read at 80 columns with long case names (one table per case, version order,
run ids in the cells, one line for cases that skipped everywhere), piped output must keep
signatures whole, the Markdown must carry what DeepSpeed's bug template asks, and nothing
shown may carry a secret.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from conftest import make_case
from rich.console import Console

from dsbisect.render import report as rep
from dsbisect.records.run import Evidence, RunFacts
from dsbisect.records.results import Request, Result, Step
from dsbisect.core.model import Answer, Outcome, Point, RegressOn, Stage, Verdict
from dsbisect.store.store import Store
from dsbisect.records.bisections import AskedFor, BisectionStatus

HOST = {"name": "gpu-node-7", "platform": "Linux-6.1", "cpus": 64, "gpus": ["NVIDIA H200", "NVIDIA H200"]}
FACTS = {"python": "3.12.3", "versions": {"torch": "2.11.0", "deepspeed": "0.12.4"}, "cuda": "13.0",
         "nccl": "2.28.9", "gpus": ["NVIDIA H200", "NVIDIA H200"], "host": HOST,
         "shadowed": [["numpy", "2.1.0", "1.26.4"]]}
SIG = ("rank 0 in _ALLGATHER_BASE numel 2048 at SeqNum 122, rank 1 in _ALLGATHER_BASE numel 2048 at SeqNum 121; "
       "first mismatch at SeqNum 121: rank 0 numel 32 (completed) vs rank 1 numel 2048 — "
       "partition_parameters.py:_allgather_params_coalesced ← modeling_utils.py:_load_pretrained_model")
LONG = "zero3_from_pretrained_bert_lm_head_model_hangs_in_allgather_under_zero3"
NO_GPU = "needs 2 CUDA GPUs; this machine has 0"
GPUS = {"skip_cause": "gpus"}  # the cause the runner records with such a skip
PINS = ("pydantic<2", "huggingface-hub==0.20.3", "tokenizers==0.15.2")


def _record(st: Store, case: str, version: str, outcome: Outcome, **kw):
    point = Point(versions=(("deepspeed", version),))
    rid = st.start_run(case, f"key-{case}", point, "env", kw.pop("attempt", 1))
    st.finish_run(rid, outcome, kw.pop("exit_code", None), kw.pop("seconds", 30.0), facts=RunFacts.from_json(kw.pop("facts", FACTS)),
                  evidence=Evidence.from_json(kw.pop("evidence", {})), **kw)
    return st.run(rid)


def _point_record(st: Store, case: str, versions: dict, outcome: Outcome, pins=(), seconds=30.0, **kw):
    rid = st.start_run(case, f"key-{case}", Point(versions=tuple(versions.items()), pins=pins), "env", 1)
    st.finish_run(rid, outcome, None, seconds, facts=RunFacts.from_json(kw.pop("facts", {})),
                  evidence=Evidence.from_json(kw.pop("evidence", {})), **kw)
    return st.run(rid)


def _render(renderable, piped: bool) -> str:
    """As the CLI prints it (a soft-wrapping console), 80 columns wide, on a terminal or a pipe."""
    console = Console(width=80, record=True, soft_wrap=True, file=io.StringIO(), force_terminal=not piped,
                      color_system=None)
    assert console.is_terminal is not piped
    console.print(renderable)
    return console.export_text()


def _matrix_runs(st: Store) -> list:
    """Seed 2 on a machine with GPUs, recorded out of version order, plus a one-axis case and
    three cases that skipped everywhere (two for one reason)."""
    runs = []
    for t in ("4.39.2", "4.36.2", "4.37.0"):
        for d in ("0.10.0", "0.9.5"):
            bad = d == "0.9.5" and t != "4.36.2"
            runs.append(_point_record(st, LONG, {"deepspeed": d, "transformers": t},
                                      Outcome.HANG if bad else Outcome.PASS, PINS, 62.4 if bad else 41.0,
                                      signature=SIG if bad else ""))
    for v in ("0.12.4", "0.12.10", "0.12.2"):
        runs.append(_point_record(st, "checkpoint_after_training", {"deepspeed": v},
                                  Outcome.FAIL if v != "0.12.2" else Outcome.PASS, ("pydantic<2",), 95.0,
                                  reason="RuntimeError: boom" if v != "0.12.2" else ""))
    for case in ("gpu_only_one", "gpu_only_two_with_a_long_name_too"):
        for v in ("0.12.2", "0.12.3", "0.12.4"):
            runs.append(_point_record(st, case, {"deepspeed": v}, Outcome.SKIP, seconds=0, reason=NO_GPU, evidence=GPUS))
    runs.append(_point_record(st, "x8", {"deepspeed": "0.12.2"}, Outcome.SKIP, seconds=0,
                              reason="needs 8 CUDA GPUs; this machine has 0", evidence=GPUS))
    return runs


# ------------------------------------------------------------------------ grid


def test_grid_rows_cells_and_the_runs_hosts(tmp_path):
    st = Store(tmp_path)
    runs = [_record(st, "seed", "0.12.4", Outcome.HANG, signature="rank 0 in REDUCE numel 2 at SeqNum 1"),
            _record(st, "seed", "0.12.3", Outcome.PASS, exit_code=0),
            _record(st, "smoke", "0.12.4", Outcome.SKIP, reason="needs 2 CUDA GPUs; this machine has 0", seconds=0,
                        evidence=GPUS)]
    g = rep.grid(runs)
    assert g.cases == ("seed", "smoke")
    assert [label for label, _ in g.rows] == ["deepspeed 0.12.3", "deepspeed 0.12.4"]  # version order
    assert dict(g.rows)["deepspeed 0.12.4"]["seed"].text == "HANG 30 s #1"

    md = rep.grid_markdown(g, "dsbisect run", compat=("numpy-bufsize",))
    assert "#### seed\n\n| deepspeed | outcome |\n|---|---|\n" in md
    assert "| deepspeed 0.12.3 | ✅ PASS 30 s #2 |\n| deepspeed 0.12.4 | ⏳ HANG 30 s #1 |" in md
    assert "- ⏳ HANG #1 (0.12.4): rank 0 in REDUCE numel 2 at SeqNum 1" in md
    assert "- ⏭️ SKIP 1 point of smoke needs 2 CUDA GPUs; this machine has 0 — try `--case seed`" in md
    assert "host gpu-node-7: Linux-6.1, 64 CPUs, 2 GPUs (NVIDIA H200)" in md  # the runs' machine
    assert "python 3.12.3, torch 2.11.0, CUDA 13.0, NCCL 2.28.9, 2× NVIDIA H200" in md
    assert "point venvs shadow the base's numpy 2.1.0 with 1.26.4" in md
    assert "compat shim in use (a possible confounder): numpy-bufsize" in md

    data = rep.grid_json(g, ("numpy-bufsize",))
    assert data["hosts"] == [HOST] and data["compat"] == ["numpy-bufsize"]
    assert [r["outcome"] for r in data["runs"]] == ["pass", "hang", "skip"]
    assert data["grid"][1]["cells"]["seed"] == {"outcome": "hang", "counts": {"hang": 1}, "seconds": 30.0, "run": 1}
    assert json.loads(json.dumps(data)) == data


def test_the_grid_reads_at_80_columns_one_table_per_case_in_version_order(tmp_path):
    st = Store(tmp_path)
    g = rep.grid(_matrix_runs(st))
    text = _render(rep.grid_renderable(g, "dsbisect run matrix.yaml", piped=False), piped=False)
    lines = text.splitlines()
    assert all(len(ln) <= 80 for ln in lines), text
    assert "…" not in text  # no cell cut

    # Seed 2: deepspeed rows, transformers columns, both in PEP 440 order; run ids in the cells.
    assert LONG in lines
    header = next(ln for ln in lines if "4.36.2" in ln)
    assert header.index("4.36.2") < header.index("4.37.0") < header.index("4.39.2")
    assert lines.index(header) - 1 == next(i for i, ln in enumerate(lines) if ln.count("transformers") == 3)
    row_095 = next(ln for ln in lines if ln.startswith("│ 0.9.5 "))
    row_010 = next(ln for ln in lines if ln.startswith("│ 0.10.0 "))
    assert lines.index(row_095) < lines.index(row_010)
    hang_ids = sorted(r.id for c in g.cells for r in c.runs if r.outcome is Outcome.HANG)
    assert row_095.split("│")[2:5] == [" PASS 41 s #4 ", f" HANG 62 s #{hang_ids[1]} ", f" HANG 62 s #{hang_ids[0]} "]
    assert "held fixed: pydantic<2, huggingface-hub==0.20.3, tokenizers==0.15.2" in text  # once, under it
    assert text.count("pydantic<2, huggingface-hub") == 1

    # A one-axis case: one column of outcomes, 0.12.2 < 0.12.4 < 0.12.10.
    order = [ln.split("│")[1].strip() for ln in lines if ln.startswith("│ 0.12.")]
    assert order == ["0.12.2", "0.12.4", "0.12.10"]
    assert "FAIL #7 (0.12.4), #8 (0.12.10):" in text and "  RuntimeError: boom" in lines

    # Cases that skipped everywhere for one reason: one line, naming a case that ran; no table.
    assert text.count(NO_GPU.removeprefix("needs ")) == 1
    assert "gpu_only_one\n" not in text and "│ 0.12.3 " not in text
    piped = _render(rep.grid_renderable(g, "dsbisect run matrix.yaml"), piped=True)
    assert ("SKIP 6 points of 2 cases (gpu_only_one, gpu_only_two_with_a_long_name_too) need 2 CUDA GPUs; "
            f"this machine has 0 — try --case {LONG}") in piped.splitlines()
    assert f"SKIP 1 point of x8 needs 8 CUDA GPUs; this machine has 0 — try --case {LONG}" in piped.splitlines()


def test_piped_output_keeps_signatures_whole_on_their_own_lines(tmp_path):
    st = Store(tmp_path)
    g = rep.grid(_matrix_runs(st))
    piped = _render(rep.grid_renderable(g), piped=True)  # decided by the console: not a terminal
    assert "  " + SIG in piped.splitlines()
    terminal = _render(rep.grid_renderable(g), piped=False)
    assert SIG not in terminal and all(len(ln) <= 80 for ln in terminal.splitlines())
    assert "modeling_utils.py:_load_pretrained_model" in terminal  # wrapped, not cut
    # The CLI may also say so itself.
    assert "  " + SIG in _render(rep.grid_renderable(g, piped=True), piped=False).splitlines()


def test_a_case_whose_cells_do_not_fit_is_split_and_more_axes_go_into_the_row_label(tmp_path):
    st = Store(tmp_path)
    ts = ["4.36.2", "4.37.0", "4.38.1", "4.39.2", "4.40.0", "4.41.2", "4.42.0"]
    runs = [_point_record(st, "wide", {"deepspeed": d, "transformers": t}, Outcome.PASS, seconds=33)
            for d in ("0.9.5", "0.10.0", "0.11.1", "0.12.6", "0.13.0", "0.14.0", "0.15.0") for t in ts]
    runs += [_point_record(st, "three", {"deepspeed": d, "transformers": t, "accelerate": a, "torch": "2.4.0"},
                           Outcome.PASS) for d in ("0.10.0", "0.9.5") for t in ("4.36.2", "4.37.0")
             for a in ("0.30.0", "0.29.0")]
    text = _render(rep.grid_renderable(rep.grid(runs), piped=False), piped=False)
    assert all(len(ln) <= 80 for ln in text.splitlines()) and "…" not in text
    assert all(t in text for t in ts) and text.count("│ 0.15.0 ") == 2  # two tables of the same rows
    assert "│ 0.9.5, accelerate 0.29.0  │" in text and "deepspeed, accelerate" in text
    assert "held fixed: torch 2.4.0" in text


def test_a_later_attempt_replaces_an_earlier_one_in_the_grid(tmp_path):
    st = Store(tmp_path)
    first = _record(st, "seed", "0.12.4", Outcome.SKIP, reason="index down", seconds=0)
    again = _record(st, "seed", "0.12.4", Outcome.FAIL, reason="RuntimeError: boom", exit_code=1)
    cell = dict(rep.grid([first, again]).rows)["deepspeed 0.12.4"]["seed"]
    assert cell.outcome is Outcome.FAIL and cell.runs == (again,)


def test_repeated_runs_show_the_bad_run_and_the_tally(tmp_path):
    st = Store(tmp_path)
    runs = [_record(st, "seed", "0.12.4", o, attempt=i, seconds=s, signature="sig" if o is Outcome.HANG else "")
            for i, (o, s) in enumerate([(Outcome.PASS, 5.0), (Outcome.HANG, 61.0), (Outcome.PASS, 5.0)], start=1)]
    cell = rep.grid(runs).cells[0]
    assert cell.text == f"HANG 61 s #{runs[1].id} (hang 1, pass 2)"
    text = _render(rep.grid_renderable(rep.grid(runs), piped=False), piped=False)
    assert f"HANG 61 s #{runs[1].id}" in text and "hang 1, pass 2" in text


def test_runs_before_hosts_were_recorded_say_so(tmp_path):
    st = Store(tmp_path)
    point = Point(versions=(("deepspeed", "0.12.4"),))
    rid = st.start_run("seed", "k", point, "env", 1)
    st.finish_run(rid, Outcome.PASS, 0, 1.0, facts=RunFacts())
    assert rep.host_lines([st.run(rid)]) == ["host: not recorded (runs made by a dsbisect before 0.1.1)"]
    md = rep.grid_markdown(rep.grid([st.run(rid)]), "old")  # an old record renders what it has
    assert "| deepspeed 0.12.4 | ✅ PASS 1.0 s #1 |" in md and "**Command**" not in md and "topology" not in md


# -------------------------------------------------------------------- markdown


RICH_HOST = HOST | {"cpu_model": "AMD EPYC 9654 96-Core Processor", "ram_bytes": 2 * 1024**4,
                    "shm_bytes": 1024**4, "driver": "570.86.15",
                    "topology": "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-63\nGPU1\tNV18\t X \t0-63"}


def _command_run(st: Store, version: str, outcome: Outcome, **kw):
    """A run of a user's command line, with copies of the files it names kept in its folder."""
    point = Point(versions=(("deepspeed", version),), pins=("pydantic<2",))
    rid = st.start_run("train", "key-train", point, "env", 1)
    inputs = Path(st.run(rid).run_dir) / "inputs"
    inputs.mkdir()
    (inputs / "00-ds_config.json").write_text('{"train_batch_size": 8, "hub": "https://me:hunter2@hub.example"}\n')
    (inputs / "01-train.py").write_text("import deepspeed\n\n\n```\nprint('fenced')\n")
    (inputs / "02-big.yaml").write_text("x: 1\n" * 20_000)
    facts = FACTS | {"nvcc": "12.8.93", "host": RICH_HOST, "index": "--index-url https://me:hunter2@mirror/simple",
                     "command": ["deepspeed", "--num_gpus", "2", "train.py", "--deepspeed", "ds_config.json",
                                 "--hub", "https://me:hunter2@hub.example/x", "HF_TOKEN=hunter2"],
                     "inputs": [{"path": "ds_config.json", "sha256": "ab" * 32, "bytes": 63,
                                 "copy": "inputs/00-ds_config.json"},
                                {"path": "train.py", "sha256": "cd" * 32, "bytes": 40, "copy": "inputs/01-train.py"},
                                {"path": "big.yaml", "sha256": "ef" * 32, "bytes": 100_000, "copy": "inputs/02-big.yaml"},
                                {"path": "data.bin", "sha256": "12" * 32, "bytes": 9_000_000, "copy": None},
                                {"path": "evil.txt", "sha256": "34" * 32, "bytes": 10, "copy": "../../../etc/hostname"}]}
    st.finish_run(rid, outcome, None, 30.0, facts=RunFacts.from_json(facts),
                  evidence=Evidence.from_json(kw.pop("evidence", {})), **kw)
    return st.run(rid)


def _assert_issue_body(md: str) -> None:
    # The command, as a block.
    # (masked when recorded, so the command is quoted around the mask)
    assert ("```sh\ndeepspeed --num_gpus 2 train.py --deepspeed ds_config.json --hub 'https://***@hub.example/x' "
            "'HF_TOKEN=***'\n```") in md
    # The files it names, collapsed: content of small copies, name and hash of the rest.
    assert ("<details><summary>ds_config.json (63 B, sha256 abababababababab)</summary>\n\n```json\n"
            '{"train_batch_size": 8, "hub": "https://***@hub.example"}\n```\n\n</details>') in md
    assert "````python\nimport deepspeed\n\n\n```\nprint('fenced')\n````" in md  # a fence longer than the content's
    assert "- `big.yaml` (98 KiB, sha256 " + "ef" * 32 + "): over 64 KiB: not shown" in md
    assert "- `data.bin` (8.6 MiB, sha256 " + "12" * 32 + "): no copy kept\n- `evil.txt`" in md
    assert "- `evil.txt`" in md and "outside the run folder: not read" in md
    # ds_report-style facts beside torch/CUDA/NCCL.
    assert "python 3.12.3, torch 2.11.0, CUDA 13.0, NCCL 2.28.9, nvcc 12.8.93, 2× NVIDIA H200" in md
    assert ("host gpu-node-7: Linux-6.1, 64 CPUs (AMD EPYC 9654 96-Core Processor), 2 GPUs (NVIDIA H200), "
            "NVIDIA driver 570.86.15, RAM 2.0 TiB, /dev/shm 1.0 TiB") in md
    assert ("<details><summary>GPU topology of gpu-node-7 (nvidia-smi topo -m)</summary>\n\n```\n"
            "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-63") in md
    assert "- package index: --index-url https://***@mirror/simple" in md
    assert "hunter2" not in md and "\n\n\n" not in md.replace("import deepspeed\n\n\n", "")


def test_grid_markdown_carries_the_command_its_files_and_the_machine(tmp_path):
    st = Store(tmp_path)
    runs = [_command_run(st, "0.12.3", Outcome.PASS), _command_run(st, "0.12.4", Outcome.FAIL, reason="boom")]
    md = rep.grid_markdown(rep.grid(runs), "dsbisect run -- deepspeed train.py")
    _assert_issue_body(md)
    assert md.count("**Command**") == 1 and md.count("<summary>ds_config.json") == 1  # the same files, once


def test_bisect_markdown_names_the_verdict_the_culprit_and_how_to_reproduce(tmp_path):
    st = Store(tmp_path)
    case = make_case(tmp_path, name="seed")
    req = Request(package="deepspeed", good="0.12.2", bad="0.12.4", case=case, pins=("pydantic<2",),
                  regress_on=RegressOn.ANY)
    good = _record(st, "seed", "0.12.3", Outcome.PASS, exit_code=0)
    bad = _record(st, "seed", "0.12.4", Outcome.FAIL, reason="DistBackendError: unhandled cuda error", exit_code=1)
    result = _result(req, good, bad)
    md = rep.bisect_markdown(result, "dsbisect bisect deepspeed 0.12.2 0.12.4 --case seed")
    assert "### dsbisect: deepspeed 0.12.2 → 0.12.4 (regression, regress on any)" in md
    assert "| release | 0.12.4 | ❌ FAIL | bad | #2 | 30.0 | DistBackendError: unhandled cuda error |" in md
    assert "- verdict: found" in md and "- first bad release: deepspeed 0.12.4" in md
    assert "- at the bad point: DistBackendError: unhandled cuda error" in md
    assert "- held pins: pydantic<2" in md
    assert "```\ndsbisect bisect deepspeed 0.12.2 0.12.4 --case seed\n```" in md


def _result(req, good, bad) -> Result:
    steps = (Step(Stage.RELEASE, "0.12.3", "0.12.3", None, "", Verdict.GOOD, (good,)),
             Step(Stage.RELEASE, "0.12.4", "0.12.4", None, "", Verdict.BAD, (bad,)))
    return Result(req, ("0.12.2", "0.12.3", "0.12.4"), steps, Answer.FOUND, "0.12.3", "0.12.4")


def test_bisect_reports_carry_the_command_and_keep_details_whole_when_piped(tmp_path):
    st = Store(tmp_path)
    req = Request(package="deepspeed", good="0.12.2", bad="0.12.4", case=make_case(tmp_path, name="train"),
                  regress_on=RegressOn.ANY)
    reason = "torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:275, unhandled cuda error " * 3
    result = _result(req, _command_run(st, "0.12.3", Outcome.PASS),
                     _command_run(st, "0.12.4", Outcome.FAIL, reason=reason.strip()))
    _assert_issue_body(rep.bisect_markdown(result, "dsbisect bisect deepspeed 0.12.2 0.12.4 -- deepspeed train.py"))

    piped = _render(rep.bisect_renderable(result, "dsbisect bisect …"), piped=True)
    assert "detail" not in piped and "  " + reason.strip() in piped.splitlines()
    terminal = _render(rep.bisect_renderable(result, "dsbisect bisect …"), piped=False)
    assert all(len(ln) <= 80 for ln in terminal.splitlines()) and "detail" not in terminal
    wide = Console(width=160, record=True, file=io.StringIO(), force_terminal=True, color_system=None)
    wide.print(rep.bisect_renderable(result, "dsbisect bisect …"))
    assert "detail" in wide.export_text()  # a wide terminal keeps the column


def test_nothing_shown_carries_a_secret(tmp_path):
    st = Store(tmp_path)
    runs = [_command_run(st, "0.12.4", Outcome.HANG, signature="rank 0 in all_reduce at https://u:hunter2@x.org",
                         reason="WANDB_API_KEY=hunter2 was set")]
    g = rep.grid(runs)
    for shown in (_render(rep.grid_renderable(g, "t https://a:hunter2@b.c"), piped=True),
                  _render(rep.grid_renderable(g), piped=False),
                  rep.grid_markdown(g, "t"), json.dumps(rep.grid_json(g))):
        assert "hunter2" not in shown
    assert "tokenizers==0.15.2" in _render(rep.grid_renderable(rep.grid(_matrix_runs(st))), piped=True)


def test_envs_table_lists_what_the_cache_holds(tmp_path):
    from dsbisect.envs.venvs import CachedEnv

    env = CachedEnv("abc", tmp_path, "layered", ("deepspeed==0.12.4",), None, (("numpy", "2.1", "1.26"),),
                    80_000_000, 0.4)
    console = Console(width=200, record=True)
    console.print(rep.envs_table([env]))
    text = console.export_text()
    assert "deepspeed==0.12.4" in text and "numpy 2.1→1.26" in text and "80" in text and "0.4 s" in text


# ------------------------------------------------------ crashes and bisections


RANK0_TB = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/x/train.py", line 5, in <module>
[rank0]:     engine.step()
[rank0]:   File "/venv/lib/python3.12/site-packages/deepspeed/runtime/engine.py", line 2211, in step
[rank0]:     self._take_model_step(lr_kwargs)
[rank0]: ValueError: the loss went NaN at step 7 (WANDB_API_KEY=hunter2hunter2 was set)
"""


def _failed_with_logs(st: Store, version: str = "0.12.4"):
    r = _record(st, "seed", version, Outcome.FAIL, exit_code=1, reason="ValueError: the loss went NaN at step 7")
    (Path(r.run_dir) / "ranks").mkdir(exist_ok=True)
    (Path(r.run_dir) / "ranks" / "rank0.log").write_text("step 6\n" + RANK0_TB)
    (Path(r.run_dir) / "ranks" / "rank1.log").write_text(
        "[rank1]: Traceback (most recent call last):\n[rank1]:   File \"/x/train.py\", line 6, in <module>\n"
        "[rank1]: RuntimeError: Connection closed by peer [127.0.0.1]:29500\n")
    return r


def test_an_issue_body_carries_the_failing_ranks_traceback_collapsed_and_redacted(tmp_path):
    st = Store(tmp_path)
    bad = _failed_with_logs(st)
    md = rep.grid_markdown(rep.grid([_record(st, "seed", "0.12.3", Outcome.PASS, exit_code=0), bad]), "dsbisect run")
    assert f"<details><summary>Traceback of run {bad.id} (deepspeed 0.12.4): rank 0 raised first (ranks/rank0.log)" \
           "</summary>" in md
    block = md[md.index("```pytb"):md.index("</details>", md.index("```pytb"))]
    assert '  File "/venv/lib/python3.12/site-packages/deepspeed/runtime/engine.py", line 2211, in step' in block
    assert "step 6" not in block and "- rank 1 also raised: RuntimeError: Connection closed by peer" in block
    assert "hunter2" not in md and "WANDB_API_KEY=***" in md
    # a bisection's issue body: the bad point's traceback too, and its detail cut at a word's end
    req = Request(package="deepspeed", good="0.12.2", bad="0.12.4", case=make_case(tmp_path, name="seed"),
                  regress_on=RegressOn.ANY)
    long = "ValueError: " + "the loss went NaN again " * 12
    bad_long = _record(st, "seed", "0.12.4", Outcome.FAIL, exit_code=1, reason=long.strip())
    (Path(bad_long.run_dir) / "ranks").mkdir()
    (Path(bad_long.run_dir) / "ranks" / "rank0.log").write_text(RANK0_TB)
    md = rep.bisect_markdown(_result(req, _record(st, "seed", "0.12.3", Outcome.PASS), bad_long), "dsbisect bisect …")
    row = next(ln for ln in md.splitlines() if ln.startswith("| release | 0.12.4"))
    cell = row.split(" | ")[-1].removesuffix(" |")
    assert cell.endswith("…") and len(cell) <= 200 and long.strip()[len(cell) - 1] == " "  # cut at a word's end
    assert f"Traceback of run {bad_long.id} (deepspeed 0.12.4): rank 0 raised first" in md


def test_clip_words_cuts_at_a_words_end():
    assert rep.clip_words("short", 200) == "short"
    assert rep.clip_words("alpha beta gamma delta", 12) == "alpha beta…"
    assert rep.clip_words("x" * 30, 10) == "x" * 9 + "…"  # one long word: cut where it must
    assert len(rep.clip_words("word " * 100, 200)) <= 200


def test_report_shows_each_recorded_bisection_with_its_verdict(tmp_path):
    from dsbisect.render import answers

    st = Store(tmp_path)
    req = Request(package="deepspeed", good="0.12.2", bad="0.12.4", case=make_case(tmp_path, name="seed"),
                  regress_on=RegressOn.ANY)
    good, bad = _record(st, "seed", "0.12.3", Outcome.PASS), _record(st, "seed", "0.12.4", Outcome.FAIL, reason="boom")
    st.save_bisection("a1b2c3d4e5f60718", "deepspeed", "0.12.2", "0.12.4",
                      AskedFor.from_json({"case": "seed", "argv": ["deepspeed", "0.12.2", "0.12.4", "--case", "seed",
                                                                   "--index-url", "https://me:hunter2@mirror/simple"]}),
                      BisectionStatus.DONE, _result(req, good, bad).to_json())
    st.save_bisection("ffff000011112222", "deepspeed", "0.12.2", "0.12.4", AskedFor.from_json({"case": "other"}),
                      BisectionStatus.RUNNING, {"steps": []})
    found = answers.answered(st.bisections())
    assert [a.verdict for a in found] == ["found", ""]
    text = "\n".join(t for t, _ in answers.terminal_lines(found))
    assert "bisection a1b2c3d4e5f6: deepspeed 0.12.2 → 0.12.4, case seed — found" in text
    assert "first bad release: deepspeed 0.12.4" in text and f"runs: #{good.id} #{bad.id}" in text
    assert "ran as: dsbisect bisect deepspeed 0.12.2 0.12.4 --case seed --index-url" in text and "hunter2" not in text
    assert "— not finished (running)" in text
    md = rep.grid_markdown(rep.grid([good, bad]), "dsbisect report", above=answers.markdown_lines(found))
    assert md.index("**Bisections**") < md.index("#### seed") and "  - first bad release: deepspeed 0.12.4" in md
    data = answers.to_json(answers.answered(st.bisections(), cases=["seed"]))
    assert [(b["key"], b["verdict"], b["run_ids"]) for b in data] == [("a1b2c3d4e5f60718", "found", [good.id, bad.id])]


def test_the_bad_points_reason_is_said_once_when_the_regression_line_holds_it(tmp_path):
    """The bisect summary named the regression (its identity), then the same reason again as
    "at the bad point": one is enough; a reason the regression line does not hold is still said."""
    from dataclasses import replace

    from recorded import learned
    from dsbisect.records.results import Regression

    st = Store(tmp_path)
    req = Request(package="deepspeed", good="0.12.2", bad="0.12.4", case=make_case(tmp_path, name="seed"),
                  regress_on=RegressOn.AUTO)
    reason = "ValueError: dsb_toy: the loss went NaN"
    result = _result(req, _record(st, "seed", "0.12.3", Outcome.PASS), _record(st, "seed", "0.12.4", Outcome.FAIL,
                                                                                reason=reason))
    told = replace(result, regression=Regression(RegressOn.FAIL, learned(Outcome.FAIL, reason), "0.12.4", "bad end",
                                                 RegressOn.AUTO))
    lines = rep.bisect_summary(told)
    assert sum(reason in ln for ln in lines) == 1 and not any(ln.startswith("at the bad point") for ln in lines)
    assert f"at the bad point: {reason}" in rep.bisect_summary(result)  # no regression line: said there
