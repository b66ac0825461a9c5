"""The shared values: keys are stable and computed one way, JSON round-trips, answers know their exit code."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from conftest import make_case
from dsbisect.core.model import Answer, Case, GitSource, IndexOptions, Point, digest


def test_digest_is_compact_sorted_json():
    assert digest({"b": 1, "a": [1, 2]}) == digest({"a": [1, 2], "b": 1})
    # One way only: the same value as compact JSON, whatever the dict order.
    import hashlib

    blob = json.dumps({"a": [1, 2], "b": 1}, separators=(",", ":"), sort_keys=True).encode()
    assert digest({"a": [1, 2], "b": 1}) == hashlib.sha256(blob).hexdigest()[:16]


def test_point_key_is_the_requirement_set_and_the_commit():
    a = Point(versions=(("deepspeed", "0.12.4"),), pins=("pydantic<2",))
    b = Point(versions=(("deepspeed", "0.12.4"),), pins=("pydantic <2",))  # same requirement, spelt apart
    assert a.key == b.key
    # A --pin of a package that also moves is dropped: the point's own version wins.
    c = Point(versions=(("deepspeed", "0.12.4"),), pins=("pydantic<2", "deepspeed==0.9.5"))
    assert c.requirements() == ("pydantic<2", "deepspeed==0.12.4") and c.key == a.key
    src = GitSource("deepspeed", "/clone", "abc123" * 6, "v0.12.3-1", "fix")
    at_commit = replace(a, source=src)
    assert at_commit.key != a.key and at_commit.requirements() == ("pydantic<2",)
    assert at_commit.label == "deepspeed @abc123abc1"


def test_point_json_keeps_the_clone_only_when_asked():
    src = GitSource("deepspeed", "/clone", "f" * 40, "v1", "subject")
    p = Point(versions=(("deepspeed", "0.12.4"),), source=src)
    stored = Point.from_json(json.loads(json.dumps(p.to_json())))
    assert stored.source.repo == "" and stored.key == p.key
    assert Point.from_json(p.to_json(with_repo=True)) == p


def test_case_key_follows_what_runs_not_where(tmp_path):
    case = make_case(tmp_path)
    assert case.key == replace(case, name="other").key == replace(case, points=(Point((("x", "1"),)),)).key
    for change in ({"nproc": 4}, {"args": ("--x",)}, {"collective_timeout": 5.0}, {"script_digest": "other"}):
        assert replace(case, **change).key != case.key
    assert Case.from_json(json.loads(json.dumps(case.to_json()))) == case


def test_with_timeouts_changes_only_what_is_given(tmp_path):
    case = make_case(tmp_path)
    assert case.with_timeouts() is case
    assert case.with_timeouts(collective=9).collective_timeout == 9 and case.with_timeouts(collective=9).timeout == case.timeout


@pytest.mark.parametrize("answer, code", [(Answer.FOUND, 0), (Answer.AMBIGUOUS, 0), (Answer.NOT_REPRODUCED, 1),
                                          (Answer.GOOD_END_BAD, 1), (Answer.UNTESTABLE, 1), (Answer.UNCONFIRMED, 1)])
def test_answers_know_their_exit_code(answer, code):
    assert answer.exit_code == code


def test_index_options_for_uv_and_pip():
    off = IndexOptions(offline=True, find_links=("/w",), index_url="http://i/simple", extra_index_urls=("http://e",))
    assert off.uv_args() == ["--offline", "--no-index", "--find-links", "/w"]
    assert off.pip_args() == ["--no-index", "--find-links", "/w"]
    on = IndexOptions(index_url="http://i/simple", extra_index_urls=("http://e",))
    assert on.uv_args() == ["--index-url", "http://i/simple", "--extra-index-url", "http://e"]
    assert IndexOptions.from_json(json.loads(json.dumps(off.to_json()))) == off

