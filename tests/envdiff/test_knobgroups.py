"""Small groups of knobs (``envdiff.knobgroups``): smallest first, no clash within a group, none
with a working group inside, and no more runs than the budget; the search alone, over a job that
is a rule over the knobs it is given (the runs are the workaround command's: tests/envdiff/
test_workaround.py)."""

from __future__ import annotations

import itertools

import pytest

from dsbisect.envdiff.knobgroups import GroupLimits, GroupTry, candidates, clash, search_groups

KEYS = [("env", ("A",)), ("env", ("B",)), ("config", ("z", "x")), ("config", ("z", "x", "y")), ("env", ("C",))]


def test_a_clash_is_one_setting_set_twice():
    assert clash(("env", ("A",)), ("env", ("A",)))
    assert clash(("config", ("z", "x")), ("config", ("z", "x", "y")))
    assert not clash(("config", ("z", "x")), ("config", ("z", "w")))
    assert not clash(("env", ("z",)), ("config", ("z",)))


def test_candidates_leave_out_clashes_and_groups_with_a_working_one_inside():
    assert (2, 3) not in candidates(KEYS, 2, [])
    pairs = candidates(KEYS, 2, [frozenset({4})])
    assert all(4 not in g for g in pairs) and pairs == sorted(pairs)
    assert candidates(KEYS, 3, [frozenset({0, 1})]) == [g for g in itertools.combinations(range(5), 3)
                                                       if not {0, 1} <= set(g) and not {2, 3} <= set(g)]


def _job(passing: list[set[int]], repeat: int = 2):
    """A job that passes when the knobs set hold one of ``passing``; a failing group costs one run."""
    tried = []

    def try_group(group):
        tried.append(group)
        works = any(p <= set(group) for p in passing)
        return GroupTry(works, repeat if works else 1)
    return tried, try_group


def test_pairs_are_tried_when_no_knob_works_and_triples_stop_once_a_pair_does():
    tried, job = _job([{0, 1}])
    found = search_groups(KEYS, [], GroupLimits(max_group=3, max_runs=100), 2, job)
    assert tried == candidates(KEYS, 2, [])  # every pair, in order; no triple: a pair works
    assert [g for g, t in found.tried if t.works] == [(0, 1)]
    assert any("groups of 3+ not tried: a smaller one works" in n for n in found.not_tried)


def test_every_group_goes_on_but_never_tries_a_group_with_a_working_one_inside():
    keys = [*KEYS, ("env", ("D",))]
    tried, job = _job([{0, 1}, {4}, {1, 2, 5}])
    found = search_groups(keys, [4], GroupLimits(max_group=3, max_runs=100, every_size=True), 2, job)
    assert all(4 not in g for g in tried) and (0, 1) in tried
    assert [g for g in tried if len(g) == 3] == [(0, 2, 5), (0, 3, 5), (1, 2, 5), (1, 3, 5)]
    assert [g for g, t in found.tried if t.works] == [(0, 1), (1, 2, 5)]
    assert found.not_tried == ()


def test_a_knob_that_works_alone_means_no_groups_by_default():
    tried, job = _job([{0}])
    found = search_groups(KEYS, [0], GroupLimits(), 2, job)
    assert tried == [] and found.tried == () and "a smaller one works" in found.not_tried[0]


@pytest.mark.parametrize("budget, started", [(0, 0), (1, 0), (2, 1), (3, 2), (5, 4)])
def test_the_budget_bounds_the_runs_and_says_what_it_left(budget, started):
    tried, job = _job([])  # nothing works: each group costs one run
    found = search_groups(KEYS, [], GroupLimits(max_group=2, max_runs=budget), 2, job)
    # a group starts only while the budget holds repeat (2) runs, so a passing one could be confirmed
    assert len(tried) == started
    left = len(candidates(KEYS, 2, [])) - started
    assert found.not_tried == (f"{left} group(s) of 2 not tried: --max-group-runs {budget} spent ({started} runs)",)


def test_max_group_one_tries_no_group():
    tried, job = _job([{0, 1}])
    assert search_groups(KEYS, [], GroupLimits(max_group=1), 2, job).tried == () and tried == []
