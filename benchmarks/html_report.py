"""The HTML report at 8, 64 and 512 ranks: how long reading, viewing and rendering take, and
how large the page is (issue 25: under a second and under 2 MB at 512 ranks).

    .venv/bin/python benchmarks/html_report.py [--worlds 8,64,512] [--repeat 5]

Each world is a synthetic flight-recorder set written as torch writes its NCCL dumps
(``tests/frsets.py``: half the ranks wait in #120, the other half in #119), read by dsbisect's
own readers.  "read" is reading the run folder (the pickled dumps, the stacks); "render" is
the view (grouping, the first mismatch, the words) and the page.  Best of ``--repeat``; the
load average is printed, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import frsets  # noqa: E402

from dsbisect.render import htmlsource  # noqa: E402
from dsbisect.render.htmlreport import Page, RunPage, render  # noqa: E402


def measure(world: int, repeat: int) -> tuple[float, float, int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = frsets.split_hang(Path(tmp) / "run", world=world)
        reads, renders, html = [], [], ""
        for _ in range(repeat):
            t0 = time.perf_counter()
            looks, early, proof = htmlsource.folder_looks(folder)
            t1 = time.perf_counter()
            run = RunPage(id=1, title=f"synthetic {world} ranks", outcome="hang", manual=False, reason="",
                          signature="", seconds=None, looks=looks, early=early, proof=proof, note="", log_tail="")
            html = render(Page(title=f"{world} ranks", ladders=(), runs=(run,)))
            t2 = time.perf_counter()
            reads.append(t1 - t0)
            renders.append(t2 - t1)
        rows = html.count('<tr data-ranks="')
        return min(reads), min(renders), len(html.encode()), rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", default="8,64,512")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"load average (1 min): {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs")
    print(f"{'ranks':>6} {'read s':>8} {'render s':>9} {'page bytes':>11} {'rows':>5}")
    for world in (int(w) for w in args.worlds.split(",")):
        read, rend, size, rows = measure(world, args.repeat)
        print(f"{world:>6} {read:>8.3f} {rend:>9.3f} {size:>11} {rows:>5}")


if __name__ == "__main__":
    main()
