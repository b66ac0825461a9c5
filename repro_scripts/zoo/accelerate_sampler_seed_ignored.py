"""Accelerate: on several ranks, the shuffle order of a prepared DataLoader ignores the seed.

Source: https://github.com/huggingface/accelerate/pull/3459  "Fix seeding of new generator for
        multi GPU" (the PR carries the report and a test: with more than one process, the
        shuffled order no longer depended on ``set_seed``).
Cause:  PR #2694 (0.30.0) gave a shuffling ``RandomSampler`` that had no generator a fresh
        ``torch.Generator()`` so that its state could be synchronised across ranks -- but never
        seeded it: every run, whatever the seed, starts from the generator's fixed default seed
        (67280421310721) and draws the same permutation.  #3459 seeds the new generator from
        torch's global RNG (which ``set_seed`` drives).

Truth: see docs/results/zoo-truth-hf.json (case accelerate_sampler_seed_ignored): established by
  ``git tag --contains`` on the PRs' commits, ``git show`` of data_loader.py either side, and by
  running the releases either side.

Environment: CPU only, 2 ranks (torchrun, gloo), < 1 GB, ~10 s a run.

Check: build ``accelerator.prepare(DataLoader(range(32), shuffle=True, batch_size=4))`` after
``torch.manual_seed(1)`` and again after ``torch.manual_seed(2)`` (the same on every rank), one
epoch each: the two epochs' orders must differ (the chance that two seeds give the same
permutation of 32 is nil), and the ranks together must serve every sample once in each.  Exit 0
if so, else an AssertionError (exit 1).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

NUM_ELEMENTS = 32
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

    dataset = TensorDataset(torch.arange(NUM_ELEMENTS))
    orders = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        loader = accelerator.prepare(DataLoader(dataset, shuffle=True, batch_size=BATCH_SIZE))
        mine = [int(i) for (batch,) in loader for i in batch.tolist()]
        every = [None] * world
        dist.all_gather_object(every, mine)
        served = sorted(i for part in every for i in part)
        if served != list(range(NUM_ELEMENTS)):
            raise AssertionError(f"seed {seed}: the ranks served {served}, not each sample once")
        orders.append(every)
        print(f"rank {rank}: seed {seed}: indices {mine}", flush=True)

    dist.barrier()
    dist.destroy_process_group()
    if orders[0] == orders[1]:  # a traceback, so that dsbisect's failure reason names the check
        raise AssertionError("the shuffle order under torch.manual_seed(1) and (2) is the same: the seed is ignored")
    print(f"rank {rank}: ok, the seed changes the order", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    # Leave without interpreter teardown once the verdict is printed (see
    # accelerate_main_process_first.py: rare SIGABRTs at exit of gloo jobs on torch 2.13).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
