"""Accelerate: ``gather_object`` of a list of tensors whose length differs across ranks deadlocks
(find-fix, a hang).

Source: https://github.com/huggingface/accelerate/pull/1391  "Fix gather_obj" (merged 2023-05-05,
        e965d590).  From ``gather_object``'s first version (PR #238, 0.6.0) until 0.18.0,
        ``_gpu_gather_object`` (also ``_cpu_gather_object``) was
        ``recursively_apply(_gpu_gather_object_one, object)``: one ``all_gather_object`` per
        *tensor* inside the object, instead of one for the whole object.  When the ranks hold
        different numbers of tensors -- a list of per-sample predictions, the ragged last batch
        of an evaluation, which is what gather_object is for -- rank 0 calls all_gather_object
        more often than the others, and the job deadlocks.  #1391 gathers the object once
        (``all_gather_object(output_objects, object)`` and flattens the per-rank lists).

Truth (kind: hang, --find-fix): last hanging release 0.18.0, first fixed 0.19.0, commit
  e965d590cda39208fa2ba4ee5b3e84439011baaf (#1391).
How established: ``git tag --contains e965d590`` -> v0.19.0 first (the 3rd of the 59
  first-parent commits v0.18.0..v0.19.0); ``git show v0.18.0:src/accelerate/utils/operations.py``
  and v0.16.0's have the recursively_apply form (``_cpu_gather_object = _gpu_gather_object``),
  v0.19.0 the single all_gather_object; ``git log -S _gpu_gather_object_one`` gives only #340 (the move of #238's code
  into utils/operations.py, 0.7.0) and #1391; and the script by hand (torch 2.13, gloo): see docs/results/zoo-round3-cpu.md.
Wrong answer tempting: a list of strings or ints (no tensors) passes through the old form
  without any collective and comes back ungathered -- a wrong result, not a hang; with
  --regress-on hang those releases would not be the hang's boundary if the script gathered such
  a list, so the script gathers tensors.

Environment: CPU only, 2 ranks (torchrun, gloo), < 1 GB; a pass takes a few seconds, a hang is
found after the collective timeout (the case sets 30 s).  accelerate < 0.21 needs setuptools < 82
(pkg_resources) and ACCELERATE_DISABLE_RICH=1 (the matrix sets both).

Check: rank r holds 3 - r one-element tensors and gathers them with gather_object; every rank
must get all 2*3 - 1 = 5, in rank order.  Exit 0 if so; a hang in the bad releases (rank 0 in its
third all_gather_object, rank 1 already in the next collective).
"""

from __future__ import annotations

import argparse
import datetime
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
    from accelerate.utils import gather_object

    accelerator = Accelerator(cpu=True)
    rank, world = accelerator.process_index, accelerator.num_processes
    print(f"rank {rank}/{world}: torch {torch.__version__}, accelerate {accelerate.__version__}, "
          f"{accelerator.distributed_type}", flush=True)
    if world < 2:
        print("needs at least 2 ranks", flush=True)
        return 125

    mine = [torch.tensor([10 * rank + i]) for i in range(3 - rank)]  # a ragged last batch
    got = gather_object(mine)
    want = [10 * r + i for r in range(world) for i in range(3 - r)]
    values = [int(t.item()) if torch.is_tensor(t) else t for t in got]
    print(f"rank {rank}: gathered {values}", flush=True)

    total = torch.ones(1)
    dist.all_reduce(total)
    dist.barrier()
    dist.destroy_process_group()
    if values != want:
        print(f"GatherObjectError: rank {rank} gathered {values}, expected {want}", flush=True)
        return 1
    print(f"rank {rank}: ok", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    # Leave without interpreter teardown once the verdict is printed (see
    # accelerate_main_process_first.py: rare SIGABRTs at exit of gloo jobs on torch 2.13).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
