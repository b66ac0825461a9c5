"""--confidence 0.95 against --repeat K on a simulated flaky regression (issue 22).

    .venv/bin/python benchmarks/confidence.py [--seeds 40] [--repeat 5,10]

A list of N candidates whose first bad index is drawn uniformly (seeded); a bad point fails a run
with probability q, a good point never.  For each q in 30/50/70 % and N in 8/32/128, the table gives
how often each search names the true first bad point, and its mean number of runs (ends included):

- ``--confidence 0.95``: ``bayes.search`` (right only when it also says it is sure);
- ``--repeat K``: today's search (``search.search``), each point run until a run fails or K ran,
  the ends first, as ``Probe.check_ends`` and ``Probe.test_many`` do (a bad end that passes K
  runs stops it: not reproduced, counted wrong).

Figures are printed, never asserted (tests/search/test_bayes.py asserts the rows it needs).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from dsbisect.search import bayes
from dsbisect.search import steps as search  # noqa: E402

Side = search.Side


def _oracle(first: int, q: float, rng: random.Random):
    return lambda i: Side.NEW if i >= first and rng.random() < q else Side.OLD


def confidence(n: int, first: int, q: float, rng: random.Random, p: float) -> tuple[bool, int]:
    est = bayes.search(n, _oracle(first, q, rng), p)
    return est.sure and est.first_new == first, est.runs


def repeat(n: int, first: int, q: float, rng: random.Random, k: int) -> tuple[bool, int]:
    probe, runs = _oracle(first, q, rng), [0]

    def point(i: int) -> Side:
        for _ in range(k):
            runs[0] += 1
            if probe(i) is Side.NEW:
                return Side.NEW
        return Side.OLD
    if point(0) is Side.NEW or point(n - 1) is Side.OLD:
        return False, runs[0]
    return search.search(n, lambda idx: [point(i) for i in idx]).first_new == first, runs[0]


def row(q: float, n: int, seeds: int, ks: list[int], p: float) -> list[str]:
    cells = []
    for how in [("confidence", p)] + [("repeat", k) for k in ks]:
        right = runs = 0
        for seed in range(seeds):
            first = random.Random(1000 + seed).randint(1, n - 1)
            rng = random.Random(seed)
            ok, used = confidence(n, first, q, rng, p) if how[0] == "confidence" else repeat(n, first, q, rng, how[1])
            right += ok
            runs += used
        cells.append(f"{100 * right / seeds:.0f} % · {runs / seeds:.1f}")
    return cells


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--repeat", default="5,10", help="the K of --repeat K to compare with (comma-separated)")
    ap.add_argument("--confidence", type=float, default=0.95)
    args = ap.parse_args()
    ks = [int(k) for k in args.repeat.split(",")]
    start = time.monotonic()
    heads = [f"--confidence {args.confidence:g}"] + [f"--repeat {k}" for k in ks]
    print(f"accuracy · mean runs over {args.seeds} seeded runs (first bad index uniform; ends included)\n")
    print("| failure rate | candidates | " + " | ".join(heads) + " |")
    print("|---|---|" + "---|" * len(heads))
    for q in (0.3, 0.5, 0.7):
        for n in (8, 32, 128):
            print(f"| {100 * q:.0f} % | {n} | " + " | ".join(row(q, n, args.seeds, ks, args.confidence)) + " |",
                  flush=True)
    print(f"\n({time.monotonic() - start:.0f} s)")


if __name__ == "__main__":
    main()
