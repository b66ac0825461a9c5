"""Accelerate: iterating a prepared DataLoader that has no batches crashes (find-fix).

Source: https://github.com/huggingface/accelerate/pull/3659  "accelerate/data_loader.py: do not
        yield if the base_dataloader is empty" (the PR carries the report and its traceback:
        ``UnboundLocalError: local variable 'current_batch' referenced before assignment`` in
        ``DataLoaderShard.__iter__``, from an rl-swarm job).
Cause:  ``DataLoaderShard.__iter__`` reads one batch ahead: ``try: current_batch =
        next(dataloader_iter) except StopIteration: yield`` -- on an empty loader that yields
        ``None`` once and then goes on to ``send_to_device(current_batch, ...)`` with
        ``current_batch`` never bound.  An empty shard is what a rank gets when the data runs out
        before it (a small eval set, ``even_batches=False``, a filtered dataset).  #3659 ends the
        iteration (``self.end(); return``) instead.

Truth (kind: fail, --find-fix): last broken release 1.8.1, first fixed 1.9.0, commit
  55e518a762b84f8927fe87599a545f9c917b7ce5 (#3659).  The read-ahead with ``yield`` in the
  ``except`` is old (already in 0.2x); every release before 1.9.0 has it.
How established: ``git tag --contains 55e518a7`` -> v1.9.0 first; ``git show
  v1.8.1:src/accelerate/data_loader.py`` has ``except StopIteration: yield``, v1.9.0 ``self.end();
  return``; and the releases either side run by hand.

Environment: CPU only, 1 process, < 1 GB, a few seconds a run.

Check: ``accelerator.prepare(DataLoader(empty dataset, batch_size=4))`` iterated once must give no
batch.  Exit 0 if so; the broken releases raise ``UnboundLocalError`` (or yield a ``None`` batch,
reported as an AssertionError).
"""

from __future__ import annotations

import argparse
import os
import sys


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

    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(0)), batch_size=4))
    batches = list(loader)
    if batches:
        raise AssertionError(f"an empty DataLoader gave {len(batches)} batch(es): {batches!r}")
    print("ok: no batches", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
