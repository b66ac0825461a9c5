"""Accelerate: ``prepare()`` of a DataLoader with a custom batch_sampler crashes (no ``batch_size``).

Source: https://github.com/huggingface/accelerate/pull/2344  "Fix batch_size sanity check logic
        for `split_batches`" (the PR carries the report: a ``batch_sampler`` without a
        ``batch_size`` attribute, as any sampler that yields variable-size batches has, now fails
        in ``prepare`` although ``split_batches`` is off).
Cause:  PR #2310 ("fix sanity check", 0d2280da, 0.26.0) computed ``batch_size = dataloader.batch_size
        if ... else dataloader.batch_sampler.batch_size`` before looking at ``split_batches``:
        every ``prepare`` of a DataLoader built with ``batch_sampler=`` whose sampler has no
        ``batch_size`` raises ``AttributeError``.  #2344 (7aafa256, 0.27.0) reads it only under
        ``if split_batches``.

Truth (kind: fail, regression): last good 0.25.0, first bad 0.26.0, commit
  0d2280dadc6a93413a5496613b7fdda3a4d2551b (#2310); 0.26.0 and 0.26.1 are bad, fixed again in
  0.27.0 by 7aafa25673f4324cbcaeef508a13e09576f12dc4 (#2344).
How established: ``git tag --contains 0d2280da`` -> v0.26.0 first, ``git tag --contains
  7aafa256`` -> v0.27.0 first; ``git log -S 'else dataloader.batch_sampler.batch_size'`` names just
  the two; ``git show v0.25.0:src/accelerate/data_loader.py`` has the old check (``split_batches and
  dataloader.batch_size > 1``), v0.26.0 and v0.26.1 the unconditional read; and the releases either
  side run by hand.

Environment: CPU only, 1 process (torchrun), < 1 GB, a few seconds a run.

Check: ``accelerator.prepare(DataLoader(dataset, batch_sampler=VariableBatches(...)))``, where the
sampler yields batches of 1, 2, 3, ... indices and has no ``batch_size``; one epoch must serve every
sample once.  Exit 0 if so; the bad releases raise ``AttributeError`` in ``prepare_data_loader``.
"""

from __future__ import annotations

import argparse
import os
import sys

NUM_ELEMENTS = 21  # 1 + 2 + ... + 6


class VariableBatches:
    """A batch sampler that yields batches of growing size (and so has no single batch_size)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        start, size = 0, 1
        while start < self.n:
            yield list(range(start, min(start + size, self.n)))
            start, size = start + size, size + 1

    def __len__(self) -> int:
        return sum(1 for _ in self)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.parse_args()

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import accelerate
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    print(f"rank {accelerator.process_index}/{accelerator.num_processes}: torch {torch.__version__}, "
          f"accelerate {accelerate.__version__}", flush=True)
    if accelerator.num_processes != 1:
        print("runs as one process", flush=True)
        return 125

    dataset = TensorDataset(torch.arange(NUM_ELEMENTS))
    loader = accelerator.prepare(DataLoader(dataset, batch_sampler=VariableBatches(NUM_ELEMENTS)))
    sizes, served = [], []
    for (batch,) in loader:
        sizes.append(len(batch))
        served.extend(int(i) for i in batch.tolist())
    print(f"batch sizes {sizes}", flush=True)
    if sorted(served) != list(range(NUM_ELEMENTS)):
        raise AssertionError(f"served {sorted(served)}, not each of the {NUM_ELEMENTS} samples once")
    print("ok", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
