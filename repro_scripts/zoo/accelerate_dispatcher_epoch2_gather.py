"""Accelerate: in the second epoch of a DataLoaderDispatcher, gather_for_metrics drops samples.

Source: https://github.com/huggingface/accelerate/pull/1609  "reset end_of_dataloader for
        dataloader_dispatcher" (merged 2023-06-20, f4334572).
Cause:  ``gather_for_metrics`` cuts the padded samples of the last batch when the active
        dataloader says ``end_of_dataloader``.  ``DataLoaderShard.__iter__`` resets that flag at
        the start of every pass; ``DataLoaderDispatcher.__iter__`` (the loader of iterable
        datasets, and of every loader with ``dispatch_batches=True``) did not: from the second
        epoch on it still says "last batch" from the first one, and ``gather_for_metrics``
        truncates the first batches to the remainder.  #1609 calls ``self.reset()`` there.

Truth: see docs/results/zoo-truth-hf.json (case accelerate_dispatcher_epoch2_gather).

Environment: CPU only, 2 ranks (torchrun, gloo), < 1 GB, ~15 s a run.  accelerate < 0.21 imports
``pkg_resources``: the case pins ``setuptools<82``.

Check: an ``IterableDataset`` of 10 numbers through ``accelerator.prepare(DataLoader(...,
batch_size=2))`` (a dispatcher), two epochs; in each, ``gather_for_metrics`` of every batch must
give the 10 numbers once.  Exit 0 if so, else an AssertionError naming the epoch (exit 1).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

NUM_ELEMENTS = 10


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.parse_args()

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, IterableDataset

    timeout = datetime.timedelta(seconds=float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    dist.init_process_group("gloo", timeout=timeout)  # accelerate reuses an initialised group

    import accelerate
    from accelerate import Accelerator
    from accelerate.data_loader import DataLoaderDispatcher

    class Numbers(IterableDataset):
        def __iter__(self):
            return iter(torch.arange(NUM_ELEMENTS))

    accelerator = Accelerator(cpu=True)
    rank, world = accelerator.process_index, accelerator.num_processes
    print(f"rank {rank}/{world}: torch {torch.__version__}, accelerate {accelerate.__version__}", flush=True)
    if world < 2:
        print("needs at least 2 ranks", flush=True)
        return 125

    loader = accelerator.prepare(DataLoader(Numbers(), batch_size=2))
    if not isinstance(loader, DataLoaderDispatcher):
        print(f"accelerate chose {type(loader).__name__}, not the dispatcher", flush=True)
        return 125
    bad = []
    for epoch in (1, 2):
        got = []
        for batch in loader:
            got.extend(int(x) for x in accelerator.gather_for_metrics(batch).tolist())
        print(f"rank {rank}: epoch {epoch}: gathered {got}", flush=True)
        if sorted(got) != list(range(NUM_ELEMENTS)):
            bad.append(f"epoch {epoch} gathered {sorted(got)}")
    dist.barrier()
    dist.destroy_process_group()
    if bad:  # a traceback, so that dsbisect's failure reason names the check
        raise AssertionError(f"gather_for_metrics over a DataLoaderDispatcher: {'; '.join(bad)}, not 0..{NUM_ELEMENTS - 1} once")
    print(f"rank {rank}: ok", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    # Leave without interpreter teardown once the verdict is printed (see
    # accelerate_main_process_first.py: rare SIGABRTs at exit of gloo jobs on torch 2.13).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
