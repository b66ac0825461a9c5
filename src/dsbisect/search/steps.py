"""The search: first point that behaves like the new end. Pure: the probe does all I/O.

``points[0]`` is known to behave like the *old* end and ``points[-1]`` like the *new*
end (a regression: old = good, new = bad; a fix: old = bad, new = good).  A probe that
answers SKIP (untestable, or a failure that is not the regression) is stepped around: the
next probe moves away from the middle by 1, 2, 4, 8… points, on alternate sides, as the skips
in a row grow (the nearest untested point to the middle each time would walk a block of 25
untestable commits one at a time: 25 runs where this takes about 6); the first answer that is
not a skip brings the probe back to the middle.  If skips are left between the last old and the
first new point, any of them may be where the change happened: the answer is a range.

``width`` > 1 probes several points per round (one per free GPU slice): the points that
split the remaining range into ``width + 1`` parts, as a k-ary search.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dsbisect.core.mode import Side  # the search's sides; the mode names them (mode.Mode)


@dataclass(frozen=True)
class Search:
    last_old: int
    first_new: int
    maybe: tuple[int, ...]  # indices that may be the first new one (first_new and untestable ones before it)
    probed: tuple[tuple[int, Side], ...]  # in the order asked

    @property
    def exact(self) -> bool:
        return self.maybe == (self.first_new,)


def search(n: int, probe: Callable[[Sequence[int]], Sequence[Side]], width: int = 1) -> Search:
    """First index in ``range(n)`` that behaves like index ``n - 1``.

    ``probe(indices)`` answers one Side per index (several at once when ``width`` > 1).
    Each index is asked at most once.
    """
    if n < 2:
        raise ValueError("need at least the two ends")
    lo, hi = 0, n - 1
    known: dict[int, Side] = {}
    order: list[tuple[int, Side]] = []
    while True:
        picks = next_probes(lo, hi, known, width)
        if not picks:
            break
        for i, side in zip(picks, probe(picks), strict=True):
            known[i] = side
            order.append((i, side))
        lo, hi = _narrow(lo, hi, known)
    maybe = tuple(i for i in range(lo + 1, hi + 1) if known.get(i) is not Side.OLD)
    return Search(lo, hi, maybe, tuple(order))


def next_probes(lo: int, hi: int, known: dict[int, Side], width: int = 1, jump: bool = True) -> list[int]:
    """Up to ``width`` untested indices strictly between ``lo`` and ``hi``, spread evenly; after
    skips in a row (``known`` in the order asked), moved away from the spot (skip_offset)."""
    free = [i for i in range(lo + 1, hi) if i not in known]
    if not free:
        return []
    width = max(1, min(width, len(free)))
    offset = skip_offset(known) if jump else 0
    picks: list[int] = []
    for k in range(1, width + 1):
        target = lo + (hi - lo) * k / (width + 1) + offset
        best = min((i for i in free if i not in picks), key=lambda i: (abs(i - target), i))
        picks.append(best)
    return sorted(picks)


def skip_offset(known: dict[int, Side]) -> int:
    """How far from the middle the next probe goes: 0 after an answer, then +1, -2, +4, -8… as
    the answers asked last (``known``'s order) are skips in a row."""
    streak = 0
    for side in reversed(list(known.values())):
        if side is not Side.SKIP:
            break
        streak += 1
    if streak == 0:
        return 0
    step = 2 ** (streak - 1)
    return step if streak % 2 else -step


def _narrow(lo: int, hi: int, known: dict[int, Side]) -> tuple[int, int]:
    """Tighten (lo, hi) to the last OLD before the first NEW among the answers so far."""
    news = [i for i, s in known.items() if s is Side.NEW and lo < i < hi]
    if news:
        hi = min(news)
    olds = [i for i, s in known.items() if s is Side.OLD and lo < i < hi]
    if olds:
        lo = max(olds)
    return lo, hi


def lookahead(lo: int, hi: int, known: dict[int, Side], picks: Sequence[int], width: int = 1) -> list[int]:
    """The indices the search may probe next, whatever ``picks`` answer: for each monotone answer
    (the first NEW among the sorted picks at each place), the next probes of the narrowed range.
    Their venvs can be built while ``picks`` run, as mozregression fetches the next builds."""
    picks = sorted(picks)
    ahead: list[int] = []
    for j in range(len(picks) + 1):
        answer = dict(known) | {p: (Side.OLD if k < j else Side.NEW) for k, p in enumerate(picks)}
        new_lo, new_hi = _narrow(lo, hi, answer)
        ahead += [i for i in next_probes(new_lo, new_hi, answer, width) if i not in ahead]
    return ahead
