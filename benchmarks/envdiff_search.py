"""Level 1 of an environment bisection (issue 21): trials and rounds of dsbisect's search over
the changes, against plain ddmin over the same oracle.

    .venv/bin/python benchmarks/envdiff_search.py                # the table, T = 60 s per trial
    .venv/bin/python benchmarks/envdiff_search.py --trial-seconds 300 --samples 50 --out FILE

For n = 10, 40, 100 changes and 1 or 2 hidden culprits (two culprits only fail together: an
interaction), ``--samples`` random hidden sets per cell (seeded) are searched by
``dsbisect.envsearch.find_culprits`` and by Zeller's ddmin (Zeller and Hildebrandt 2002, as
published: subsets, then complements, then twice the granularity), both memoised, both asked
through the same oracle: NEW iff every hidden culprit is applied.  Width 1 asks one trial at a
time; width 4 asks up to 4 at once (``--jobs 4``): ddmin then tests its subsets and complements
4 at a time and stops at the first batch that holds a failing one.  The wall time is the mean
number of rounds times T, the seconds one trial takes (a venv resolved and the job run).
``--ties`` adds cells where one random pair of changes cannot be applied apart (untestable when
split), given to dsbisect as a unit.

The goal (issue 21): at most ceil(log2 n) + 2 trials for one culprit.  Figures are printed,
never asserted; no I/O beyond the table.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dsbisect.search.changes import find_culprits  # noqa: E402
from dsbisect.search.steps import Side  # noqa: E402

Oracle = Callable[[frozenset[int]], Side]


def hidden_oracle(hidden: frozenset[int], tie: tuple[int, int] | None) -> Oracle:
    def side_of(applied: frozenset[int]) -> Side:
        if tie and (tie[0] in applied) != (tie[1] in applied):
            return Side.SKIP
        return Side.NEW if hidden <= applied else Side.OLD
    return side_of


# ------------------------------------------------------------------ plain ddmin


class Counted:
    """The same memo for both searches: each subset asked once, counted by trial and by round."""

    def __init__(self, n: int, side_of: Oracle) -> None:
        self.side_of = side_of
        self.known = {frozenset(): Side.OLD, frozenset(range(n)): Side.NEW}
        self.trials = self.rounds = 0

    def batch(self, subsets: Sequence[frozenset[int]]) -> list[Side]:
        todo = [s for s in dict.fromkeys(subsets) if s not in self.known]
        if todo:
            self.rounds += 1
            self.trials += len(todo)
            for s in todo:
                self.known[s] = self.side_of(s)
        return [self.known[s] for s in subsets]


def ddmin(n: int, ask: Counted, width: int) -> frozenset[int]:
    """Zeller's ddmin: a 1-minimal failing subset of range(n); an untestable trial does not fail."""
    c, parts = list(range(n)), 2
    while len(c) > 1:
        chunks = [c[i * len(c) // parts:(i + 1) * len(c) // parts] for i in range(parts)]
        subsets = [frozenset(ch) for ch in chunks]
        complements = [frozenset(c) - s for s in subsets]
        hit = _first_failing(ask, subsets, width)
        if hit is not None:
            c, parts = sorted(hit), 2
            continue
        hit = _first_failing(ask, complements if parts > 2 else [], width)
        if hit is not None:
            c, parts = sorted(hit), max(parts - 1, 2)
            continue
        if parts >= len(c):
            break
        parts = min(len(c), parts * 2)
    return frozenset(c)


def _first_failing(ask: Counted, subsets: list[frozenset[int]], width: int) -> frozenset[int] | None:
    for start in range(0, len(subsets), width):
        chunk = subsets[start:start + width]
        for s, side in zip(chunk, ask.batch(chunk)):
            if side is Side.NEW:
                return s
    return None


# ---------------------------------------------------------------------- cells


def ours(n: int, side_of: Oracle, width: int, units: Sequence[frozenset[int]]) -> tuple[int, int, frozenset[int]]:
    result = find_culprits(n, lambda subsets: [side_of(s) for s in subsets], width=width, units=units)
    return len(result.trials), result.rounds, frozenset(result.culprits)


def theirs(n: int, side_of: Oracle, width: int, units: Sequence[frozenset[int]]) -> tuple[int, int, frozenset[int]]:
    ask = Counted(n, side_of)
    answer = ddmin(n, ask, width)
    return ask.trials, ask.rounds, answer


UNIT_NOT_GIVEN = "dsbisect, the tie not given as a unit"
SEARCHES = (("dsbisect", ours, True), (UNIT_NOT_GIVEN, ours, False), ("plain ddmin", theirs, False))


def cell(n: int, k: int, samples: int, rng: random.Random, with_tie: bool) -> dict[str, dict[int, list]]:
    """{search: {width: [(trials, rounds, right), ...]}} over ``samples`` hidden sets."""
    got = {name: {1: [], 4: []} for name, _, _ in SEARCHES if with_tie or name != UNIT_NOT_GIVEN}
    for _ in range(samples):
        hidden = frozenset(rng.sample(range(n), k))
        tie = tuple(rng.sample(sorted(set(range(n)) - hidden), 2)) if with_tie else None
        side_of = hidden_oracle(hidden, tie)
        for name, run, as_unit in SEARCHES:
            if name not in got:
                continue
            for width in (1, 4):
                t, r, answer = run(n, side_of, width, [frozenset(tie)] if tie and as_unit else ())
                got[name][width].append((t, r, answer == hidden))
    return got


def rows_of(n: int, k: int, got: dict[str, dict[int, list]], seconds: float, tie: bool) -> list[tuple[str, ...]]:
    goal = math.ceil(math.log2(n)) + 2
    out = []
    for name, by_width in got.items():
        t1 = [t for t, _, _ in by_width[1]]
        t4 = [t for t, _, _ in by_width[4]]
        r4 = [r for _, r, _ in by_width[4]]
        right = [ok for w in (1, 4) for _, _, ok in by_width[w]]
        met = "—"
        if k == 1 and tie:
            met = f"n/a: untestable trials (max {max(t1)})"
        elif k == 1:
            met = f"met (max {max(t1)} <= {goal})" if max(t1) <= goal else f"not met (max {max(t1)} > {goal})"
        out.append((
            f"{n}", f"{k}{' + tie' if tie else ''}", name,
            f"{statistics.mean(t1):.1f} / {max(t1)}",
            f"{statistics.mean(t4):.1f} / {max(t4)}",
            f"{statistics.mean(r4):.1f} / {max(r4)}",
            f"{_wall(statistics.mean(t1) * seconds)} / {_wall(statistics.mean(r4) * seconds)}",
            f"{sum(right)}/{len(right)}", met,
        ))
    return out


def _wall(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 600 else f"{seconds:.0f} s"


def render(rows: list[tuple[str, ...]], seconds: float, samples: int, seed: int) -> str:
    head = (f"Measured {time.strftime('%Y-%m-%d')}: {os.cpu_count()} cores, {platform.machine()}, "
            f"Python {platform.python_version()}; {samples} hidden sets per cell, seed {seed}, "
            f"T = {seconds:g} s per trial.\n\n")
    lines = ["| n | culprits | search | trials = rounds, width 1 (mean / max) | trials, width 4 | rounds, width 4 "
             "| wall at width 1 / 4 | answer = the hidden set (both widths) | goal <= ceil(log2 n)+2 (one culprit) |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return head + "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trial-seconds", type=float, default=60.0, help="T: the seconds one trial takes")
    ap.add_argument("--samples", type=int, default=20, help="random hidden sets per cell")
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--ties", action="store_true", help="also cells with one untestable tied pair")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    rows: list[tuple[str, ...]] = []
    for tie in (False, True) if args.ties else (False,):
        for n in (10, 40, 100):
            for k in (1, 2):
                rows += rows_of(n, k, cell(n, k, args.samples, rng, tie), args.trial_seconds, tie)
    table = render(rows, args.trial_seconds, args.samples, args.seed)
    print(table)
    if args.out:
        args.out.write_text(table)


if __name__ == "__main__":
    main()
