"""A mode owns its words and its side mapping: literal tables of each."""

from __future__ import annotations

import pytest

from dsbisect.core.mode import Mode, Side
from dsbisect.core.model import Verdict


@pytest.mark.parametrize("mode, words, sides", [
    (Mode.REGRESSION, ("good", "bad", "last good", "first bad", "bad end", "regression"),
     {Verdict.GOOD: Side.OLD, Verdict.BAD: Side.NEW, Verdict.SKIP: Side.SKIP}),
    (Mode.FIND_FIX, ("broken", "fixed", "last broken", "first fixed", "broken end", "fix"),
     {Verdict.GOOD: Side.NEW, Verdict.BAD: Side.OLD, Verdict.SKIP: Side.SKIP}),
])
def test_a_mode_owns_its_words_and_its_sides(mode, words, sides):
    assert (mode.old, mode.new, mode.last_old, mode.first_new, mode.defining_end, mode.change) == words
    assert {v: mode.side(v) for v in Verdict} == sides
    assert all(mode.verdict(side) is v for v, side in sides.items())  # the mapping both ways
    assert mode.end(mode.defining) == mode.defining_end.split()[0]
    assert Mode.of(mode.find_fix) is mode and mode.flipped.flipped is mode and mode.flipped is not mode


def test_a_mode_says_why_an_end_stops_the_search():
    assert Mode.REGRESSION.misbehaved(Side.NEW, "1.5", "passed") == \
        "1.5 (the bad end) passed: the regression does not reproduce here"
    assert Mode.REGRESSION.misbehaved(Side.OLD, "1.0", "hung") == "1.0 (the good end) also hung; widen the range"
    assert Mode.FIND_FIX.misbehaved(Side.NEW, "2.0", "failed") == \
        "2.0 (the fixed end) failed: the fix is not visible here"
    assert Mode.FIND_FIX.misbehaved(Side.OLD, "1.0", "passed") == \
        "1.0 (the broken end) passed: the bug does not reproduce there; check the range"
