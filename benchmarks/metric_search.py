"""The numeric search (issue 38) against fixed ``--repeat K`` medians, TorchBench style.

    .venv/bin/python benchmarks/metric_search.py [--seeds 100] [--repeat 3,5] [--candidates 32]

A throughput of 400 over N candidates drops by an effect E at one index drawn uniformly (seeded);
every run is off by Gaussian noise of sd S (a fraction of the value).  The threshold is E / 2
("--worse-if 'lower by E/2 %'": the user asks for changes about the size of the one they saw).
For E in 5/10/20 % and S in 2/5 %, each method's share of right answers, of confidently wrong
ones, and its mean runs (ends included; "to right": over the right answers only):

- ``search``: ``search.numeric.search`` with ``verdict.numbers.Judge`` at 0.95; right when the
  report is one step over the threshold, located at the true index; wrong when it locates a step
  anywhere else; otherwise it said it was not sure (capped, unresolved, not reproduced).
- ``--repeat K``: each end and each point the plain bisection probes runs K times; a point is bad
  when its median is lower than the good end's median by the threshold or more; the bad end not
  so is "not reproduced" (counted wrong: a regression that is there was not found).

A second table runs the search on harder shapes: two steps, a drifting machine, a spread-out
change, a memory that is exact, and the hardest cell above with every cap three times over.
Figures are printed, never asserted (tests/search/test_numeric.py asserts the rows it needs).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from dsbisect.core.metric import parse_metric  # noqa: E402
from dsbisect.search import steps  # noqa: E402
from dsbisect.search.numeric import END_RUNS, POINT_RUNS, default_cap, search  # noqa: E402
from dsbisect.verdict.numbers import Judge, Shape, find_steps  # noqa: E402

BASE = 400.0


def probe_of(n: int, changes: dict[int, float], noise: float, rng: random.Random, drift: float = 0.0):
    runs = [0]

    def probe(i: int) -> float:
        runs[0] += 1
        level = BASE * (1 - sum(e for at, e in changes.items() if i >= at))
        return level * (1 + rng.gauss(0, noise)) * (1 - drift * runs[0])
    return probe


def ours(n: int, changes: dict[int, float], noise: float, rng: random.Random, threshold: float,
         drift: float = 0.0, caps: int = 1):
    """(the report, runs) of the numeric search (``caps``: its run caps that many times over)."""
    judge = Judge(parse_metric("samples_per_sec", f"lower by {threshold * 100:g}%"))
    ex = search(n, probe_of(n, changes, noise, rng, drift), judge, threshold, max_runs=caps * default_cap(n),
                point_runs=caps * POINT_RUNS, end_runs=caps * END_RUNS)
    return find_steps(ex.grouped(), judge), ex.runs.total


def repeat(n: int, first: int, effect: float, noise: float, rng: random.Random, k: int) -> tuple[str, int]:
    """('right' | 'wrong', runs) of the plain bisection on medians of K runs."""
    probe, used, threshold = probe_of(n, {first: effect}, noise, rng), [0], effect / 2

    def median(i: int) -> float:
        used[0] += k
        return statistics.median(probe(i) for _ in range(k))
    good = median(0)
    if (good - median(n - 1)) / good < threshold:
        return "wrong", used[0]

    def side(i: int) -> steps.Side:
        return steps.Side.NEW if (good - median(i)) / good >= threshold else steps.Side.OLD
    found = steps.search(n, lambda idx: [side(i) for i in idx]).first_new
    return ("right" if found == first else "wrong"), used[0]


def one_step(n: int, first: int, effect: float, noise: float, rng: random.Random) -> tuple[str, int]:
    report, runs = ours(n, {first: effect}, noise, rng, effect / 2)
    located = [s.first for s in report.over if s.located]
    if report.shape is Shape.STEP and located == [first]:
        return "right", runs
    return ("wrong" if any(i != first for i in located) else "unsure"), runs


def cell(how: str, k: int, n: int, effect: float, noise: float, seeds: int) -> str:
    tally = {"right": 0, "wrong": 0, "unsure": 0}
    runs, right_runs = 0, 0
    for seed in range(seeds):
        first = random.Random(1000 + seed).randint(1, n - 1)
        rng = random.Random(seed)
        verdict, used = one_step(n, first, effect, noise, rng) if how == "search" else \
            repeat(n, first, effect, noise, rng, k)
        tally[verdict] += 1
        runs += used
        right_runs += used if verdict == "right" else 0
    to_right = f"{right_runs / tally['right']:.0f}" if tally["right"] else "-"
    return (f"{100 * tally['right'] / seeds:.0f} % / {100 * tally['wrong'] / seeds:.0f} % · "
            f"{runs / seeds:.0f} ({to_right})")


def shapes(n: int, seeds: int) -> list[tuple[str, str]]:
    """The search on harder shapes: (what, right % · mean runs)."""
    rows = []

    def run(label: str, make, right, caps: int = 1) -> None:
        ok = runs = 0
        for seed in range(seeds):
            rng = random.Random(seed)
            changes, noise, threshold, drift = make(random.Random(1000 + seed))
            report, used = ours(n, changes, noise, rng, threshold, drift, caps)
            ok += right(report, changes)
            runs += used
        rows.append((label, f"{100 * ok / seeds:.0f} % · {runs / seeds:.0f}"))

    def two(r):
        a = r.randint(1, n // 2)
        return {a: 0.06, r.randint(a + 4, n - 1): 0.06}, 0.02, 0.03, 0.0

    def spread(r):
        a = r.randint(1, n // 2)
        return {a: 0.035, r.randint(a + 4, n - 1): 0.035}, 0.01, 0.05, 0.0

    def drifting(r):
        return {r.randint(1, n - 1): 0.10}, 0.02, 0.05, 0.0005

    def exact(r):
        return {r.randint(1, n - 1): 0.10}, 0.0, 0.05, 0.0

    def hard(r):
        return {r.randint(1, n - 1): 0.05}, 0.05, 0.025, 0.0

    def located(report, changes):
        return sorted(s.first for s in report.over if s.located) == sorted(changes) and report.shape in (Shape.STEP, Shape.STEPS)
    run("two steps of 6 % (threshold 3 %, noise 2 %): both located", two, located)
    run("two steps of 3.5 % (threshold 5 %, noise 1 %): says spread out", spread,
        lambda report, _: report.shape is Shape.SPREAD)
    run("10 % step, machine slowing 0.05 %/run (noise 2 %)", drifting, located)
    run("10 % step, exact (a memory peak)", exact, located)
    run("5 % step in 5 % noise, every cap three times over", hard, located, caps=3)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--repeat", default="3,5", help="the K of --repeat K to compare with (comma-separated)")
    ap.add_argument("--candidates", type=int, default=32)
    args = ap.parse_args()
    ks, n = [int(k) for k in args.repeat.split(",")], args.candidates
    start = time.monotonic()
    heads = ["search (P 0.95)"] + [f"--repeat {k}" for k in ks]
    print(f"right / wrong · mean runs (mean runs to a right answer); {args.seeds} seeds, {n} candidates, "
          "one step, threshold = effect / 2\n")
    print("| effect | noise | " + " | ".join(heads) + " |")
    print("|---|---|" + "---|" * len(heads))
    for effect in (0.05, 0.10, 0.20):
        for noise in (0.02, 0.05):
            cells = [cell("search", 0, n, effect, noise, args.seeds)]
            cells += [cell("repeat", k, n, effect, noise, args.seeds) for k in ks]
            print(f"| {100 * effect:.0f} % | {100 * noise:.0f} % | " + " | ".join(cells) + " |", flush=True)
    print("\n| the search on | right · mean runs |\n|---|---|")
    for label, figures in shapes(n, args.seeds):
        print(f"| {label} | {figures} |", flush=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n({time.monotonic() - start:.0f} s; load average {load})")


if __name__ == "__main__":
    main()
