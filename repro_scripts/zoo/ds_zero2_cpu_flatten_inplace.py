"""ZeRO-2 on the CPU accelerator: the first optimizer step fails with an autograd in-place error.

Issue / PR:
    https://github.com/deepspeedai/DeepSpeed/pull/7948  (the fix; it names the cause)
    https://github.com/deepspeedai/DeepSpeed/pull/7828  (the cause: "Z1/2 init: flatten params on device")
Truth:
    last good 0.18.6, first bad 0.18.7, first bad commit 84af82212c01620d6ba8123dc95c57ed91a4aaa5
    (#7828); fixed again in 0.19.0 by 37e232faf9c810e0f84b467b9c70fed82b792d0a (#7948).
How established:
    PR #7948 says the on-device flatten path introduced in #7828 passes parameters that require
    grad to torch.cat, so the flat buffer has a CatBackward0 grad_fn; the views that
    _unflatten_dense_tensors hands back to the model then refuse the in-place copy_ of the
    optimizer step ("Output 0 of SplitBackward0 is a view and is being modified inplace"), and
    that CPU training always takes that path (the CPU accelerator reports itself available with
    system RAM as its memory).  In the DeepSpeed history, 84af82212 (#7828) is first contained in
    tag v0.18.7 and 37e232faf (#7948) first in v0.19.0; v0.18.6 is an ancestor of v0.18.7
    (first-parent range v0.18.6..v0.18.7).  Checked by building 84af82212 and its first parent
    b74df164f outside dsbisect: the parent passes, 84af82212 fails.
Kind: fail (regression), commit level.
Environment: CPU only (DS_ACCELERATOR=cpu, gloo), 2 ranks, < 1 GB RAM; deepspeed >= 0.14.1.
    PR #7948: "This especially affects CPU training"; the case is not meant for CUDA.

A few ZeRO-2 steps of a tiny MLP; exit 0 when every rank finishes with the same weights.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.add_argument("--stage", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()

    import torch

    import deepspeed

    timeout = datetime.timedelta(seconds=float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    deepspeed.init_distributed(dist_backend="gloo", timeout=timeout)
    rank = torch.distributed.get_rank()
    print(f"rank {rank}: torch {torch.__version__}, deepspeed {deepspeed.__version__}", flush=True)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "Adam", "params": {"lr": 0.01, "torch_adam": True}},
        "zero_optimization": {"stage": args.stage},
        "steps_per_print": 1000,
    }
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)

    gen = torch.Generator().manual_seed(1234 + rank)
    x = torch.randn(4 * args.steps, 16, generator=gen)
    y = x.sum(dim=1, keepdim=True)
    for step in range(args.steps):
        loss = torch.nn.functional.mse_loss(engine(x[4 * step:4 * step + 4]), y[4 * step:4 * step + 4])
        engine.backward(loss)
        engine.step()  # the bad releases fail here, in the all-gather of the updated partitions
        print(f"rank {rank}: step {step} loss {loss.item():.4f}", flush=True)

    flat = torch.cat([p.detach().float().flatten() for p in engine.module.parameters()])
    reference = flat.clone()
    torch.distributed.broadcast(reference, src=0)
    same = torch.equal(flat, reference)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    if not same:
        print(f"ReproError: rank {rank}: weights differ from rank 0 after training", flush=True)
        return 1
    print(f"rank {rank}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
