"""The level-1 search over environment changes: literal tables and properties against a
brute-force oracle (a hidden culprit set; NEW iff it is all applied)."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsbisect.search.changes import EnvSearch, Trial, find_culprits, untestable_budget
from dsbisect.search.steps import Side

O, N, S = Side.OLD, Side.NEW, Side.SKIP


def hidden_oracle(hidden, untestable=lambda s: False):
    """NEW iff every hidden culprit is applied; SKIP where ``untestable`` says so."""
    hidden = frozenset(hidden)
    return lambda s: S if untestable(s) else (N if hidden <= s else O)


def run(n, side_of, width=1, units=(), max_untestable=None):
    """find_culprits against ``side_of``, checking the contract of ``test`` on every call."""
    asked: list[frozenset[int]] = []
    batches: list[int] = []

    def test(subsets):
        assert 1 <= len(subsets) <= width
        batches.append(len(subsets))
        for s in subsets:
            assert s not in (frozenset(), frozenset(range(n))), "the ends are the caller's"
            assert s <= frozenset(range(n))
        asked.extend(subsets)
        return [side_of(s) for s in subsets]

    result = find_culprits(n, test, width=width, units=units, max_untestable=max_untestable)
    assert len(set(asked)) == len(asked), "a subset was asked twice"
    assert [t.applied for t in result.trials] == asked
    assert all(t.side is side_of(t.applied) for t in result.trials)
    assert result.rounds == len(batches)
    assert result.culprits == tuple(sorted(result.culprits))
    assert len(asked) < min(2 ** n, 3 * n ** 3)  # the bounds the docstring promises
    limit = untestable_budget(n) if max_untestable is None else max_untestable
    assert sum(side_of(s) is S for s in asked) <= limit + width
    return result


def ties(a, b):
    """Untestable: a subset that holds exactly one of the tied changes a and b."""
    return lambda s: (a in s) != (b in s)


def check_exact_claim(result: EnvSearch, side_of, n):
    """What ``exact`` promises, checked from the trials themselves (not from the oracle)."""
    seen = {t.applied: t.side for t in result.trials} | {frozenset(): O, frozenset(range(n)): N}
    culprits = frozenset(result.culprits)
    assert seen[culprits] is N
    for x in culprits:
        assert (seen.get(culprits - {x}) is O) == (x not in result.unverified)
    assert result.exact == (result.unverified == ())
    assert (result.note == "") == result.exact
    if "stopped after" not in result.note:  # the search went to the end: every removal was tried
        assert all(seen[culprits - {x}] is S for x in result.unverified)


# ------------------------------------------------------------------------- tables


@pytest.mark.parametrize(
    "n, hidden, width, trials, rounds",
    [
        (8, {5}, 1, 4, 4),  # ceil(log2 8) + 1
        (8, {0}, 1, 3, 3),
        (8, {7}, 1, 4, 4),
        (1, {0}, 1, 0, 0),  # one change: the ends say it all
        (2, {1}, 1, 2, 2),
        (100, {63}, 1, 8, 8),  # ceil(log2 100) + 1
        (8, {2, 6}, 1, 9, 9),  # 2 ceil(log2 8) + 3
        (8, {0, 7}, 1, 7, 7),
        (8, {6, 7}, 1, 9, 9),
        (8, {1, 4, 6}, 1, 13, 13),
        (8, {5}, 3, 6, 2),
        (8, {2, 6}, 4, 15, 5),
        (100, {63}, 4, 12, 3),
    ],
)
def test_table(n, hidden, width, trials, rounds):
    side_of = hidden_oracle(hidden)
    result = run(n, side_of, width)
    assert result.culprits == tuple(sorted(hidden))
    assert result.exact and result.note == ""
    assert len(result.trials) <= trials and result.rounds <= rounds
    check_exact_claim(result, side_of, n)


def test_one_culprit_in_n_8_takes_the_prefix_search_and_itself():
    result = run(8, hidden_oracle({5}))
    assert result.trials == (
        Trial(frozenset({0, 1, 2, 3}), O, 1),
        Trial(frozenset({0, 1, 2, 3, 4, 5}), N, 2),
        Trial(frozenset({0, 1, 2, 3, 4}), O, 3),
        Trial(frozenset({5}), N, 4),
    )
    assert result.rounds == 4


def test_an_interaction_is_found_as_the_pair():
    # NEW only with both 2 and 6: neither alone, and the pair verified by leaving each out
    result = run(8, hidden_oracle({2, 6}))
    assert result.culprits == (2, 6) and result.exact
    seen = {t.applied: t.side for t in result.trials}
    assert seen[frozenset({6})] is O and seen[frozenset({2})] is O and seen[frozenset({2, 6})] is N


def test_a_tie_given_as_a_unit_is_applied_whole():
    # 3 cannot be installed without 4 (nor 4 without 3): with the unit, no prefix splits them
    side_of = hidden_oracle({3}, ties(3, 4))
    result = run(8, side_of, units=[frozenset({3, 4})])
    assert result.culprits == (3, 4)
    assert not result.exact and result.unverified == (3, 4)
    assert "untestable" in result.note
    skips = [t for t in result.trials if t.side is S]
    assert [t.applied for t in skips] == [frozenset({4}), frozenset({3})]  # only the split of the answer itself
    check_exact_claim(result, side_of, 8)


def test_a_one_way_tie_still_gives_the_exact_culprit():
    # 3 needs 4 (applying 3 without 4 is untestable), 4 alone is fine: 4 is the culprit
    side_of = hidden_oracle({4}, lambda s: 3 in s and 4 not in s)
    for units in ((), [frozenset({3, 4})]):
        result = run(8, side_of, units=units)
        assert result.culprits == (4,) and result.exact


def test_a_tie_without_units_is_stepped_around():
    side_of = hidden_oracle({3}, ties(3, 4))
    result = run(8, side_of)
    assert result.culprits == (3, 4) and not result.exact
    check_exact_claim(result, side_of, 8)


def test_a_unit_that_need_not_be_whole_is_split():
    # the unit {2, 3, 4} is tested whole first; only 3 matters, and every split is testable
    result = run(10, hidden_oracle({3}), units=[frozenset({2, 3, 4})])
    assert result.culprits == (3,) and result.exact


def test_overlapping_units_are_merged():
    side_of = hidden_oracle({5}, lambda s: len(s & {4, 5, 6}) not in (0, 3))
    result = run(10, side_of, units=[frozenset({4, 5}), frozenset({5, 6})])
    assert result.culprits == (4, 5, 6) and not result.exact
    # the prefix search never splits the merged unit: only the verification of the answer does
    assert all(t.applied < {4, 5, 6} for t in result.trials if t.side is S)


def test_a_masking_change_is_not_crashed_on():
    # non-monotone: 1 alone breaks it, 3 masks 1, 5 with 3 breaks it again (the full set is NEW)
    def side_of(s):
        return N if (1 in s and 3 not in s) or {3, 5} <= s else O

    result = run(6, side_of)
    assert result.exact
    check_exact_claim(result, side_of, 6)
    assert result.culprits in ((1,), (3, 5))


def test_one_culprit_anywhere_within_the_goal():
    # every place of one culprit among up to 40 changes: ceil(log2 n) + 1 trials at width 1, and
    # at width w about log_(w+1) n rounds (the last candidates are tried alone in the last round)
    for n in range(2, 41):
        for culprit in range(n):
            side_of = hidden_oracle({culprit})
            for width in (1, 4):
                result = find_culprits(n, lambda subsets: [side_of(s) for s in subsets], width=width)
                assert result.culprits == (culprit,) and result.exact
                if width == 1:
                    assert len(result.trials) <= math.ceil(math.log2(n)) + 1
                assert result.rounds <= math.ceil(math.log(n, width + 1)) + 1


def test_every_pair_is_found_as_the_pair():
    for n in range(2, 13):
        for pair in itertools.combinations(range(n), 2):
            for width in (1, 3):
                result = run(n, hidden_oracle(pair), width)
                assert result.culprits == pair and result.exact
                if width == 1:
                    assert len(result.trials) <= 2 * math.ceil(math.log2(n)) + 3


def test_a_far_tie_without_units_costs_a_few_binary_searches():
    # 10 cannot be applied without 90 nor 90 without 10: every prefix between them is untestable
    side_of = hidden_oracle({50}, ties(10, 90))
    result = run(100, side_of)
    assert result.culprits == (50,) and result.exact
    assert len(result.trials) <= 3 * math.ceil(math.log2(100))
    assert sum(t.side is S for t in result.trials) <= 2 * math.ceil(math.log2(100))


def test_the_same_answers_ask_the_same_trials():
    # a resumed bisection answers from its store: the search must ask again exactly what it asked
    side_of = hidden_oracle({7, 20}, ties(3, 30))
    first, again = (run(40, side_of, width=3, units=[frozenset({1, 2})]) for _ in range(2))
    assert first == again


@pytest.mark.parametrize("width", [1, 4])
def test_when_nothing_can_be_installed_it_stops_at_the_limit(width):
    # every subset untestable (an index that lacks the bad versions' dependencies, say)
    result = run(100, lambda s: S, width)
    assert result.culprits == tuple(range(100)) and not result.exact
    assert len(result.trials) == untestable_budget(100) + width == 64 + width
    assert result.note.startswith("stopped after") and "the limit" in result.note
    assert result.unverified == tuple(range(100))


def test_a_small_limit_still_answers_with_a_set_seen_to_fail():
    side_of = hidden_oracle({50}, ties(10, 90))
    result = run(100, side_of, max_untestable=1)
    assert not result.exact and "stopped after 2 untestable trials" in result.note
    check_exact_claim(result, side_of, 100)
    assert 50 in result.culprits and result.unverified
    # the limit is not reached: the same answer as without one
    assert run(100, side_of, max_untestable=20).culprits == (50,)


@pytest.mark.parametrize("n, width, units, message", [
    (0, 1, (), "at least one change"),
    (4, 0, (), "width"),
    (4, 1, [frozenset({3, 4})], "outside"),
    (4, 1, [frozenset({-1})], "outside"),
])
def test_bad_arguments(n, width, units, message):
    with pytest.raises(ValueError, match=message):
        find_culprits(n, lambda subsets: [O] * len(subsets), width=width, units=units)
    with pytest.raises(ValueError, match="max_untestable"):
        find_culprits(4, lambda subsets: [O] * len(subsets), max_untestable=-1)


# --------------------------------------------------------------------- properties


@st.composite
def cases(draw):
    n = draw(st.integers(2, 60))
    hidden = draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=min(2, n)))
    tie = None
    if draw(st.booleans()) and n >= 3:
        a, b = draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
        tie = (a, b)
    width = draw(st.integers(1, 4))
    as_unit = tie is not None and draw(st.booleans())
    limit = draw(st.one_of(st.none(), st.integers(0, 6)))
    return n, frozenset(hidden), tie, width, as_unit, limit


@given(cases())
@settings(max_examples=150, deadline=None)
def test_against_the_hidden_set(case):
    n, hidden, tie, width, as_unit, limit = case
    side_of = hidden_oracle(hidden, ties(*tie) if tie else lambda s: False)
    result = run(n, side_of, width, units=[frozenset(tie)] if as_unit else (), max_untestable=limit)
    check_exact_claim(result, side_of, n)
    if result.exact:
        assert frozenset(result.culprits) == hidden
    else:
        assert frozenset(result.culprits) >= hidden
    if tie is None:
        assert result.exact
        if len(hidden) == 1 and width == 1:
            assert len(result.trials) <= math.ceil(math.log2(n)) + 2
        if len(hidden) == 1:
            assert result.rounds <= math.ceil(math.log(n, width + 1)) + 1
    elif not set(tie) & hidden and limit is None:
        # the tie is among the innocent changes: they can be left out together
        assert result.exact
        if len(hidden) == 1 and width == 1 and not as_unit:
            assert len(result.trials) <= 4 * math.ceil(math.log2(n))


@st.composite
def any_oracle(draw):
    """A table of sides over every subset of n <= 6 changes: the ends as the caller tested them."""
    n = draw(st.integers(1, 6))
    subsets = [frozenset(c) for k in range(n + 1) for c in itertools.combinations(range(n), k)]
    table = {s: draw(st.sampled_from([O, N, S])) for s in subsets}
    table[frozenset()], table[frozenset(range(n))] = O, N
    return n, table, draw(st.integers(1, 3)), draw(st.one_of(st.none(), st.integers(0, 4)))


@given(any_oracle())
@settings(max_examples=100, deadline=None)
def test_any_oracle_ends_and_never_claims_too_much(case):
    n, table, width, limit = case
    result = run(n, table.__getitem__, width, max_untestable=limit)
    check_exact_claim(result, table.__getitem__, n)


@given(st.integers(2, 40).flatmap(lambda n: st.tuples(
    st.just(n), st.sets(st.integers(0, n - 1), min_size=1, max_size=min(2, n)), st.integers(1, 4))))
@settings(max_examples=60, deadline=None)
def test_ahead_names_the_next_round_before_it_is_asked(case):
    # the venvs of the next round can be built while a round runs: whatever a hidden culprit set
    # answers, the next batch is among the subsets offered before the batch that precedes it
    n, hidden, width = case
    side_of = hidden_oracle(hidden)
    offered, batches = [], []

    def test(subsets):
        batches.append(list(subsets))
        return [side_of(s) for s in subsets]

    result = find_culprits(n, test, width=width, ahead=lambda subsets: offered.append(list(subsets)))
    assert len(offered) == len(batches)
    for before, batch, ahead in zip(batches, batches[1:], offered):
        assert set(batch) <= set(ahead)
        assert not set(before) & set(ahead)
    assert result == run(n, side_of, width)  # looking ahead changes nothing the search asks
