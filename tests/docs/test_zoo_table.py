"""docs/results/zoo_table.py: the three match rates, environment-diff rows, first_run, and the
rule that zoo-runs/ files with suffixes the table does not know are not read."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("zoo_table", ROOT / "docs" / "results" / "zoo_table.py")
zoo_table = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(zoo_table)


def _row(case: str, root: str | None, match: bool | None, after: bool | None = True) -> dict:
    return {"case": case, "root_key": zoo_table.root_key(root), "match": match,
            "result": None if match is None else {"runs": 1}, "first_run_after_issue": after}


def test_a_root_with_a_match_and_a_miss_counts_once_as_a_miss():
    table = [_row("a", "x#1 (abc)", True), _row("b", "x#1: the same change", False),
             _row("c", "y#2 (def)", True, after=False), _row("d", "z#3", None)]
    r = zoo_table.rates(table)
    assert (r["run"], r["match"]) == (3, 2)
    assert (r["roots_run"], r["roots_match"], r["roots_all"]) == (2, 1, 3)
    assert (r["after_issue_run"], r["after_issue_match"]) == (2, 1)
    assert "independent roots 1/2 (50 %)" in zoo_table.summary(table)


def test_root_key_is_the_change_a_root_names():
    assert zoo_table.root_key("deepspeed#7665 (53e91a098, 0.18.3): the new backward API") == "deepspeed#7665"
    assert zoo_table.root_key("accelerate#2126: seeded per rank") == "accelerate#2126"
    assert zoo_table.root_key(None) is None


ENTRY = {"case": "e", "kind": "env-diff", "command": "dsbisect bisect --good-env g --bad-env b --git-repo C",
         "truth": {"culprits": [{"package": "transformers"},
                                {"package": "accelerate", "last_good": "0.34.2", "first_bad": "1.0.0",
                                 "commit": "79a84264aaaa"}],
                   "tied": ["tokenizers"]}}


def _env(culprits, pair=("0.34.2", "1.0.0"), commit="79a84264bbbb"):
    return {"culprits": culprits, "releases": [{"package": "accelerate", "last_good": pair[0], "first_bad": pair[1],
                                                "commit": {"first_bad": commit}}]}


@pytest.mark.parametrize("result, want", [
    (_env(["accelerate", "transformers"], commit="79a84264"), True),
    (_env(["accelerate", "tokenizers", "transformers"], commit="79a84264"), True),   # tied: allowed
    (_env(["accelerate"]), False),                                                  # a culprit missed
    (_env(["accelerate", "numpy", "transformers"]), False),                         # one too many
    (_env(["accelerate", "transformers"], pair=("0.34.2", "1.0.1")), False),        # wrong release
    (_env(["accelerate", "transformers"], commit="0b0d9215"), False),               # wrong commit
])
def test_env_diff_match_needs_every_culprit_its_release_and_its_commit(result, want):
    assert zoo_table.match_of(ENTRY, result) is want


def _head() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def test_unknown_suffixes_are_not_read(tmp_path, monkeypatch):
    if not _head():
        pytest.skip("not a git checkout")
    monkeypatch.setattr(zoo_table, "RUNS", tmp_path)
    meta = {"case": "c", "command": "dsbisect bisect x 1 2", "exit_code": 0, "interrupted": False,
            "limit_minutes": 1, "seconds": 3.0, "date": "2026-12-02", "machine": "2 CPUs, no GPU"}
    out = {"verdict": "found", "last_good": "1.0", "first_bad": "2.0", "steps": [{"run_ids": [1, 2]}]}
    (tmp_path / "c.json").write_text(json.dumps(out))
    (tmp_path / "c.meta.json").write_text(json.dumps({**meta, "dsbisect_commit": _head()}))
    # another session's re-run, older than the table's run: neither its answer nor its commit is read
    (tmp_path / "c.issue22.json").write_text(json.dumps({**out, "first_bad": "9.9"}))
    (tmp_path / "c.issue22.meta.json").write_text(json.dumps({**meta, "dsbisect_commit": zoo_table.ISSUE24_AFTER}))
    (tmp_path / "c.early-proof.json").write_text("{not json")
    entry = {"case": "c", "kind": "fail", "command": "dsbisect bisect x 1 2",
             "truth": {"last_good": "1.0", "first_bad": "2.0"}}
    res = zoo_table.result_of(entry)
    assert (res["first_bad"], res["runs"]) == ("2.0", 2)
    assert zoo_table.match_of(entry, res) is True
    assert zoo_table.first_run(entry) == _head()
    # a known suffix (the first run of a case that was fixed and re-run) is its first run
    (tmp_path / "c.first-run.meta.json").write_text(json.dumps({**meta, "dsbisect_commit": zoo_table.ISSUE24_AFTER}))
    assert zoo_table.first_run(entry) == zoo_table.ISSUE24_AFTER
    assert zoo_table.after_issue(zoo_table.ISSUE24_AFTER) is False
    assert zoo_table.after_issue(_head()) is True


def test_a_bisection_stopped_before_its_answer_is_not_counted():
    entry = {"case": "c", "kind": "fail", "command": "dsbisect bisect x 1 2", "truth": {"last_good": "1", "first_bad": "2"}}
    stopped = {"verdict": "interrupted", "last_good": None, "first_bad": None, "commit": None, "runs": 3}
    assert zoo_table.match_of(entry, stopped) is None
    row = {**_row("c", "x#1", None), "result": stopped}
    assert zoo_table.rates([row, _row("d", "y#2", True)])["run"] == 1


def test_a_first_run_miss_fixed_and_re_run_is_counted_only_when_the_re_run_matches(monkeypatch):
    monkeypatch.setattr(zoo_table, "FIXED_MISSES", {"a": "the first run missed; fixed; the re-run matched"})
    fixed = zoo_table.summary([_row("a", "x#1", True), _row("b", "y#2", True)])
    assert fixed.endswith("; 1 first run that missed by dsbisect's fault fixed and re-run")
    assert "fixed and re-run" not in zoo_table.summary([_row("a", "x#1", False)])  # missed again: a miss
    assert "fixed and re-run" not in zoo_table.summary([_row("b", "y#2", True)])


def test_the_misses_section_lists_the_fixed_first_runs_with_their_re_run():
    text = zoo_table.markdown(zoo_table.rows())
    misses = text[text.index("## Misses"):text.index("## Cases")]
    assert "### Missed at first, dsbisect's fault: fixed and re-run" in misses
    assert "- **ds_decoupled_ckpt_dead_writer** (matches): **First run: a false hang at the fixed end" in misses
    assert "**Re-run** (dsbisect e3f34dd" in misses


SETTING = {"case": "s", "kind": "setting", "command": "dsbisect bisect --good-config a --bad-config b -- x",
           "truth": {"culprits": ["zero_optimization.overlap_comm", "zero_optimization.contiguous_gradients"]}}


@pytest.mark.parametrize("culprits, want", [
    (["zero_optimization.contiguous_gradients", "zero_optimization.overlap_comm"], True),   # any order
    (["zero_optimization.overlap_comm"], False),                                           # one of a pair
    (["zero_optimization.overlap_comm", "zero_optimization.contiguous_gradients", "steps"], False),
    ([], False),
])
def test_a_setting_row_matches_only_the_exact_culprits(culprits, want):
    assert zoo_table.match_of(SETTING, {"culprits": culprits}) is want


WORKAROUND = {"case": "w", "kind": "workaround", "command": "dsbisect workaround -- x",
              "truth": {"workarounds": ["config zero_optimization.stage=0"],
                        "not_workarounds": ["config zero_optimization.overlap_comm=false"]}}


_IDS = iter(range(2, 1000))


def _trial(works: bool, *knobs: tuple[str, str, object]) -> dict:
    return {"knobs": [{"setting": s, "name": n, "value": v} for s, n, v in knobs], "works": works,
            "run_ids": [next(_IDS)], "outcomes": ["pass" if works else "fail"]}


def _workaround_out(*trials: dict) -> dict:
    singles = [t for t in trials if len(t["knobs"]) == 1]
    groups = [t for t in trials if len(t["knobs"]) > 1]
    return {"kind": "workaround", "verdict": "found" if any(t["works"] for t in trials) else "none",
            "baseline": {"outcome": "fail", "run_ids": [1]},
            "tried": singles, "workarounds": [t for t in singles if t["works"]],
            "groups_tried": groups, "group_workarounds": [t for t in groups if t["works"]]}


META = {"seconds": 60.0, "date": "2026-12-05", "machine": "2 CPUs, no GPU"}


@pytest.mark.parametrize("trials, want", [
    ([_trial(True, ("config", "zero_optimization.stage", 0)),
      _trial(False, ("config", "zero_optimization.overlap_comm", False))], True),
    ([_trial(False, ("config", "zero_optimization.stage", 0))], False),                  # the true one missed
    ([_trial(True, ("config", "zero_optimization.stage", 0)),
      _trial(True, ("config", "zero_optimization.overlap_comm", False))], False),         # a false one found
    ([_trial(True, ("config", "zero_optimization.stage", 0), ("env", "NCCL_P2P_DISABLE", "1"))], False),  # a group
])
def test_a_workaround_row_needs_every_true_knob_and_no_false_one(trials, want):
    result = zoo_table._workaround_result(_workaround_out(*trials), META)
    assert zoo_table.match_of(WORKAROUND, result) is want
    assert result["runs"] == 1 + len(trials)


def test_a_workaround_knob_is_written_as_its_setting_name_and_value():
    out = _workaround_out(_trial(True, ("config", "zero_optimization.stage", 0)),
                          _trial(True, ("env", "NCCL_P2P_DISABLE", "1"), ("config", "x.y", False)))
    assert zoo_table._workaround_result(out, META)["workarounds"] == [
        "config zero_optimization.stage=0", "env NCCL_P2P_DISABLE=1 + config x.y=false"]


def test_dsbisect_options_go_before_the_jobs_command_line():
    """A settings or workaround command ends with `-- CMD`: options after it are the job's."""
    opts = ["--format", "json"]
    assert zoo_table._with_options(["workaround", "--pin", "x==1", "--", "deepspeed", "t.py"], opts) == [
        "workaround", "--pin", "x==1", "--format", "json", "--", "deepspeed", "t.py"]
    assert zoo_table._with_options(["bisect", "x", "1", "2"], opts) == ["bisect", "x", "1", "2", "--format", "json"]
