"""Every cause (search.causes): literal cases and properties against a brute-force oracle.

The hidden truth is a family of minimal failing sets (a subset of the changes fails iff it holds
one of them: several independent causes, or interactions, or both); the brute force enumerates
every subset to find the minimal failing ones the loop may answer."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsbisect.search.causes import End, find_causes
from dsbisect.search.steps import Side

O, N, S = Side.OLD, Side.NEW, Side.SKIP


def family(*hidden):
    sets = [frozenset(h) for h in hidden]
    return lambda s: N if any(h <= s for h in sets) else O


def minimal_failing(n, side_of):
    """Brute force: every subset that is NEW while each one-smaller subset is not."""
    out = set()
    for k in range(n + 1):
        for combo in itertools.combinations(range(n), k):
            s = frozenset(combo)
            if side_of(s) is N and all(side_of(s - {x}) is not N for x in s):
                out.add(s)
    return out


def run(n, side_of, width=1, **kw):
    asked = []

    def test(subsets):
        assert 1 <= len(subsets) <= width
        for s in subsets:
            assert s not in (frozenset(), frozenset(range(n))), "the ends are the caller's"
        asked.extend(subsets)
        return [side_of(s) for s in subsets]

    found = find_causes(n, test, width=width, **kw)
    assert len(set(asked)) == len(asked), "a subset was asked twice over the loop"
    assert [t.applied for t in found.trials] == asked
    assert len(found.checks) == len(found.causes) <= n
    return found


def test_two_independent_causes_are_both_found_and_the_rest_passes():
    found = run(8, family({2}, {6}))
    assert [c.culprits for c in found.causes] == [(2,), (6,)]
    assert all(c.exact for c in found.causes)
    assert [c.side for c in found.checks] == [N, O]
    assert found.checks[-1].applied == frozenset(range(8)) - {2, 6} and found.end is End.PASSES


def test_one_cause_costs_one_check_more():
    found = run(8, family({3}))
    assert [c.culprits for c in found.causes] == [(3,)] and found.end is End.PASSES
    assert found.trials[-1].applied == frozenset(range(8)) - {3} and found.trials[-1].side is O


def test_an_interaction_and_an_independent_cause():
    found = run(10, family({1, 7}, {4}))
    assert sorted(c.culprits for c in found.causes) == [(1, 7), (4,)] and found.end is End.PASSES


def test_every_change_a_cause_ends_at_the_good_environment():
    found = run(2, family({0}, {1}))
    assert [c.culprits for c in found.causes] == [(0,), (1,)]
    assert found.checks[-1].applied == frozenset() and found.end is End.PASSES


def test_the_budget_stops_and_says_so():
    found = run(8, family({1}, {5}), max_causes=1)
    assert len(found.causes) == 1 and found.end is End.BUDGET and found.checks[-1].side is N


def test_an_untestable_check_stops_there():
    side = family({1}, {5})
    found = run(8, lambda s: S if s == frozenset(range(8)) - {1} else side(s))
    assert [c.culprits for c in found.causes] == [(1,)] and found.end is End.UNTESTABLE


def test_bad_arguments():
    with pytest.raises(ValueError):
        find_causes(3, lambda b: [N] * len(b), max_causes=0)


def test_a_second_search_names_its_unverified_changes_by_their_own_numbers():
    # cause {0}; then {5, 6} where leaving out 6 alone is untestable: the note says 6, not 1 or 2
    side = family({0}, {5, 6})
    found = run(8, lambda s: S if (5 in s and 6 not in s and 0 not in s and len(s) > 1) else side(s))
    second = found.causes[1]
    assert 5 in second.culprits or 6 in second.culprits
    for x in second.unverified:
        assert str(x) in second.note


hidden_families = st.integers(min_value=1, max_value=7).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.frozensets(st.integers(0, n - 1), min_size=1, max_size=3), min_size=1, max_size=4)))


@settings(max_examples=300, deadline=None)
@given(hidden_families, st.integers(min_value=1, max_value=3))
def test_against_the_brute_force_oracle(case, width):
    n, hidden = case
    side_of = family(*hidden)
    if side_of(frozenset(range(n))) is not N:
        return
    found = run(n, side_of, width=width)
    truth = minimal_failing(n, side_of)
    reverted = set()
    for cause in found.causes:
        culprits = frozenset(cause.culprits)
        assert not culprits & reverted, "causes are disjoint"
        assert cause.exact
        # 1-minimal among the changes left: applied alone it fails; without any one it passes
        assert side_of(culprits) is N and all(side_of(culprits - {x}) is O for x in culprits)
        assert culprits in truth
        reverted |= culprits
    assert found.end is End.PASSES
    assert side_of(frozenset(range(n)) - reverted) is O  # the bad env with every cause reverted passes
    for cause, check in zip(found.causes, found.checks):
        assert check.side is side_of(check.applied)
    disjoint = all(not (a & b) for a, b in itertools.combinations(set(map(frozenset, hidden)), 2))
    if disjoint and all(frozenset(h) in truth for h in hidden):  # independent causes: each found, none else
        assert {frozenset(c.culprits) for c in found.causes} == {frozenset(h) for h in hidden}


@settings(max_examples=200, deadline=None)
@given(hidden_families, st.sets(st.integers(0, 127), max_size=20))
def test_untestable_subsets_never_break_the_contract(case, skips):
    n, hidden = case
    side_of = family(*hidden)
    if side_of(frozenset(range(n))) is not N:
        return
    skipped = {frozenset(i for i in range(n) if m >> i & 1) for m in skips} - {frozenset(), frozenset(range(n))}
    found = run(n, lambda s: S if s in skipped else side_of(s))
    reverted = set()
    for cause in found.causes:
        assert not set(cause.culprits) & reverted
        reverted |= set(cause.culprits)
    last = found.checks[-1]
    assert last.applied == frozenset(range(n)) - reverted
    assert (found.end is End.PASSES) == (last.side is O) and (found.end is End.UNTESTABLE) == (last.side is S)
