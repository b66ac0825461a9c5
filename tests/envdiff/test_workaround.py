"""dsbisect workaround: documented knobs (and the user's) tried one at a time on a failing command,
each run twice or until a run does not pass; a knob whose every run passes is a workaround."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsbisect.core.errors import InputError
from dsbisect.core.model import Accelerator
from dsbisect.core.redact import mask_text
from dsbisect.envdiff.knobs import KNOBS, parse_knob
from dsbisect.envdiff.settings import Where
from dsbisect.envdiff.workaround import applicable

JOB = """\
import json, os, sys
cfg = json.load(open(sys.argv[sys.argv.index("--deepspeed") + 1]))
z = cfg["zero_optimization"]
if z.get("overlap_comm") and z.get("contiguous_gradients"):
    sys.exit("loss is nan")
print("fine")
"""


def test_every_knob_says_where_it_is_documented_and_what_it_costs():
    assert all(k.source and k.cost for k in KNOBS)
    assert len({(k.where, k.path) for k in KNOBS}) == len(KNOBS)
    page = (Path(__file__).parents[2] / "docs" / "how-to" / "settings.md").read_text()
    listed = [line for line in page.splitlines() if line.startswith("| `")]
    assert [line.split("`")[1] for line in listed] == [k.describe() for k in KNOBS]
    assert all(k.source in line for k, line in zip(KNOBS, listed))


def test_no_knob_reads_as_a_secret_to_the_redactor():
    """Every report masks what looks like a secret ("backward pass: a higher" once lost its "a" as
    a password's value): the list's own words must come through whole."""
    for k in KNOBS:
        for text in (k.describe(), k.cost, k.source):
            assert mask_text(text) == text, text


def test_which_knobs_apply_follows_the_transport_and_the_config(tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text('{"train_batch_size": 8, "zero_optimization": {"stage": 2}}')
    used, left = applicable(KNOBS, Accelerator.CPU, ds)
    kinds = {k.applies for k in used}
    assert kinds == {"gloo", "deepspeed"} and any("for nccl runs" in x for x in left)
    used, _ = applicable(KNOBS, Accelerator.CUDA, None)
    assert {k.applies for k in used} == {"nccl"} and all(k.where is Where.ENV for k in used)


@pytest.mark.parametrize("text, expected", [
    ("env:NCCL_ALGO=Tree", ("env", "NCCL_ALGO", "Tree")),
    ("config:zero_optimization.overlap_comm=false", ("config", "zero_optimization.overlap_comm", "false")),
    ("config:offload.device=cpu", ("config", "offload.device", '"cpu"')),
])
def test_own_knobs(text, expected):
    k = parse_knob(text)
    assert (k.where.value, k.name, k.value) == expected


@pytest.mark.parametrize("text", ["NCCL_ALGO=Tree", "env:NCCL_ALGO", "file:x=1"])
def test_a_bad_knob_is_an_input_error(text):
    with pytest.raises(InputError, match="give env:NAME=VALUE"):
        parse_knob(text)


def _setup(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(JOB)
    zero = {"stage": 2, "overlap_comm": True, "contiguous_gradients": True}
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 8, "zero_optimization": zero}, indent=2))


@pytest.mark.slow
def test_a_config_knob_works_and_a_variable_does_not(tmp_path, cli, cache_dir):
    _setup(tmp_path)
    res = cli("workaround", "--config", "ds.json", "--only-own", "--knob", "env:TOY_UNRELATED=1",
              "--knob", "config:zero_optimization.overlap_comm=false", "--store", str(tmp_path / "store"),
              "--cache-dir", str(cache_dir), "-q", "--format", "json", "--",
              "python", "train.py", "--deepspeed", "ds.json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["baseline"]["outcome"] == "fail" and out["verdict"] == "found"
    assert [(t["name"], t["outcomes"], t["works"]) for t in out["tried"]] == [
        ("TOY_UNRELATED", ["fail"], False), ("zero_optimization.overlap_comm", ["pass", "pass"], True)]
    assert [w["was"] for w in out["workarounds"]] == ["true"] and "not a fix" in out["note"]
    assert json.loads((tmp_path / "ds.json").read_text())["zero_optimization"]["overlap_comm"] is True  # untouched


PAIR_JOB = """\
import json, os, sys
cfg = json.load(open(sys.argv[sys.argv.index("--deepspeed") + 1]))
overlap = cfg["zero_optimization"].get("overlap_comm")
if os.environ.get("TOY_C") == "1" or (os.environ.get("TOY_A") == "1" and not overlap):
    print("fine")
else:
    sys.exit("loss is nan")
"""
PAIR = ["--knob", "env:TOY_A=1", "--knob", "config:zero_optimization.overlap_comm=false"]


def _workaround(cli, tmp_path, cache_dir, *words, fmt="json"):
    res = cli("workaround", "--config", "ds.json", "--only-own", *words, "--store", str(tmp_path / "store"),
              "--cache-dir", str(cache_dir), "-q", "--format", fmt, "--",
              "python", "train.py", "--deepspeed", "ds.json", cwd=tmp_path)
    return res, json.loads(res.stdout) if fmt == "json" and res.stdout.strip() else {}


def _named(entry: dict) -> list[str]:
    return [f"{k['name']}={k['value']}" for k in entry["knobs"]]


@pytest.mark.slow
def test_two_knobs_that_only_work_together_are_found_as_a_pair(tmp_path, cli, cache_dir):
    _setup(tmp_path)
    (tmp_path / "train.py").write_text(PAIR_JOB)
    res, out = _workaround(cli, tmp_path, cache_dir, *PAIR, "--knob", "env:TOY_UNRELATED=1")
    assert res.exit_code == 0, res.output
    assert [t["works"] for t in out["tried"]] == [False, False, False] and out["workarounds"] == []
    assert [(_named(g), g["outcomes"]) for g in out["groups_tried"]] == [
        (["TOY_A=1", "zero_optimization.overlap_comm=false"], ["pass", "pass"]),
        (["TOY_A=1", "TOY_UNRELATED=1"], ["fail"]),  # a group stops at its first run that does not pass
        (["zero_optimization.overlap_comm=false", "TOY_UNRELATED=1"], ["fail"])]
    assert [_named(g) for g in out["group_workarounds"]] == [["TOY_A=1", "zero_optimization.overlap_comm=false"]]
    assert out["verdict"] == "found" and out["max_group"] == 2
    assert [k["was"] for k in out["group_workarounds"][0]["knobs"]] == [None, "true"]
    # every format has the pair, from the runs in the store (none run again)
    last = out["group_workarounds"][0]["run_ids"][-1]
    ran = max([*out["baseline"]["run_ids"], *(i for t in (*out["tried"], *out["groups_tried"]) for i in t["run_ids"])])
    assert ran == 8  # the command, 3 knobs stopped at their first fail, the pair twice, 2 pairs once
    for fmt, words in (("table", ["-o", "t.md"]), ("markdown", []), ("html", ["-o", "page.html"])):
        res, _ = _workaround(cli, tmp_path, cache_dir, *PAIR, "--knob", "env:TOY_UNRELATED=1", *words, fmt=fmt)
        shown = (tmp_path / words[1]).read_text() if words else res.stdout
        assert res.exit_code == 0 and "TOY_A=1" in shown and f"#{last} pass" in shown.lower(), res.output
        assert f"#{ran + 1} " not in shown and "not a fix" in shown  # no run beyond the first invocation's
    assert "<h2>Knobs together (groups of at most 2)</h2>" in (tmp_path / "page.html").read_text()
    # --max-group 1: one knob at a time, as before: nothing works
    res, out = _workaround(cli, tmp_path, cache_dir, *PAIR, "--max-group", "1")
    assert res.exit_code == 1 and out["verdict"] == "none" and out["groups_tried"] == [], res.output


@pytest.mark.slow
def test_every_group_never_tries_one_with_a_working_knob_or_pair_inside(tmp_path, cli, cache_dir):
    _setup(tmp_path)
    (tmp_path / "train.py").write_text(PAIR_JOB)
    res, out = _workaround(cli, tmp_path, cache_dir, *PAIR, "--knob", "env:TOY_C=1")
    assert res.exit_code == 0 and out["groups_tried"] == [], res.output  # TOY_C works alone: no groups
    assert [t["name"] for t in out["workarounds"]] == ["TOY_C"]
    assert any("a smaller one works" in n for n in out["groups_not_tried"])
    res, out = _workaround(cli, tmp_path, cache_dir, *PAIR, "--knob", "env:TOY_C=1", "--every-group",
                           "--max-group", "3")
    assert res.exit_code == 0, res.output
    # the pair is tried and works; a pair or the triple holding TOY_C, or the triple holding the pair, is not
    assert [_named(g) for g in out["groups_tried"]] == [["TOY_A=1", "zero_optimization.overlap_comm=false"]]
    assert [t["name"] for t in out["workarounds"]] == ["TOY_C"] and len(out["group_workarounds"]) == 1


@pytest.mark.slow
def test_a_plain_script_with_strict_arguments_runs_as_given(tmp_path, cli, cache_dir):
    """`-- python x.py --steps 2` is one process, as given: no deepspeed --local_rank=0 is added,
    which a script that parses its arguments strictly would refuse (exit 2, every trial alike)."""
    (tmp_path / "strict.py").write_text(
        "import argparse, os, sys\nap = argparse.ArgumentParser()\nap.add_argument('--steps', type=int)\n"
        "print(ap.parse_args())\nsys.exit(0 if os.environ.get('TOY_A') == '1' else 'broken')\n")
    res = cli("workaround", "--only-own", "--knob", "env:TOY_A=1", "--store", str(tmp_path / "store"),
              "--cache-dir", str(cache_dir), "-q", "--format", "json", "--", "python", "strict.py", "--steps", "2",
              cwd=tmp_path)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [(t["name"], t["outcomes"]) for t in out["workarounds"]] == [("TOY_A", ["pass", "pass"])]


@pytest.mark.slow
def test_a_command_that_passes_has_nothing_to_work_around(tmp_path, cli, cache_dir):
    _setup(tmp_path)
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"overlap_comm": false}}')
    res = cli("workaround", "--only-own", "--knob", "env:TOY_UNRELATED=1", "--store", str(tmp_path / "store"),
              "--cache-dir", str(cache_dir), "-q", "--", "python", "train.py", "--deepspeed", "ds.json", cwd=tmp_path)
    assert res.exit_code == 1 and "passes as it is: nothing to work around" in res.stderr, res.output


@pytest.mark.parametrize("words, expected", [
    (["--knob", "x=1"], "give env:NAME=VALUE"),
    (["--config", "gone.json"], "gone.json: no such file"),
    (["--config", "other.json"], "the command line does not name"),
    (["--only-own"], "--only-own tries only --knob candidates"),
])
def test_bad_workaround_input_is_one_line_exit_2_and_creates_nothing(tmp_path, cli, words, expected):
    _setup(tmp_path)
    (tmp_path / "other.json").write_text("{}")
    res = cli("workaround", *words, "--store", str(tmp_path / "store"), "--cache-dir", str(tmp_path / "cache"),
              "--", "python", "train.py", "--deepspeed", "ds.json", cwd=tmp_path)
    assert res.exit_code == 2 and expected in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.output
    assert not (tmp_path / "store").exists() and not (tmp_path / "cache").exists()
