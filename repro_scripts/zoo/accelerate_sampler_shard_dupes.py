"""Accelerate: a shuffled DataLoader is sharded with duplicates when the ranks' RNGs differ.

Source: https://github.com/huggingface/accelerate/pull/2694  "Fix the rng states of sampler's
        generator to be synchronized for correct sharding of dataset across GPUs" (the PR carries
        the report, its logs and the reproduction: ``torch.manual_seed(process_index)``, then a
        ``DataLoader(shuffle=True)`` through ``prepare``, and the gathered indices miss samples).
Cause:  ``prepare_data_loader`` shards a shuffling sampler with ``BatchSamplerShard``, which
        assumes every rank draws the same permutation.  Up to 0.23 accelerate made that so by
        broadcasting the state of the sampler's generator at every ``__iter__``; from 0.24 it
        replaced the sampler by a ``SeedableRandomSampler`` seeded the same on every rank (the
        epoch, or a fresh generator's fixed default seed).  PR #2126 ("Allow for ACCELERATE_SEED
        env var", 183c9dd3, 0.25.0) seeds it from ``torch.random.initial_seed()`` -- each rank's
        own seed -- and the ranks' shards overlap.  (From 0.26.0, #2319 made the seedable sampler
        opt-in, and the default path shuffled from each rank's global RNG without a sync: still
        broken.)  PR #2694 (baafaf4a, 0.30.0) gives the sampler a generator and synchronises it.

Truth (kind: fail, regression): last good 0.24.1, first bad 0.25.0, commit
  183c9dd3ce74f97d951f093e8c9573dfd1b1be61 (#2126); broken through 0.29.3, fixed in 0.30.0 by
  baafaf4a6e039ea936e215904248cb57ba768722 (#2694).
How established: ``git log -S 'self.seed = torch.random.initial_seed()'`` names #2126 as the line's
  introduction; ``git show 183c9dd3^:src/accelerate/data_loader.py`` seeds with
  ``self.epoch + self.generator.initial_seed()`` of a fresh ``torch.Generator()`` (the same on
  every rank); ``git tag --contains 183c9dd3`` -> v0.25.0 first (17th of the 61 first-parent
  commits from the merge base of v0.24.1 and v0.25.0); ``git tag --contains baafaf4a`` ->
  v0.30.0; and the releases run by hand: 0.23.0 and 0.24.0 pass, 0.25.0 fails.

Environment: CPU only, 2 ranks (torchrun, gloo), < 1 GB, ~10 s a run.  accelerate < 0.21 imports
``pkg_resources``: the case pins ``setuptools<82``.

Check: each rank seeds torch with its rank (as a job whose ranks draw different random numbers
before the data loop does), then iterates one epoch of ``accelerator.prepare(DataLoader(range(22),
shuffle=True, batch_size=4))``; the indices of both ranks together must cover all 22 samples.
Exit 0 if so, else an AssertionError naming the missing ones (exit 1).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

NUM_ELEMENTS = 22
BATCH_SIZE = 4


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.parse_args()

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset

    timeout = datetime.timedelta(seconds=float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    dist.init_process_group("gloo", timeout=timeout)  # accelerate reuses an initialised group

    import accelerate
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    rank, world = accelerator.process_index, accelerator.num_processes
    print(f"rank {rank}/{world}: torch {torch.__version__}, accelerate {accelerate.__version__}", flush=True)
    if world < 2:
        print("needs at least 2 ranks", flush=True)
        return 125

    torch.manual_seed(rank)
    dataset = TensorDataset(torch.arange(NUM_ELEMENTS))
    loader = accelerator.prepare(DataLoader(dataset, shuffle=True, batch_size=BATCH_SIZE))
    mine = [int(i) for (batch,) in loader for i in batch.tolist()]
    print(f"rank {rank}: indices {mine}", flush=True)

    every = [None] * world
    dist.all_gather_object(every, mine)
    seen = {i for part in every for i in part}
    missing = sorted(set(range(NUM_ELEMENTS)) - seen)
    dist.barrier()
    dist.destroy_process_group()
    if missing:  # a traceback, so that dsbisect's failure reason names the check
        raise AssertionError(f"samples {missing} were served to no rank (the ranks shuffled differently)")
    print(f"rank {rank}: ok, all {NUM_ELEMENTS} samples served", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    # Leave without interpreter teardown once the verdict is printed (see
    # accelerate_main_process_first.py: rare SIGABRTs at exit of gloo jobs on torch 2.13).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
