"""deepspeed.init_distributed binds the NCCL world group to a device: a group that only some ranks
create (use_local_synchronization=True) now needs every rank, and the job deadlocks.

Issue / PR:
    https://github.com/allenai/open-instruct/pull/1311  (the report: training "hangs after one
        training step at the weight sync stage when using DeepSpeed versions >= 0.17.3"; root
        cause "DeepSpeed 0.17.3 introduced a change (PR #7266) that sets device_id in
        torch.distributed.init_process_group()", with several process groups in play)
    https://github.com/deepspeedai/DeepSpeed/pull/7266  (the cause, "set device_id in torch's
        init_process_group"; its own description: "discovered torch.dist deadlocks with
        torch>=2.7.0 when using device_id arg")
Truth: last good 0.17.2, first bad 0.17.3, commit ee286e53c8c394680a94ad6e469f037515ef6098 (#7266).
    Not fixed for CUDA as of 0.19.5: #7542 (0.17.6) stopped passing device_id only for the other
    accelerators.
How established: the open-instruct PR names 0.17.3 and #7266; in the DeepSpeed history
    ee286e53c (#7266) is first contained in tag v0.17.3 (first-parent range v0.17.2..v0.17.3).
Mechanism (why this script hangs where 0.17.2 passes): with device_id, torch initialises the
    world communicator eagerly and creates every later NCCL group by ncclCommSplit of it, which
    is collective over *all* world ranks -- even for new_group(..., use_local_synchronization=True),
    whose documented contract is that only the members call it.  Rank 0 creates a group of its
    own and blocks in the split; rank 1 goes on to an all_reduce on the world group and waits
    for rank 0 until the NCCL watchdog fires.  Without device_id (<= 0.17.2) the new group is
    created lazily among its members only and the job passes.
Kind: hang (regression), commit level.
Environment: 2 CUDA GPUs (NCCL), no model, < 1 GB GPU memory, ~20 s per run plus the collective
    timeout when it hangs; deepspeed >= 0.14.4 (no compat shims) on torch >= 2.7.1 (DeepSpeed does
    not pass device_id on 2.6 < torch < 2.7.1).  Written without a GPU to try it on: not run here.

Exit 0 when the world all_reduce after the one-rank group completes with the right value.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    args = ap.parse_args()

    import torch

    import deepspeed

    if not torch.cuda.is_available():
        print("needs CUDA GPUs (NCCL): cannot test here", flush=True)
        return 125
    local_rank = int(os.environ.get("LOCAL_RANK", args.local_rank))
    torch.cuda.set_device(local_rank)
    timeout = datetime.timedelta(seconds=float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    deepspeed.init_distributed(dist_backend="nccl", timeout=timeout)
    dist = torch.distributed
    rank, world = dist.get_rank(), dist.get_world_size()
    bound = getattr(dist.distributed_c10d._get_default_group(), "bound_device_id", None)
    print(f"rank {rank}/{world}: torch {torch.__version__}, deepspeed {deepspeed.__version__}, "
          f"world group bound to {bound}", flush=True)

    # warm the world communicator up the same way on every rank
    t = torch.ones(1, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()

    if rank == 0:
        # a group of one's own (e.g. the side channel that ships weights to an inference server)
        mine = dist.new_group(ranks=[0], use_local_synchronization=True)
        u = torch.ones(1, device="cuda")
        dist.all_reduce(u, group=mine)
        torch.cuda.synchronize()
        print(f"rank {rank}: own group ready", flush=True)

    t = torch.full((1,), float(rank + 1), device="cuda")
    dist.all_reduce(t)  # rank 1 waits here for rank 0, which (>= 0.17.3) is stuck in the split above
    torch.cuda.synchronize()
    want = world * (world + 1) / 2
    dist.barrier()
    dist.destroy_process_group()
    if t.item() != want:
        print(f"ReproError: rank {rank}: all_reduce gave {t.item()}, want {want}", flush=True)
        return 1
    print(f"rank {rank}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
