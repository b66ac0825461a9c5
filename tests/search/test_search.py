"""The pure search: literal tables and a property against a linear scan."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsbisect.search.steps import Side, next_probes, search

O, N, S = Side.OLD, Side.NEW, Side.SKIP


def linear(sides) -> int:
    """The oracle: the first testable index that behaves like the new end."""
    return next(i for i, s in enumerate(sides) if s is Side.NEW)


def max_probes(n: int) -> int:
    """The oracle's bound: probes a binary search needs between two known ends, without skips."""
    return max(0, n - 2).bit_length()


def run(sides, width=1):
    asked = []

    def probe(idx):
        asked.extend(idx)
        return [sides[i] for i in idx]

    return search(len(sides), probe, width), asked


@pytest.mark.parametrize(
    "sides, first_new, maybe",
    [
        ([O, N], 1, (1,)),
        ([O, O, N], 2, (2,)),
        ([O, N, N], 1, (1,)),
        ([O, S, S, O, N], 4, (4,)),
        ([O, O, O, S, N], 4, (3, 4)),
        ([O, S, S, N], 3, (1, 2, 3)),
        ([O, O, O, O, N, N, N, N], 4, (4,)),
        ([O, O, S, N, N, N, N, N, N], 3, (2, 3)),
    ],
)
def test_table(sides, first_new, maybe):
    result, asked = run(sides)
    assert result.first_new == first_new
    assert result.maybe == maybe
    assert len(set(asked)) == len(asked)  # each point probed once
    assert 0 not in asked and len(sides) - 1 not in asked  # the ends are the caller's


def test_binary_search_uses_log2_probes():
    for n in (2, 3, 8, 16, 100):
        for first in range(1, n):
            sides = [O] * first + [N] * (n - first)
            result, asked = run(sides)
            assert result.first_new == first
            assert len(asked) <= max_probes(n) == math.ceil(math.log2(n - 1)) if n > 2 else len(asked) == 0


@st.composite
def monotone_with_skips(draw):
    n = draw(st.integers(2, 40))
    first = draw(st.integers(1, n - 1))
    sides = [O] * first + [N] * (n - first)
    for i in range(1, n - 1):
        if draw(st.booleans()) and draw(st.booleans()):
            sides[i] = S
    return sides


@given(monotone_with_skips(), st.integers(1, 4))
@settings(max_examples=400, deadline=None)
def test_agrees_with_linear_scan(sides, width):
    result, asked = run(sides, width)
    assert result.first_new == linear(sides)
    assert sides[result.last_old] is O
    assert all(sides[i] is S for i in range(result.last_old + 1, result.first_new))
    assert result.exact == (result.last_old + 1 == result.first_new)
    assert len(set(asked)) == len(asked)


def test_next_probes_spreads_across_slices():
    assert next_probes(0, 8, {}, width=1) == [4]
    assert next_probes(0, 8, {}, width=3) == [2, 4, 6]
    assert next_probes(0, 3, {}, width=5) == [1, 2]
    assert next_probes(0, 4, {2: S}, width=1) in ([1], [3])


def test_lookahead_names_both_possible_next_probes():
    from dsbisect.search.steps import lookahead

    known = {0: Side.OLD, 9: Side.NEW}
    # Probing 4: if OLD the next is 6 or 7 (between 4 and 9), if NEW it is 2 (between 0 and 4).
    assert sorted(lookahead(0, 9, known, [4])) == sorted(next_probes(4, 9, known | {4: Side.OLD})
                                                           + next_probes(0, 4, known | {4: Side.NEW}))
    assert lookahead(0, 2, known, [1]) == []  # the last probe: nothing comes next
    # k-ary: every monotone answer of the picks.
    ahead = lookahead(0, 20, {0: Side.OLD, 20: Side.NEW}, [7, 14], width=2)
    assert {i for i in ahead} >= set(next_probes(0, 7, {0: Side.OLD, 7: Side.NEW, 14: Side.NEW, 20: Side.NEW}, 2))


def test_a_block_of_skips_around_the_middle_is_left_in_few_probes():
    """25 commits in a row that fail differently (stepped around), the boundary well outside
    them: the walk out of the block doubles its step (zoo's accelerate_main_process_first had 25
    such commits, and the nearest-to-the-middle rule tested them one at a time)."""
    for first in (5, 8, 52, 55):
        sides = [O] * first + [N] * (60 - first)
        for i in range(18, 43):
            sides[i] = S if 0 < i < 59 else sides[i]
        result, asked = run(sides)
        assert result.first_new == linear(sides) and result.exact
        skipped = [i for i in asked if sides[i] is S]
        assert len(skipped) <= 10, (first, asked)  # the nearest-to-the-middle walk: 24-25
        assert len(asked) <= 15, (first, asked)  # it asked 29-31


def test_after_an_answer_the_probe_goes_back_to_the_middle():
    from dsbisect.search.steps import skip_offset

    assert skip_offset({}) == 0
    assert skip_offset({5: S}) == 1
    assert skip_offset({5: S, 6: S}) == -2
    assert skip_offset({5: S, 6: S, 3: S}) == 4
    assert skip_offset({5: S, 6: S, 3: S, 9: S}) == -8
    assert skip_offset({5: S, 6: S, 8: O}) == 0
    assert next_probes(0, 20, {10: S}) == [11]
    assert next_probes(0, 20, {10: S, 11: S}) == [8]
    assert next_probes(0, 20, {10: S}, jump=False) in ([9], [11])


@given(monotone_with_skips(), st.integers(1, 4))
@settings(max_examples=300, deadline=None)
def test_jumping_never_asks_more_than_every_point_once(sides, width):
    result, asked = run(sides, width)
    assert result.first_new == linear(sides)
    assert len(asked) <= len(sides) - 2
