"""Rounds of an environment bisection's search at width w (``search.changes.find_culprits``): one
culprit among n changes, at every place, against the bound ``ceil(log_(w+1) n) + 1`` that
``search/changes.py`` states.

    .venv/bin/python benchmarks/envdiff_rounds.py                 # n < 130, widths 1 2 3 4 8
    .venv/bin/python benchmarks/envdiff_rounds.py --max-n 60 --widths 2,4

Prints, per width, the searches run, those over the bound and the most rounds over it; never
asserts (tests/search/test_changes.py checks the bound for n up to 40).
"""

from __future__ import annotations

import argparse
import math
import time

from dsbisect.search.changes import find_culprits
from dsbisect.search.steps import Side


def over_bound(n: int, culprit: int, width: int) -> int:
    """Rounds over the bound of one search (0: within it)."""
    result = find_culprits(n, lambda subsets: [Side.NEW if culprit in s else Side.OLD for s in subsets], width=width)
    assert result.culprits == (culprit,), (n, culprit, width, result.culprits)
    return max(0, result.rounds - (math.ceil(math.log(n, width + 1)) + 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-n", type=int, default=129)
    parser.add_argument("--widths", default="1,2,3,4,8")
    args = parser.parse_args()
    t0 = time.monotonic()
    print("| width | searches | over the bound | most rounds over |")
    print("|---|---|---|---|")
    for width in (int(w) for w in args.widths.split(",")):
        over = [over_bound(n, c, width) for n in range(2, args.max_n + 1) for c in range(n)]
        print(f"| {width} | {len(over)} | {sum(x > 0 for x in over)} | {max(over)} |")
    print(f"n = 2..{args.max_n}, every place of the culprit; {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
