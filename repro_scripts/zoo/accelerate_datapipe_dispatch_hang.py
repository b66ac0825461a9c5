"""Accelerate: ``DataLoaderDispatcher`` over an ``IterDataPipe`` hangs on several ranks (find-fix).

Source: https://github.com/huggingface/accelerate/pull/1709  "Fix the bug where DataLoaderDispatcher
        gets stuck in an infinite wait when the dataset is an IterDataPipe during multi-process
        training" (the PR carries the report and its reproduction).
Cause:  since torch 1.13/2.0, ``DataLoader.__iter__`` over an ``IterDataPipe`` shares a random seed
        across ranks (``dist.new_group(backend="gloo")`` + ``dist.broadcast``), a collective.
        accelerate's ``DataLoaderDispatcher`` (the default for iterable datasets) built that
        iterator on rank 0 only, while the other ranks wait in ``broadcast_object_list`` for
        rank 0's first batch: rank 0 waits in the seed sharing, the others in the batch
        broadcast -> deadlock.  The fix creates the iterator on every rank.

Truth (kind: hang, --find-fix): last bad 0.20.3, first fixed 0.21.0, commit
  518c206a2a6485658c9aa0caca0e15f1bc6ba168 (#1709).  Every accelerate release before 0.21.0 hangs
  here on a current torch (the bug is the meeting of accelerate's rank-0-only iterator with the
  torch change), so this is a find-fix case; 0.20.3 is the last 0.20 release.
How established: ``git tag --contains 518c206a`` -> v0.21.0 first; ``git show
  v0.20.3:src/accelerate/data_loader.py`` creates ``main_iterator = super().__iter__()`` under
  ``if self.state.process_index == 0``, v0.21.0 on every rank; and the script: 0.20.3 hangs,
  0.21.0 passes (torch 2.13, gloo).  The commit is on v0.21.0's first-parent history
  (v0.20.3 is on a release branch: dsbisect starts the commit search from the merge base).

Environment: CPU only, 2 ranks (torchrun, gloo), < 1 GB; a pass takes ~10 s, a hang is found
after the collective timeout (the case sets 30 s).  accelerate < 0.21 imports ``pkg_resources``:
the case pins ``setuptools<82``.

Check: 32 numbers from ``IterableWrapper(range(32))`` through ``accelerator.prepare(DataLoader(...,
batch_size=4))`` (a DataLoaderDispatcher); the ranks together must see each number once.  Exit 0
if so; 125 if accelerate did not choose the dispatcher; a hang in the bad releases.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import warnings


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.add_argument("--n", type=int, default=32)
    args = ap.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)  # torchdata deprecation notices

    import torch
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    dist.init_process_group("gloo", timeout=timeout)  # accelerate reuses an initialised group

    import accelerate
    from accelerate import Accelerator
    from torch.utils.data import DataLoader
    from torch.utils.data.datapipes.iter import IterableWrapper

    accelerator = Accelerator(cpu=True)
    rank, world = accelerator.process_index, accelerator.num_processes
    print(f"rank {rank}/{world}: torch {torch.__version__}, accelerate {accelerate.__version__}", flush=True)
    if world < 2:
        return 125

    loader = accelerator.prepare(DataLoader(IterableWrapper(list(range(args.n))), batch_size=4))
    kind = type(loader).__name__
    print(f"rank {rank}: prepared a {kind}", flush=True)
    if kind != "DataLoaderDispatcher":
        print(f"rank {rank}: accelerate did not dispatch batches; nothing to test", flush=True)
        return 125

    seen: list[int] = []
    for batch in loader:  # 0.20.3 and older: rank 0 in the seed's new_group/broadcast, others in broadcast_object_list
        seen += [int(x) for x in batch]
    print(f"rank {rank}: saw {len(seen)} samples", flush=True)

    everything: list = [None] * world
    dist.all_gather_object(everything, seen)
    dist.barrier()
    dist.destroy_process_group()
    got = sorted(x for part in everything for x in part)
    if got != list(range(args.n)):
        raise AssertionError(f"the ranks together saw {got}, not 0..{args.n - 1} once each")
    print(f"rank {rank}: ok", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    # Leave without interpreter teardown once the verdict is printed: with torch 2.13 on CPU, 3 of
    # 70 passing runs of accelerate 0.19.0's 2-rank gloo repro aborted at exit ("terminate called
    # without an active exception", SIGABRT) after a clean destroy_process_group, with and without
    # dsbisect's environment -- a flaky failure that is no part of the regression under test.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
