"""Accelerate: ``logger.info(msg, in_order=True)`` deadlocks on several ranks (find-fix, a hang).

Source: https://github.com/huggingface/accelerate/pull/3280  "Fix logging logic when in_order is
        set to True" (merged 2026-03-02, 23f2ab39).  ``in_order`` came with PR #1262 (0.20.0):
        ``MultiProcessAdapter.log`` reads ``if self._should_log(main_process_only): log
        elif in_order: for i in range(num_processes): ...; wait_for_everyone()``.  With the default
        ``main_process_only=True``, rank 0 takes the first branch and logs without any barrier,
        while every other rank takes the second and waits in ``num_processes`` barriers: the ranks
        fall out of step, and the job deadlocks at the next collective rank 0 does not repeat.
        The fix checks ``in_order`` first, so every rank runs the same barriers.

Truth (kind: hang, --find-fix): last hanging release 1.12.0, first fixed 1.13.0, commit
  23f2ab396713bc915f726c1af4a066e1654f854c (#3280).  Every release from 0.20.0 to 1.12.0 has the
  if/elif form.
How established: ``git tag --contains 23f2ab39`` -> v1.13.0 first; ``git log -S in_order --
  src/accelerate/logging.py`` gives only #1262 (86720fdb, v0.20.0) and #3280; ``git show
  v1.12.0:src/accelerate/logging.py`` has the if/elif form, v1.13.0 ``if not in_order and
  self._should_log(...)``; and the script: 1.12.0 hangs, 1.13.0 passes (torch 2.13, gloo).

Environment: CPU only, 2 ranks (torchrun, gloo), < 1 GB; a pass takes a few seconds, a hang is
found after the collective timeout (the case sets 30 s).

Check: one ``logger.info(..., in_order=True)`` (main_process_only left at its default), then an
all_reduce of a tensor of ones: every rank must reach it with the same barrier count and see
``world``.  Exit 0 if so; a hang (rank 0 in all_reduce, the others in the in-order barriers) in
the bad releases.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.parse_args()

    import torch
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    dist.init_process_group("gloo", timeout=timeout)  # accelerate reuses an initialised group

    import accelerate
    from accelerate import Accelerator
    from accelerate.logging import get_logger

    accelerator = Accelerator(cpu=True)
    rank, world = accelerator.process_index, accelerator.num_processes
    print(f"rank {rank}/{world}: torch {torch.__version__}, accelerate {accelerate.__version__}", flush=True)
    if world < 2:
        print("needs at least 2 ranks", flush=True)
        return 125

    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    logger = get_logger("dsbisect.zoo")
    logger.info(f"rank {rank}: logged in order", in_order=True)
    sys.stdout.flush()

    # A collective rank 0 reaches at once: in the bad releases the other ranks are still in the
    # in-order barriers (a barrier on gloo is an all_reduce of its own), so nothing matches.
    total = torch.ones(1)
    dist.all_reduce(total)
    if total.item() != world:
        raise AssertionError(f"all_reduce gave {total.item()}, expected {world}")
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: ok", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    # Leave without interpreter teardown once the verdict is printed (see
    # accelerate_main_process_first.py: rare SIGABRTs at exit of gloo jobs on torch 2.13).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
