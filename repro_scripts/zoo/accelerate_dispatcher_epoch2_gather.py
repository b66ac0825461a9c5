"""Accelerate: in the second epoch of a DataLoaderDispatcher, gather_for_metrics drops samples.

Source: https://github.com/huggingface/accelerate/pull/1609  "reset end_of_dataloader for
        dataloader_dispatcher" (merged 2023-06-20, f4334572), the dispatcher's half of
        https://github.com/huggingface/accelerate/pull/1562 "Reset dataloader end_of_datalaoder at
        each iter" (DataLoaderShard's half, 0.20.3).
Cause:  ``gather_for_metrics`` cuts the padded samples of the last batch when the active
        dataloader says ``end_of_dataloader``.  Up to 0.19 that flag lived on ``GradientState``
        and was cleared when a dataloader began; PR #1483 ("Fix gradient state bugs in multiple
        dataloader", 68376bab, 0.20.0) moved it onto each dataloader (``DataLoaderStateMixin``)
        without clearing it when a new pass begins: from the second epoch on the loader still says
        "last batch" from the first one, and ``gather_for_metrics`` truncates every batch to the
        remainder.  #1562 added the reset to ``DataLoaderShard`` (0.20.3), #1609 to
        ``DataLoaderDispatcher`` (the loader of ``dispatch_batches=True`` and of iterable
        datasets), first in 0.21.0.

Truth (kind: fail, regression): last good 0.19.0, first bad 0.20.0, commit
  68376babd822e9a5f8633e66d8258dea909a7df8 (#1483); 0.20.0-0.20.3 are bad for the dispatcher,
  fixed in 0.21.0 by f433457244d2cf183aaf9a8d1bfce947b98d0625 (#1609).
How established: ``git log -S 'class DataLoaderStateMixin'`` names #1483 as the mixin's
  introduction; ``git tag --contains 68376bab`` -> v0.20.0 first (the 42nd of the 73 first-parent
  commits from the merge base of v0.19.0 and v0.20.0, oldest first); ``git show
  v0.19.0:src/accelerate/state.py`` keeps ``end_of_dataloader`` on GradientState with
  ``_set_end_of_dataloader(False)`` when a dataloader begins; ``git tag --contains f4334572`` ->
  v0.21.0; and the releases run by hand: 0.16.0 and 0.19.0 pass, 0.20.0 and 0.20.3 fail (epoch 2
  gathers 6 of the 10 samples), 0.21.0 passes.

Environment: CPU only, 2 ranks (torchrun, gloo), < 1 GB, ~15 s a run.  accelerate < 0.21 imports
``pkg_resources``: the case pins ``setuptools<82``.

Check: a map-style dataset of 10 numbers through ``Accelerator(dispatch_batches=True).prepare(
DataLoader(..., batch_size=2))`` (a dispatcher; the dataset has a length, so gather_for_metrics
knows the remainder), two epochs; in each, ``gather_for_metrics`` of every batch must
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
    from torch.utils.data import DataLoader, TensorDataset

    timeout = datetime.timedelta(seconds=float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    dist.init_process_group("gloo", timeout=timeout)  # accelerate reuses an initialised group

    import accelerate
    from accelerate import Accelerator
    from accelerate.data_loader import DataLoaderDispatcher

    accelerator = Accelerator(cpu=True, dispatch_batches=True)
    rank, world = accelerator.process_index, accelerator.num_processes
    print(f"rank {rank}/{world}: torch {torch.__version__}, accelerate {accelerate.__version__}", flush=True)
    if world < 2:
        print("needs at least 2 ranks", flush=True)
        return 125

    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(NUM_ELEMENTS)), batch_size=2))
    if not isinstance(loader, DataLoaderDispatcher):
        print(f"accelerate chose {type(loader).__name__}, not the dispatcher", flush=True)
        return 125
    bad = []
    for epoch in (1, 2):
        got = []
        for (batch,) in loader:
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
