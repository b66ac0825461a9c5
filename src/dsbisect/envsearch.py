"""Level 1 of an environment bisection: which of the changes between two environments do it.

Pure: the ``test`` callback does all I/O.  Changes are numbered ``0..n-1``; a trial applies a
subset of them on top of the good environment.  The empty set (the good environment) is OLD and
the full set (the bad one) is NEW; the caller has tested both, so they are never asked.

The answer is a 1-minimal failure-inducing set: applying it gives NEW, and leaving out any one
of its changes gives OLD.  The search, in one pass:

1. Order the changes (a *unit* -- changes tied by dependency metadata -- is one item).  Binary
   search (``search.search``, k-ary when ``width`` > 1) the shortest prefix of the items that,
   applied with the culprits found so far (*held*), is NEW.  Its last item is a culprit.
2. Test the held culprits alone.  NEW: they are the answer.  OLD: the prefix before the culprit
   still holds the rest (an interaction); search it again with the culprit held.
3. Verify: each one-smaller subset of the answer is tested.  One that is NEW is a smaller
   failure-inducing set (a change that masks the bug, or a unit that need not be whole): the
   search starts again inside it.  One that is untestable leaves the answer not exact.

One culprit costs at most ``ceil(log2 n) + 1`` trials (the prefix search, then the culprit
alone); two culprits that only fail together about twice that.  An untestable (SKIP) prefix is
stepped around as ``git bisect skip`` does: the untested prefix lengths nearest the middle are
tried; if only untestable ones are left between the last OLD and the first NEW prefix, the items
between them are kept together as one candidate and the verification tries to split them.

``exact`` is True only when the answer itself was seen NEW (tested, or it is the full set) and
every one-smaller subset was *tested* OLD (or is the empty set, the good end): no claim rests on
monotonicity.  Each subset is asked at most once (memoised), every pass shrinks the set it
searches, and every search step removes at least one item, so the search always ends: at most
``n * (n + 3) / 2`` trials per pass and at most ``n`` passes (in practice one pass of the counts
above).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .search import Side, search

Test = Callable[[Sequence[frozenset[int]]], Sequence[Side]]


@dataclass(frozen=True)
class Trial:
    applied: frozenset[int]  # indices of changes applied on top of the good environment
    side: Side
    round: int = 0  # the batch (1, 2, ...) it was asked in; the trials of one round ran in parallel


@dataclass(frozen=True)
class EnvSearch:
    culprits: tuple[int, ...]  # sorted change indices of a 1-minimal failure-inducing set
    exact: bool  # True: applying culprits -> NEW, and removing any one -> OLD, all tested
    trials: tuple[Trial, ...]  # every trial asked, in order (the ends are not trials)
    note: str = ""  # why not exact, in words
    unverified: tuple[int, ...] = ()  # culprits whose removal could not be tested (untestable)

    @property
    def rounds(self) -> int:
        """Batches of parallel trials asked (the wall time at ``width`` trials at once)."""
        return max((t.round for t in self.trials), default=0)


def find_culprits(n: int, test: Test, *, width: int = 1, units: Sequence[frozenset[int]] = ()) -> EnvSearch:
    """n changes; frozenset() (the good env) is OLD and frozenset(range(n)) (the bad env) is NEW,
    both already tested by the caller and never asked. `test` gets up to `width` subsets at once
    (run in parallel) and answers one Side each; no subset is asked twice. `units`: groups of
    changes that dependency metadata ties together (try them together first; overlapping groups
    are merged).  Raises ValueError on n < 1, width < 1 or a unit naming a change not in range.

    Bounded: each subset at most once, at most n passes of at most n * (n + 3) / 2 trials each;
    without untestable trials one culprit takes at most ceil(log2 n) + 1 trials at width 1.
    """
    if n < 1:
        raise ValueError("need at least one change")
    if width < 1:
        raise ValueError("width must be at least 1")
    oracle = _Oracle(n, test, width)
    items = _items(n, units)
    target = frozenset(range(n))
    while True:
        answer = _reduce(oracle, [i & target for i in items if i & target])
        smaller, untestable = _verify(oracle, answer)
        if smaller is None:
            break
        target = smaller  # a one-smaller subset is NEW too: search inside it
    return _result(answer, untestable, oracle)


class _Oracle:
    """The memo in front of ``test``: answers known subsets, asks the rest in batches of ``width``."""

    def __init__(self, n: int, test: Test, width: int) -> None:
        self.test, self.width = test, width
        self.known: dict[frozenset[int], Side] = {frozenset(): Side.OLD, frozenset(range(n)): Side.NEW}
        self.trials: list[Trial] = []
        self.rounds = 0

    def ask(self, subsets: Sequence[frozenset[int]]) -> list[Side]:
        todo = list(dict.fromkeys(s for s in subsets if s not in self.known))
        for start in range(0, len(todo), self.width):
            batch = todo[start:start + self.width]
            sides = list(self.test(batch))
            if len(sides) != len(batch):
                raise ValueError(f"test answered {len(sides)} sides for {len(batch)} subsets")
            self.rounds += 1
            for subset, side in zip(batch, sides):
                self.known[subset] = Side(side)
                self.trials.append(Trial(subset, Side(side), self.rounds))
        return [self.known[s] for s in subsets]


def _items(n: int, units: Sequence[frozenset[int]]) -> list[frozenset[int]]:
    """The changes as items, in order of their smallest index: each unit one item (overlapping
    units merged), every other change an item of its own."""
    owner = list(range(n))  # union-find over the changes

    def root(i: int) -> int:
        while owner[i] != i:
            owner[i] = owner[owner[i]]
            i = owner[i]
        return i

    for unit in units:
        members = sorted(unit)
        if any(not 0 <= i < n for i in members):
            raise ValueError(f"unit {members} names a change outside 0..{n - 1}")
        for i in members[1:]:
            owner[root(i)] = root(members[0])
    groups: dict[int, set[int]] = {}
    for i in range(n):
        groups.setdefault(root(i), set()).add(i)
    return sorted((frozenset(g) for g in groups.values()), key=min)


def _union(items: Iterable[frozenset[int]]) -> frozenset[int]:
    return frozenset().union(*items)


def _reduce(oracle: _Oracle, items: list[frozenset[int]]) -> frozenset[int]:
    """A failure-inducing subset of the union of ``items`` (known NEW), held item by item."""
    held: frozenset[int] = frozenset()
    cand = items
    while cand:
        base, here = held, cand

        def probe(lengths: Sequence[int]) -> list[Side]:
            return oracle.ask([base | _union(here[:k]) for k in lengths])

        found = search(len(cand) + 1, probe, oracle.width)
        held |= _union(cand[found.last_old:found.first_new])  # one item, or the untestable run kept whole
        cand = cand[:found.last_old]
        if cand and oracle.ask([held])[0] is Side.NEW:
            break
    return held


def _verify(oracle: _Oracle, answer: frozenset[int]) -> tuple[frozenset[int] | None, tuple[int, ...]]:
    """Test each one-smaller subset of ``answer``, ``width`` at a time: the first NEW one (to
    search inside), else the changes whose removal was untestable.  Where leaving out x alone is
    untestable, x may be tied to another change y of the answer: leaving out both is tried too."""
    order = sorted(answer)
    smaller = _first_new(oracle, [answer - {x} for x in order])
    if smaller is not None:
        return smaller, ()
    untestable = tuple(x for x in order if oracle.known[answer - {x}] is Side.SKIP)
    pairs = [answer - {x, y} for x in untestable for y in order if y != x]
    return _first_new(oracle, list(dict.fromkeys(pairs))), untestable


def _first_new(oracle: _Oracle, subsets: list[frozenset[int]]) -> frozenset[int] | None:
    """Ask ``subsets`` ``width`` at a time until one is NEW."""
    for start in range(0, len(subsets), oracle.width):
        chunk = subsets[start:start + oracle.width]
        for subset, side in zip(chunk, oracle.ask(chunk)):
            if side is Side.NEW:
                return subset
    return None


def _result(answer: frozenset[int], untestable: tuple[int, ...], oracle: _Oracle) -> EnvSearch:
    """The answer is always a subset seen NEW (``_reduce`` keeps held + candidates NEW), so it is
    exact exactly when no one-smaller subset was untestable."""
    note = ""
    if untestable:
        names = ", ".join(str(x) for x in untestable)
        many = len(untestable) > 1
        note = (f"leaving out change{'s' if many else ''} {names} alone could not be tested (untestable),"
                f" so {'they' if many else 'it'} may be innocent")
    return EnvSearch(tuple(sorted(answer)), not untestable, tuple(oracle.trials), note, untestable)
