"""Level 1 of an environment bisection: which of the changes between two environments do it.

Pure: the ``test`` callback does all I/O.  Changes are numbered ``0..n-1``; a trial applies a
subset of them on top of the good environment.  The empty set (the good environment) is OLD and
the full set (the bad one) is NEW; the caller has tested both, so they are never asked.

The answer is a 1-minimal failure-inducing set: applying it gives NEW, and leaving out any one
of its changes gives OLD.  The search:

1. Order the changes (a *unit* -- changes that dependency metadata ties together -- is one
   item).  Binary search (k-ary when ``width`` > 1) the shortest prefix of the items that,
   applied with the culprits found so far (*held*), is NEW.  Its last item is a culprit.
2. Test the held culprits alone.  NEW: they are the answer.  OLD: the prefix before the culprit
   still holds the rest (an interaction); search it again with the culprit held.
3. Verify: each one-smaller subset of the answer is tested.  One that is NEW is a smaller
   failure-inducing set (a change that masks the bug, or a unit that need not be whole): the
   search starts again inside it (a new *pass*).  Where leaving out one change alone is
   untestable, leaving it out together with each other culprit is tried; what stays untestable
   leaves the answer not exact, with the changes it concerns in ``unverified``.

Costs without untestable trials, at width 1: one culprit at most ``ceil(log2 n) + 1`` trials
(the prefix search, the culprit alone); an interaction pair at most ``2 ceil(log2 n) + 3`` (two
prefix searches, the culprit found first alone, the pair, the other one alone). At width w the
rounds are about ``log_(w+1) n`` per culprit (at most ``ceil(log_(w+1) n) + 1`` for one; how
far that was checked is in docs/benchmarks.md): once the culprit is one of at most w items, each
is tried alone in the round of the last prefixes.

Untestable (SKIP) prefixes are stepped around as ``git bisect skip`` does, but the untestable run
is bounded from both sides by binary search rather than walked one length at a time.  The change
that opened the run and the one that closed it most likely need each other: they are applied
together and the run is searched again.  Two changes that cannot be applied apart (with no
testable subset between them) stay together as one candidate.  Past a limit of untestable
trials (``untestable_budget``: 64 for 100 changes) the search stops and answers with the
smallest set seen NEW, not exact.

What the search asks depends only on the answers it got, never on what else its memo holds, so
the rounds after the current one can be foreseen by running it again on supposed answers
(``ahead``: the venvs of the next round are built while a round runs).

``exact`` is True only when the answer itself was seen NEW (tested, or it is the full set) and
every one-smaller subset was *tested* OLD (or is the empty set, the good end): no claim rests on
monotonicity.  Each subset is asked at most once (memoised); each search step removes at least
one item from the candidates and each pass searches a smaller set than the one before, so it
always ends: at most ``2 n**2`` trials to search and ``n (n + 1) / 2`` to verify per pass, at most
``n`` passes -- under ``3 n**3`` trials in all (and under ``2**n - 1``), whatever ``test`` answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from dsbisect.search.steps import Side, next_probes

Test = Callable[[Sequence[frozenset[int]]], Sequence[Side]]
Ahead = Callable[[Sequence[frozenset[int]]], None]


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
    unverified: tuple[int, ...] = ()  # culprits whose removal was not seen OLD (untestable, or not tried)

    @property
    def rounds(self) -> int:
        """Batches of parallel trials asked (the wall time at ``width`` trials at once)."""
        return max((t.round for t in self.trials), default=0)


def find_culprits(n: int, test: Test, *, width: int = 1, units: Sequence[frozenset[int]] = (),
                  max_untestable: int | None = None, ahead: Ahead | None = None) -> EnvSearch:
    """n changes; frozenset() (the good env) is OLD and frozenset(range(n)) (the bad env) is NEW,
    both already tested by the caller and never asked. `test` gets up to `width` subsets at once
    (run in parallel) and answers one Side each; no subset is asked twice. `units`: groups of
    changes that dependency metadata ties together (try them together first; overlapping groups
    are merged).  Raises ValueError on n < 1, width < 1, max_untestable < 0 or a unit naming a
    change not in range.

    `max_untestable` (default ``untestable_budget(n)``): once more trials than that were
    untestable, no more are asked, and the answer is the smallest set seen NEW, not exact (say,
    when uv can resolve hardly any subset).  Bounded: each subset at most once, under 3 * n**3
    trials whatever `test` answers, at most max_untestable + width of them untestable; without
    untestable trials one culprit takes at most ceil(log2 n) + 1 trials at width 1.
    Deterministic: the same answers ask the same subsets in the same order (a resumed search that
    answers from what it stored replays its trials).

    `ahead`, if given, is called before each batch goes to `test` with the subsets the search
    would ask in the round after it, for each answer of the batch that a hidden culprit set could
    give (all OLD, or NEW from one of its subsets up): their venvs can be built while the batch
    runs, as a release bisection's lookahead does.
    """
    if n < 1:
        raise ValueError("need at least one change")
    if width < 1:
        raise ValueError("width must be at least 1")
    budget = untestable_budget(n) if max_untestable is None else max_untestable
    if budget < 0:
        raise ValueError("max_untestable must be at least 0")
    items = _items(n, units)
    oracle = _Oracle(n, test, width, budget)
    if ahead is not None:
        oracle.ahead = lambda batch: ahead(_peek(oracle, batch, items, n))
    try:
        return _result(_search(oracle, items, n), oracle, gave_up=False)
    except _OutOfUntestable:
        return _result(oracle.smallest_new(), oracle, gave_up=True)


def untestable_budget(n: int) -> int:
    """The default limit on untestable trials: 8 ceil(log2 n) + 8 (64 for 100 changes), about
    the most that three tied pairs among 100 changes, none given as a unit, took (53)."""
    return 8 * max(1, (n - 1).bit_length()) + 8


def _search(oracle: _Oracle, items: list[frozenset[int]], n: int) -> frozenset[int]:
    """Passes of search and verification until the answer's one-smaller subsets are not NEW."""
    target = frozenset(range(n))
    while True:
        answer = _reduce(oracle, frozenset(), [i & target for i in items if i & target])
        smaller = _verify(oracle, answer)
        if smaller is None:
            return answer
        target = smaller  # a one-smaller subset is NEW too: search inside it


def _peek(oracle: _Oracle, batch: list[frozenset[int]], items: list[frozenset[int]], n: int) -> list[frozenset[int]]:
    """The subsets asked in the round after ``batch``, for each answer a hidden culprit set could
    give: the search is run again from the start on what is known (it is pure and deterministic,
    and a trial costs far more than this), ``batch`` gets that answer, and the next batch stops it."""
    answers = [dict.fromkeys(batch, Side.OLD)]
    answers += [{t: Side.NEW if t >= s else Side.OLD for t in batch} for s in batch]
    nxt: dict[frozenset[int], None] = {}
    for answer in answers:
        replay = _Oracle(n, _Replay(answer), oracle.width, oracle.budget)
        replay.known = dict(oracle.known)
        replay.untestable = oracle.untestable
        try:
            _search(replay, items, n)
        except _Next as stop:
            nxt |= dict.fromkeys(s for s in stop.batch if s not in batch)
        except _OutOfUntestable:
            pass
    return list(nxt)


class _Next(Exception):
    """A replay's next batch (``_peek``)."""

    def __init__(self, batch: Sequence[frozenset[int]]) -> None:
        super().__init__()
        self.batch = batch


class _Replay:
    """The ``test`` of a replay: the first batch gets the supposed answer, the next one stops it."""

    def __init__(self, answer: dict[frozenset[int], Side]) -> None:
        self.answer: dict[frozenset[int], Side] | None = answer

    def __call__(self, batch: Sequence[frozenset[int]]) -> list[Side]:
        if self.answer is None:
            raise _Next(batch)
        answer, self.answer = self.answer, None
        return [answer.get(s, Side.OLD) for s in batch]


class _OutOfUntestable(Exception):
    """Raised by the oracle when the limit on untestable trials is passed (never escapes)."""


class _Oracle:
    """The memo in front of ``test``: answers known subsets, asks the rest in batches of ``width``."""

    def __init__(self, n: int, test: Test, width: int, budget: int) -> None:
        self.test, self.width, self.budget = test, width, budget
        self.known: dict[frozenset[int], Side] = {frozenset(): Side.OLD, frozenset(range(n)): Side.NEW}
        self.trials: list[Trial] = []
        self.rounds = self.untestable = 0
        self.ahead: Callable[[list[frozenset[int]]], None] | None = None

    def ask(self, subsets: Sequence[frozenset[int]]) -> list[Side]:
        todo = list(dict.fromkeys(s for s in subsets if s not in self.known))
        for start in range(0, len(todo), self.width):
            if self.untestable > self.budget:
                raise _OutOfUntestable
            batch = todo[start:start + self.width]
            if self.ahead is not None:
                self.ahead(batch)
            sides = [Side(side) for side in self.test(batch)]
            if len(sides) != len(batch):
                raise ValueError(f"test answered {len(sides)} sides for {len(batch)} subsets")
            self.rounds += 1
            for subset, side in zip(batch, sides):
                self.known[subset] = side
                self.trials.append(Trial(subset, side, self.rounds))
                self.untestable += side is Side.SKIP
        return [self.known[s] for s in subsets]

    def smallest_new(self) -> frozenset[int]:
        """The smallest subset seen NEW (the first in sorted order among the smallest)."""
        return min((s for s, side in self.known.items() if side is Side.NEW), key=lambda s: (len(s), sorted(s)))


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


def _reduce(oracle: _Oracle, base: frozenset[int], items: list[frozenset[int]]) -> frozenset[int]:
    """A part R of the union of ``items`` with ``base | R`` seen NEW, held item by item.

    ``base`` is seen OLD (or untestable) and ``base`` with every item seen NEW; that stays so for
    ``base | held | cand`` after each step, so the answer is always a subset seen NEW."""
    held: frozenset[int] = frozenset()
    cand = items
    while cand:
        fixed = base | held
        lo, hi, skipped, alone = _prefix_search(oracle, fixed, cand)
        if alone is not None:  # fixed with this item alone is NEW: nothing more is needed
            return held | cand[alone]
        run = cand[lo:hi]
        if skipped and len(run) > 2:
            # adding run[0] made the prefixes untestable and adding run[-1] made them testable again:
            # most likely run[0] needs run[-1].  Apply the two together, and search the run again.
            held |= _reduce(oracle, fixed | _union(cand[:lo]), [run[0] | run[-1], *run[1:-1]])
        else:
            held |= _union(run)  # one item, or two that cannot be told apart
        cand = cand[:lo]
        if cand and oracle.ask([base | held])[0] is Side.NEW:
            break
    return held


def _prefix_search(oracle: _Oracle, fixed: frozenset[int],
                   cand: list[frozenset[int]]) -> tuple[int, int, bool, int | None]:
    """Prefix lengths ``lo`` (seen OLD) < ``hi`` (seen NEW) of ``cand`` applied on ``fixed``, with
    only untestable or untested lengths between; whether any between is untestable; and the item
    that ``fixed`` with it alone turned NEW, if one was tried and did.  Length 0 is OLD and the
    whole list NEW (known).

    A k-ary search.  Where a length is untestable, it goes on at both sides of the untestable run
    to find its two ends (binary), not through it one length at a time.  At width > 1, once the
    culprit is one of at most ``width`` items, each of them is tried alone with ``fixed`` in the
    same round as the last prefixes: the test of the culprit alone that would follow is saved."""
    known = {0: Side.OLD, len(cand): Side.NEW}
    tried_alone = False  # once per search; what to ask never depends on what the memo holds
    while True:
        hi = min(k for k, s in known.items() if s is Side.NEW)
        lo = max(k for k, s in known.items() if s is Side.OLD and k < hi)
        skips = sorted(k for k, s in known.items() if s is Side.SKIP and lo < k < hi)
        gaps = [(lo, skips[0]), (skips[-1], hi)] if skips else [(lo, hi)]
        if not _spread(gaps, known, 1):
            return lo, hi, bool(skips), None
        alones = []
        if oracle.width > 1 and not skips and hi - lo <= oracle.width and not tried_alone:
            alones, tried_alone = list(range(lo, hi)), True
        picks = _spread(gaps, known, oracle.width - len(alones))
        sides = oracle.ask([fixed | cand[j] for j in alones] + [fixed | _union(cand[:k]) for k in picks])
        hit = [j for j, side in zip(alones, sides) if side is Side.NEW]
        if hit:
            return lo, hi, False, hit[0]
        known.update(zip(picks, sides[len(alones):]))


def _spread(gaps: list[tuple[int, int]], known: dict[int, Side], width: int) -> list[int]:
    """Up to ``width`` untested points inside the gaps: each slot to the gap whose parts stay
    longest, then ``next_probes`` spreads each gap's share evenly."""
    share = [0] * len(gaps)
    room = [b - a - 1 for a, b in gaps]
    for _ in range(width):
        open_ = [i for i in range(len(gaps)) if share[i] < room[i]]
        if not open_:
            break
        best = max(open_, key=lambda i: ((gaps[i][1] - gaps[i][0]) / (share[i] + 1), -i))
        share[best] += 1
    picks = [k for (a, b), j in zip(gaps, share) if j for k in next_probes(a, b, known, j, jump=False)]
    return sorted(set(picks))


def _verify(oracle: _Oracle, answer: frozenset[int]) -> frozenset[int] | None:
    """Test each one-smaller subset of ``answer``, ``width`` at a time: the first NEW one (to
    search inside), or None.  Where leaving out x alone is untestable, x may be tied to another
    change y of the answer: leaving out both is tried too."""
    order = sorted(answer)
    smaller = _first_new(oracle, [answer - {x} for x in order])
    if smaller is not None:
        return smaller
    untestable = [x for x in order if oracle.known[answer - {x}] is Side.SKIP]
    pairs = [answer - {x, y} for x in untestable for y in order if y != x]
    return _first_new(oracle, list(dict.fromkeys(pairs)))


def _first_new(oracle: _Oracle, subsets: list[frozenset[int]]) -> frozenset[int] | None:
    """Ask ``subsets`` ``width`` at a time until one is NEW."""
    for start in range(0, len(subsets), oracle.width):
        chunk = subsets[start:start + oracle.width]
        for subset, side in zip(chunk, oracle.ask(chunk)):
            if side is Side.NEW:
                return subset
    return None


def _result(answer: frozenset[int], oracle: _Oracle, gave_up: bool) -> EnvSearch:
    """The answer is always a subset seen NEW (``_reduce`` keeps held + candidates NEW, and the
    smallest seen NEW when it gave up), so it is exact exactly when each one-smaller subset was
    seen OLD."""
    unverified = tuple(x for x in sorted(answer) if oracle.known.get(answer - {x}) is not Side.OLD)
    notes = []
    if gave_up:
        notes.append(f"stopped after {oracle.untestable} untestable trials (the limit)")
    if unverified:
        names = ", ".join(str(x) for x in unverified)
        many = len(unverified) > 1
        how = "was untestable or not tried" if gave_up else "was untestable"
        notes.append(f"the smallest set seen to fail: leaving out change{'s' if many else ''} {names}"
                     f"{' (one at a time)' if many else ''} {how}, so {'each' if many else 'it'} may be innocent")
    return EnvSearch(tuple(sorted(answer)), not unverified, tuple(oracle.trials), "; ".join(notes), unverified)
