"""Accelerate: a shuffled DataLoader is sharded with duplicates when the ranks' RNGs differ.

Source: https://github.com/huggingface/accelerate/pull/2694  "Fix the rng states of sampler's
        generator to be synchronized for correct sharding of dataset across GPUs" (the PR carries
        the report, its logs and the reproduction: ``torch.manual_seed(process_index)``, then a
        ``DataLoader(shuffle=True)`` through ``prepare``, and the gathered indices miss samples).
Cause:  ``prepare_data_loader`` shards a ``RandomSampler`` with ``BatchSamplerShard``, which
        assumes every rank draws the same permutation; accelerate makes that so by giving the
        sampler a ``torch.Generator`` and broadcasting its state at every ``__iter__``
        (``synchronized_generator``).  The seedable-sampler rework (PR #2057, 0.24.0) replaced the
        sampler by a ``SeedableRandomSampler`` seeded from each rank's own
        ``torch.random.initial_seed()`` and dropped the generator sync; #2319 (0.26.0) made the
        seedable sampler opt-in but did not bring the sync back.  #2694 gives the sampler a
        generator again and synchronises it.

Truth: see docs/results/zoo-truth-hf.json (case accelerate_sampler_shard_dupes): established by
  ``git tag --contains`` on the PRs' commits and by running the releases either side.

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
