"""Small groups of knobs for ``dsbisect workaround``: when no knob alone makes the bad point pass,
two (or three) together may (a job that breaks only when two settings are on at once is the
common case: ``overlap_comm`` and ``contiguous_gradients``).

Pure: which groups to try, in what order, and when to stop.  Groups are tried smallest first, in
the knobs' order; a group is not tried (so never reported) when a smaller group that works is
inside it, or when two of its knobs set one setting (the same key, or a key and one inside it).
By default the groups of one size are tried only while no smaller group (a knob alone included)
works: the smallest workarounds are the answer; ``every_size`` goes on past them.  Each group
costs at least one run and at most ``repeat``; a group is started only while the budget left
holds ``repeat`` runs, so that one that passes can be confirmed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Key = tuple[str, tuple[str, ...]]  # (where, key path) of the setting a knob sets


@dataclass(frozen=True)
class GroupLimits:
    """``--max-group`` (1: one knob at a time only), ``--max-group-runs``, ``--every-group``."""

    max_group: int = 2
    max_runs: int = 30
    every_size: bool = False


@dataclass(frozen=True)
class GroupTry:
    """What trying one group gave: whether every run passed, and how many runs it took."""

    works: bool
    runs: int


@dataclass(frozen=True)
class GroupSearch:
    tried: tuple[tuple[tuple[int, ...], GroupTry], ...]  # (indices into the knobs, what it gave), in order
    not_tried: tuple[str, ...]  # why groups were left out, in words


def clash(a: Key, b: Key) -> bool:
    """Two knobs that set one setting: the same variable, or config key paths one inside the other."""
    if a[0] != b[0]:
        return False
    short = min(len(a[1]), len(b[1]))
    return a[1][:short] == b[1][:short]


def candidates(keys: Sequence[Key], size: int, working: Sequence[frozenset[int]]) -> list[tuple[int, ...]]:
    """The groups of ``size`` knobs, in the knobs' order, with no clash and no working group inside."""
    out = []
    for group in itertools.combinations(range(len(keys)), size):
        if any(clash(keys[i], keys[j]) for i, j in itertools.combinations(group, 2)):
            continue
        if any(w <= set(group) for w in working):
            continue
        out.append(group)
    return out


def search_groups(keys: Sequence[Key], singles_working: Sequence[int], limits: GroupLimits, repeat: int,
                  try_group: Callable[[tuple[int, ...]], GroupTry]) -> GroupSearch:
    """Try the groups of 2 .. ``limits.max_group`` knobs, smallest first, within the run budget."""
    working = [frozenset({i}) for i in singles_working]
    tried: list[tuple[tuple[int, ...], GroupTry]] = []
    notes: list[str] = []
    spent = 0
    for size in range(2, limits.max_group + 1):
        if working and not limits.every_size:
            notes.append(f"groups of {size}+ not tried: a smaller one works (--every-group tries them)")
            break
        groups = candidates(keys, size, working)
        for n, group in enumerate(groups):
            if limits.max_runs - spent < repeat:
                notes.append(f"{len(groups) - n} group(s) of {size} not tried: --max-group-runs {limits.max_runs} "
                             f"spent ({spent} runs)")
                return GroupSearch(tuple(tried), tuple(notes))
            got = try_group(group)
            spent += got.runs
            tried.append((group, got))
            if got.works:
                working.append(frozenset(group))
    return GroupSearch(tuple(tried), tuple(notes))
