"""Accelerate 0.17.0: every prepared DataLoader left before its end stays referenced (a memory leak).

Issue:  https://github.com/huggingface/accelerate/pull/3391  "[`memory leak`] Replace GradientState
        -> DataLoader reference with weakrefs" ("Otherwise, they will always stay in memory,
        leading to notable memory leaks. Note: even accelerator.free_memory() did not work!").
Cause:  https://github.com/huggingface/accelerate/pull/1162  "Let GradientState know active
        dataloaders and reset the remainder" (03b617b6, first in 0.17.0): ``DataLoaderShard.__iter__``
        appends the loader to ``GradientState.dataloader_references`` when its iteration begins and
        removes it only after the last batch, so a loop left early (``break``) keeps the loader and
        its dataset alive for the life of the process.
Fix:    https://github.com/huggingface/accelerate/pull/3391  (526925b4, first in 1.4.0): weak
        references.

Truth (kind: metric, memory; a regression and its fix): last good 0.16.0, first bad 0.17.0, first
  fixed 1.4.0 (last bad 1.3.0).  Measured by hand: docs/results/metric-zoo-truth.json.

Metric: ``rss_growth`` (MiB): the process's resident set after ``--loaders`` rounds of "prepare
  a DataLoader over a fresh 8 MiB TensorDataset, take one batch, break, ``free_memory()`` (which
  drops the Accelerator's own list of loaders), gc.collect()", minus the resident set before the
  first round; written as a JSON line (``{"name": "rss_growth", "value": V, "unit": "MiB"}``) to
  the file named by ``DSBISECT_METRICS`` when set, and printed; ``ru_maxrss`` (the peak, MiB) and
  ``leaked_loaders`` (how many loaders the GradientState still references) likewise.  The bad
  end grows by loaders x 8 MiB (400 MiB), the good end by a few MiB.
    dsbisect bisect accelerate 0.16.0 0.17.0 --matrix repro_scripts/zoo/matrix.yaml \
        --case accelerate_loader_leak_rss --metric rss_growth --worse-if 'higher by 100 MiB'
  No assertion: the script exits 0 whatever the number.

Environment: CPU, 1 process (torchrun --nproc_per_node 1; under 2 each rank leaks alike, from
0.17.1 on: 0.17.0 fails prepare() with cpu=True), < 1 GB, ~15 s per run.  Pins:
setuptools < 82 (accelerate < 0.21 imports pkg_resources).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import weakref

MIB = 2 ** 20


def emit(record: dict) -> None:
    """One JSON line: on stdout, and appended to $DSBISECT_METRICS when it is set."""
    line = json.dumps(record)
    print(line, flush=True)
    path = os.environ.get("DSBISECT_METRICS")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def rss_mib() -> float:
    """The resident set now, from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.add_argument("--loaders", type=int, default=50)
    ap.add_argument("--mib", type=int, default=8, help="size of each loader's dataset")
    args = ap.parse_args()

    if os.environ.get("WORLD_SIZE", "1") == "1":
        # One process: accelerate without its distributed set-up, so that Accelerator() (no cpu
        # flag) takes the CPU in every release.  0.17.0 fails prepare() after cpu=True (its
        # AcceleratorState() check, gone in 0.17.1), and 0.16.0 without it asks for NCCL when
        # LOCAL_RANK is set.
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
            os.environ.pop(name, None)
    import torch

    import accelerate
    from accelerate import Accelerator

    print(f"torch {torch.__version__}, accelerate {accelerate.__version__}", flush=True)
    accelerator = Accelerator(cpu=os.environ.get("WORLD_SIZE") is not None)
    rank = accelerator.process_index
    rows = args.mib * MIB // (4 * 256)

    def one_round() -> None:
        data = torch.utils.data.TensorDataset(torch.randn(rows, 256))
        loader = accelerator.prepare(torch.utils.data.DataLoader(data, batch_size=16))
        for _batch in loader:
            break  # left early, as a max_steps in mid-epoch or an islice does
        accelerator.free_memory()  # drops the Accelerator's own list of prepared loaders

    one_round()  # warm-up: imports and first allocations are not the leak
    gc.collect()
    before = rss_mib()
    for _ in range(args.loaders):
        one_round()
        gc.collect()
    after = rss_mib()
    held = getattr(accelerator.gradient_state, "dataloader_references", [])
    leaked = sum(1 for d in held if (d() if isinstance(d, weakref.ref) else d) is not None)  # 1.4.0: weakrefs
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"rank {rank}: resident set {before:.1f} MiB -> {after:.1f} MiB after {args.loaders} loaders; "
          f"{leaked} loaders still referenced", flush=True)
    emit({"name": "rss_growth", "value": round(after - before, 1), "unit": "MiB", "rank": rank})
    emit({"name": "ru_maxrss", "value": round(peak, 1), "unit": "MiB", "rank": rank})
    emit({"name": "leaked_loaders", "value": leaked, "rank": rank})
    return 0


if __name__ == "__main__":
    sys.exit(main())
