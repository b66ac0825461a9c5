"""The bisection engine (``Bisection``) over points whose results are recorded marks.

Each test builds a wheelhouse of toy releases (so the candidates come from a real offline
index), records a ``dsbisect mark`` for the points it wants answered, and runs a real
``Bisection`` through a real ``Runner`` and ``Store`` whose executor refuses to run anything:
every answer comes from the store, as a replayed log's does.  What is tested is the engine's
logic (the ends check, the search, find-fix, skips, GOOD auto, --confirm) and what it records.
The end-to-end runs of real jobs are tests/cli/test_bisect_cli.py's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import toypkg
from conftest import make_case

from dsbisect.bisect.bisection import Bisection, plan
from dsbisect.core.errors import InputError
from dsbisect.bisect.marks import record, release_point
from dsbisect.core.mode import Mode
from dsbisect.core.model import Answer, IndexOptions, Outcome, RegressOn, Stage, Verdict
from dsbisect.records.results import Request, Result
from dsbisect.run.executor import Delegated
from dsbisect.run.runner import Runner
from dsbisect.store.store import Store
from dsbisect.records.bisections import BisectionStatus

VERSIONS = [f"1.{i}.0" for i in range(8)]


class NoRuns(Delegated):
    """The executor of a bisection that must answer from the store alone."""

    def __init__(self, site):
        self.site = site

    def run_once(self, spec, cancel):
        raise AssertionError(f"{spec.point.label} was run: it should have come from the store")


@pytest.fixture
def index(tmp_path_factory) -> IndexOptions:
    house = tmp_path_factory.mktemp("engine-house")
    for v in VERSIONS:
        toypkg.build_wheel(house, v, "ok")
    return IndexOptions(offline=True, find_links=(str(house),))


def _engine(tmp_path: Path, index: IndexOptions, marks: dict[str, list[str]], **request):
    """A Bisection of dsb-toy whose points' results are ``marks`` (version -> good/bad/skip per attempt)."""
    case = make_case(tmp_path, "c")
    store = Store(tmp_path / ".dsbisect")
    for version, said in marks.items():
        for attempt, mark in enumerate(said, 1):
            record(store, case, release_point(case, "dsb-toy", version, ()), Verdict(mark), attempt=attempt)
    req = Request("dsb-toy", request.pop("good", VERSIONS[0]), request.pop("bad", VERSIONS[-1]), case, **request)
    return Bisection(Runner(store=store, envs=None, place=NoRuns), index, req), store


def _marks(first_bad: str, versions=VERSIONS, fix: bool = False, **odd: str) -> dict[str, list[str]]:
    bad, good = ("good", "bad") if fix else ("bad", "good")
    return {v: [odd.get(v, bad if v >= first_bad else good)] for v in versions}


def _tested(result: Result) -> list[str]:
    return [s.label for s in result.steps]


@pytest.mark.parametrize("first_bad", ["1.1.0", "1.4.0", "1.7.0"])
def test_the_first_bad_release_after_the_ends_in_log2_probes(tmp_path, index, first_bad):
    bis, store = _engine(tmp_path, index, _marks(first_bad))
    result = bis.run()
    at = VERSIONS.index(first_bad)
    assert (result.verdict, result.last_good, result.first_bad) == (Answer.FOUND, VERSIONS[at - 1], first_bad)
    assert _tested(result)[:2] == ["1.0.0", "1.7.0"]  # the ends first
    assert len(result.steps) <= 2 + 3  # ceil(log2(8 - 1)) probes between the ends
    assert len(set(_tested(result))) == len(result.steps)  # no point asked twice
    assert {s.verdict for s in result.steps if s.version >= first_bad} == {Verdict.BAD}
    assert result.candidates == tuple(VERSIONS) and result.exit_code == 0
    # what the store keeps is the result's JSON, and it reads back as the same result
    saved = store.bisection(bis.req.key)
    assert saved.status is BisectionStatus.DONE and saved.result == result.to_json()
    assert Result.from_json(saved.result).to_json() == result.to_json()


def test_find_fix_looks_for_the_first_good_release(tmp_path, index):
    bis, _ = _engine(tmp_path, index, _marks("1.5.0", fix=True), mode=Mode.FIND_FIX)
    result = bis.run()
    assert (result.verdict, result.last_good, result.first_bad) == (Answer.FOUND, "1.4.0", "1.5.0")
    assert result.to_json()["mode"] == "find-fix"


def test_an_untestable_release_is_stepped_around(tmp_path, index):
    bis, _ = _engine(tmp_path, index, _marks("1.5.0", **{"1.3.0": "skip"}))
    result = bis.run()
    assert (result.verdict, result.last_good, result.first_bad) == (Answer.FOUND, "1.4.0", "1.5.0")
    skipped = next(s for s in result.steps if s.version == "1.3.0")  # the middle, asked first
    assert (skipped.verdict, skipped.outcome) == (Verdict.SKIP, Outcome.SKIP)
    assert _tested(result)[2:4] == ["1.3.0", "1.4.0"]  # then the untested point nearest the middle


def test_untestable_releases_at_the_boundary_leave_a_range(tmp_path, index):
    bis, _ = _engine(tmp_path, index, _marks("1.5.0", **{"1.3.0": "skip", "1.4.0": "skip"}))
    result = bis.run()
    assert result.verdict is Answer.AMBIGUOUS and result.exit_code == 0
    assert (result.last_good, result.first_bad, result.maybe) == ("1.2.0", "1.5.0", ("1.3.0", "1.4.0", "1.5.0"))
    assert "untestable releases leave 3 candidates for the first bad release: 1.3.0, 1.4.0, 1.5.0" in result.message


@pytest.mark.parametrize("marks, verdict, words", [
    (_marks("1.0.0"), Answer.GOOD_END_BAD, "1.0.0 (the good end) also failed; widen the range"),
    (_marks("9"), Answer.NOT_REPRODUCED, "1.7.0 (the bad end) passed: the regression does not reproduce here"),
    (_marks("1.3.0", **{"1.7.0": "skip"}), Answer.UNTESTABLE, "1.7.0 (the bad end) could not be tested"),
    (_marks("1.3.0", **{"1.0.0": "skip"}), Answer.UNTESTABLE, "1.0.0 (the good end) could not be tested"),
])
def test_ends_that_do_not_behave_stop_before_the_search(tmp_path, index, marks, verdict, words):
    bis, store = _engine(tmp_path, index, marks)
    result = bis.run()
    assert result.verdict is verdict and result.exit_code == 1
    assert words in result.message
    assert len(result.steps) == 2  # the ends only
    assert store.bisection(bis.req.key).result["verdict"] == verdict.value


def test_good_auto_walks_back_from_the_bad_end(tmp_path, index):
    bis, _ = _engine(tmp_path, index, _marks("1.2.0"), good="auto")
    result = bis.run(plan(bis.req, index))
    assert (result.verdict, result.last_good, result.first_bad) == (Answer.FOUND, "1.1.0", "1.2.0")
    assert result.good_end.startswith("good end found by walking back from 1.7.0: 1.7.0 → 1.6.0 → 1.4.0 → 1.0.0")
    assert result.candidates[0] == "1.0.0"


def test_good_auto_with_no_good_release_says_so(tmp_path, index):
    bis, _ = _engine(tmp_path, index, _marks("1.0.0"), good="auto")
    result = bis.run(plan(bis.req, index))
    assert result.verdict is Answer.GOOD_END_BAD and result.message.startswith("no release back to 1.0.0")


@pytest.mark.parametrize("second, verdict", [("bad", Answer.FOUND), ("good", Answer.UNCONFIRMED)])
def test_confirm_runs_the_final_pair_again(tmp_path, index, second, verdict):
    marks = _marks("1.3.0")
    marks["1.2.0"], marks["1.3.0"] = ["good", "good"], ["bad", second]
    bis, _ = _engine(tmp_path, index, marks, confirm=2)
    result = bis.run()
    assert result.verdict is verdict and result.confirm is not None
    assert [(e.name, e.point, e.agree, e.runs) for e in result.confirm.ends] == [
        ("last good", "1.2.0", 2, 2), ("first bad", "1.3.0", 2 if second == "bad" else 1, 2)]
    assert [s.stage for s in result.steps][-2:] == [Stage.CONFIRM, Stage.CONFIRM]
    assert Result.from_json(result.to_json()).confirm == result.confirm


def test_the_regression_is_learned_from_the_bad_end(tmp_path, index):
    bis, _ = _engine(tmp_path, index, _marks("1.3.0"))
    result = bis.run()
    assert result.regression is not None and result.regression.learned_from == "1.7.0"
    assert result.regression.asked is RegressOn.AUTO
    assert result.to_json()["regress_on"] == result.regression.regress_on.value != "auto"


def test_a_range_the_index_does_not_have_is_bad_input(tmp_path, index):
    bis, store = _engine(tmp_path, index, {}, good="1.0.0", bad="3.0.0")
    with pytest.raises(InputError):
        plan(bis.req, index)
    assert store.bisection(bis.req.key) is None


def test_the_request_key_ignores_what_does_not_change_the_answer(tmp_path):
    req = Request("dsb-toy", "1.0.0", "1.7.0", make_case(tmp_path, "c"))
    assert replace(req, argv=("bisect", "x"), prove=False, width=4, confirm=3).key == req.key
    for changed in (replace(req, repeat=2), replace(req, mode=Mode.FIND_FIX), replace(req, regress_on=RegressOn.HANG),
                    replace(req, any_failure=True), replace(req, pins=("a==1",)), replace(req, package="dsb_Toy2")):
        assert changed.key != req.key
    assert replace(req, package="DSB_toy").key == req.key  # the name as PyPI compares it
