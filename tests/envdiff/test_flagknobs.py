"""Knobs that are options of the command line (``--knob flag:--name=VALUE``, and transformers'
checkpointing options in the documented list): set where the line gives the option, else added
at its end; tried by ``dsbisect workaround`` as real runs of a script that reads its options."""

from __future__ import annotations

import json

import pytest

from dsbisect.core.errors import InputError
from dsbisect.core.model import Accelerator
from dsbisect.envdiff.flagknobs import flag_lines, line_kinds, set_options
from dsbisect.envdiff.knobs import KNOBS, parse_knob
from dsbisect.envdiff.settings import Where
from dsbisect.envdiff.workaround import applicable

LINE = "torchrun --nproc_per_node 2 train.py --max_steps 3 --gradient_checkpointing true".split()


@pytest.mark.parametrize("text, expected", [
    ("flag:--ddp_find_unused_parameters=false", ("--ddp_find_unused_parameters", "false")),
    ('flag:--gradient_checkpointing_kwargs={"use_reentrant": false}',
     ("--gradient_checkpointing_kwargs", '{"use_reentrant": false}')),
    ("flag:--no-overlap", ("--no-overlap", "")),  # a switch
])
def test_flag_knobs_are_parsed(text, expected):
    k = parse_knob(text)
    assert k.where is Where.FLAG and (k.name, k.value) == expected
    assert k.describe() == "flag " + text[5:].rstrip("=")


@pytest.mark.parametrize("text", ["flag:x=1", "flag:--=1", "flag:"])
def test_a_flag_knob_must_name_an_option(text):
    with pytest.raises(InputError, match="flag:--NAME=VALUE"):
        parse_knob(text)


def test_an_option_is_set_where_the_line_gives_it_else_added_at_the_end():
    words = ["python", "t.py", "--a", "1", "--b=2", "--c"]
    assert set_options(words, {"--a": "9", "--b": "8", "--c": "x", "--d": ""}) == [
        "python", "t.py", "--a", "9", "--b", "8", "--c", "x", "--d"]
    assert set_options(["t.py", "--lr", "-1", "--e", "on"], {"--lr": "0.1"}) == ["t.py", "--lr", "0.1", "--e", "on"]


def test_two_values_of_one_option_are_refused_and_the_value_now_is_read():
    knobs = [parse_knob("flag:--gradient_checkpointing=false"), parse_knob("flag:--x=1")]
    good, bad, now = flag_lines(knobs, LINE)
    assert now == {"--gradient_checkpointing": "true", "--x": None} and good.positionals == bad.positionals
    with pytest.raises(InputError, match="two values"):
        flag_lines([*knobs, parse_knob("flag:--x=2")], LINE)
    assert flag_lines([parse_knob("env:A=1")], ["a", "--b", "--b"]) == (None, None, {})  # not read as options


def test_the_checkpointing_knobs_apply_only_where_the_line_turns_checkpointing_on():
    assert line_kinds(LINE) == {"checkpointing"}
    assert line_kinds([*LINE[:-1], "false"]) == set() and line_kinds(LINE[:-2]) == set()
    assert line_kinds([*LINE[:-1]]) == {"checkpointing"}  # the bare switch
    used, left = applicable(KNOBS, Accelerator.CPU, None, LINE)
    flags = [k.describe() for k in used if k.where is Where.FLAG]
    assert flags == ['flag --gradient_checkpointing_kwargs={"use_reentrant": false}',
                     "flag --ddp_find_unused_parameters=false", "flag --gradient_checkpointing=false"]
    used, left = applicable(KNOBS, Accelerator.CPU, None, LINE[:-2])
    assert not any(k.where is Where.FLAG for k in used)
    assert sum("with --gradient_checkpointing on" in x for x in left) == 3


JOB = """\
import argparse, sys
ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int)
ap.add_argument("--reentrant", default="true")
ap.add_argument("--find-unused", default="false")
ap.add_argument("--verbose", action="store_true")
a = ap.parse_args()
if a.reentrant == "true" and a.find_unused == "true":
    sys.exit("Expected to mark a variable ready only once")
print("trained", a.steps)
"""


@pytest.mark.slow
def test_a_flag_knob_steps_around_a_failure_of_two_options(tmp_path, cli, cache_dir):
    """The line gives --find-unused true; the knobs replace it, add --reentrant, add a switch;
    a second invocation answers from the store."""
    (tmp_path / "train.py").write_text(JOB)
    words = ["--only-own", "--knob", "flag:--find-unused=false", "--knob", "flag:--reentrant=false",
             "--knob", "flag:--verbose", "--store", str(tmp_path / "store"), "--cache-dir", str(cache_dir),
             "-q", "--format", "json", "--", "python", "train.py", "--steps", "2", "--find-unused", "true"]
    res = cli("workaround", *words, cwd=tmp_path)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["baseline"]["outcome"] == "fail"
    assert [(t["setting"], t["name"], t["was"], t["outcomes"]) for t in out["tried"]] == [
        ("flag", "--find-unused", "true", ["pass", "pass"]), ("flag", "--reentrant", None, ["pass", "pass"]),
        ("flag", "--verbose", None, ["fail"])]  # stopped at its first run that does not pass
    assert len({r for t in out["tried"] for r in t["run_ids"]}) == 5
    again = json.loads(cli("workaround", *words, cwd=tmp_path).stdout)
    assert [t["run_ids"] for t in again["tried"]] == [t["run_ids"] for t in out["tried"]]  # from the store


def test_two_values_of_one_option_are_one_line_exit_2_and_create_nothing(tmp_path, cli):
    (tmp_path / "train.py").write_text(JOB)
    res = cli("workaround", "--knob", "flag:--x=1", "--knob", "flag:--x=2", "--store", str(tmp_path / "store"),
              "--cache-dir", str(tmp_path / "cache"), "--", "python", "train.py", cwd=tmp_path)
    assert res.exit_code == 2 and "two values" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "store").exists() and not (tmp_path / "cache").exists()
