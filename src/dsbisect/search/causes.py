"""Every cause, not just the first: level 1 of an environment bisection run again until the bad
environment passes with what was found reverted.

Pure: the ``test`` callback does all I/O.  Changes are numbered ``0..n-1``; a trial applies a
subset of them on top of the good environment (the empty set, OLD, and the full set, NEW, are the
caller's, never asked).  The loop:

1. ``find_culprits`` over the changes not yet blamed (``left``): a 1-minimal set ``C`` of them
   that, applied on the good environment, is NEW.  Its ends are the good environment (OLD) and
   ``left`` applied (NEW: the full set the first time, the last check after).
2. The check: the bad environment with every cause found so far reverted, that is ``left - C``
   applied.  OLD: every cause is found (``End.PASSES``).  NEW: it still fails as the bad one
   did; search again among ``left - C``.  SKIP: it could not be tried, or it fails otherwise
   than the regression (the caller words which); the loop stops there (``End.UNTESTABLE``).
3. Nothing left (every change blamed): the check is the good environment itself, OLD.

Each cause is a set none of the others' changes are in, and each is 1-minimal *among the
changes left when it was found* (against a monotone oracle -- a subset is NEW iff it holds one
of some hidden minimal sets -- each is one of those hidden sets).  At most ``max_causes``
searches (``End.BUDGET`` when the last check is still NEW); each removes at least one change,
so at most ``n``.  No subset is asked twice over the whole loop (one memo in front of
``test``): a later search answers what an earlier one saw from memory.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

from dsbisect.search.changes import Ahead, EnvSearch, Test, Trial, find_culprits
from dsbisect.search.steps import Side


class End(enum.Enum):
    PASSES = "passes"            # the bad environment with every cause reverted is OLD
    UNTESTABLE = "untestable"    # that check was SKIP (not installable, or another failure)
    BUDGET = "budget"            # max_causes searches done and the last check still NEW


@dataclass(frozen=True)
class Causes:
    causes: tuple[EnvSearch, ...]  # each cause's search, in the order found; indices are the changes'
    checks: tuple[Trial, ...]  # after each cause: the bad env with every cause so far reverted (applied = the rest)
    trials: tuple[Trial, ...]  # every subset ``test`` was asked, in order (searches and checks)
    end: End

    @property
    def reverted(self) -> frozenset[int]:
        return frozenset(i for c in self.causes for i in c.culprits)

    @property
    def first(self) -> EnvSearch:
        return self.causes[0]


def find_causes(n: int, test: Test, *, width: int = 1, units: Sequence[frozenset[int]] = (),
                max_causes: int | None = None, max_untestable: int | None = None,
                ahead: Ahead | None = None) -> Causes:
    """Every cause among ``n`` changes (see the module).  ``test``, ``width``, ``units``,
    ``max_untestable`` and ``ahead`` as ``find_culprits`` takes them (units and trials in the
    changes' own numbering).  Raises ValueError on max_causes < 1 (and as find_culprits does)."""
    if max_causes is not None and max_causes < 1:
        raise ValueError("max_causes must be at least 1")
    memo = _Memo(n, test)
    left, causes, checks = frozenset(range(n)), [], []
    while True:
        cause = _search(memo, sorted(left), width, units, max_untestable, ahead)
        causes.append(cause)
        left -= set(cause.culprits)
        check = Trial(left, memo.ask([left])[0] if left else Side.OLD, memo.rounds)
        checks.append(check)
        if check.side is Side.OLD:
            return Causes(tuple(causes), tuple(checks), tuple(memo.trials), End.PASSES)
        if check.side is Side.SKIP:
            return Causes(tuple(causes), tuple(checks), tuple(memo.trials), End.UNTESTABLE)
        if max_causes is not None and len(causes) >= max_causes:
            return Causes(tuple(causes), tuple(checks), tuple(memo.trials), End.BUDGET)


def _search(memo: _Memo, left: list[int], width: int, units: Sequence[frozenset[int]],
            max_untestable: int | None, ahead: Ahead | None) -> EnvSearch:
    """``find_culprits`` over the changes ``left`` (numbered ``0..len(left)-1`` inside), its answer
    and trials in the changes' own numbering."""
    local = {g: k for k, g in enumerate(left)}

    def out(s: frozenset[int]) -> frozenset[int]:
        return frozenset(left[k] for k in s)

    mine = [frozenset(local[g] for g in u if g in local) for u in units]
    found = find_culprits(len(left), lambda batch: memo.ask([out(s) for s in batch]), width=width,
                          units=[u for u in mine if u], max_untestable=max_untestable,
                          ahead=None if ahead is None else (lambda batch: ahead([out(s) for s in batch])))
    return EnvSearch(tuple(left[k] for k in found.culprits), found.exact,
                     tuple(Trial(out(t.applied), t.side, t.round) for t in found.trials),
                     _renumbered(found.note, left), tuple(left[k] for k in found.unverified))


def _renumbered(note: str, left: list[int]) -> str:
    """The search's note names changes by its own numbers (``leaving out changes 0, 2``): give
    the changes' ones."""
    def renamed(m: re.Match) -> str:
        return m.group(1) + ", ".join(str(left[int(x)]) for x in m.group(2).split(", "))

    return re.sub(r"(leaving out changes? )((?:\d+, )*\d+)", renamed, note)


class _Memo:
    """One memo over the whole loop: a subset asked once answers every later search; the rest
    go to ``test`` (at most a search's batch at once), each call one round."""

    def __init__(self, n: int, test: Test) -> None:
        self.test = test
        self.known: dict[frozenset[int], Side] = {frozenset(): Side.OLD, frozenset(range(n)): Side.NEW}
        self.trials: list[Trial] = []
        self.rounds = 0

    def ask(self, subsets: Sequence[frozenset[int]]) -> list[Side]:
        todo = list(dict.fromkeys(s for s in subsets if s not in self.known))
        if todo:
            sides = [Side(x) for x in self.test(todo)]
            if len(sides) != len(todo):
                raise ValueError(f"test answered {len(sides)} sides for {len(todo)} subsets")
            self.rounds += 1
            for subset, side in zip(todo, sides):
                self.known[subset] = side
                self.trials.append(Trial(subset, side, self.rounds))
        return [self.known[s] for s in subsets]
