"""CPU smoke case: a few ZeRO-2 training steps of a tiny MLP, then a checked all-reduce.

Runs anywhere a recent DeepSpeed runs on the CPU (``DS_ACCELERATOR=cpu``, gloo), so the
bundled matrix does something real on a machine without GPUs.  It checks its own result:
the loss must go down and every rank must hold the same weights afterwards, else it exits
non-zero (a silent wrong answer is a FAIL, not a PASS).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--stage", type=int, default=2)
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    args = ap.parse_args()

    import torch

    import deepspeed

    timeout = datetime.timedelta(seconds=float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    deepspeed.init_distributed(dist_backend="gloo", timeout=timeout)
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    print(f"rank {rank}/{world}: torch {torch.__version__}, deepspeed {deepspeed.__version__}", flush=True)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "Adam", "params": {"lr": 0.05, "torch_adam": True}},
        "zero_optimization": {"stage": args.stage},
        "steps_per_print": 1000,
    }
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)

    gen = torch.Generator().manual_seed(1234 + rank)
    x = torch.randn(64, 16, generator=gen)
    y = x.sum(dim=1, keepdim=True)
    losses = []
    for step in range(args.steps):
        i = (step * 4) % 64
        loss = torch.nn.functional.mse_loss(engine(x[i : i + 4]), y[i : i + 4])
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    print(f"rank {rank}: losses {losses[0]:.3f} -> {losses[-1]:.3f}", flush=True)

    flat = torch.cat([p.detach().float().flatten() for p in engine.module.parameters()])
    reference = flat.clone()
    torch.distributed.broadcast(reference, src=0)
    same = torch.equal(flat, reference)
    mean_first = torch.tensor([losses[0]])
    torch.distributed.all_reduce(mean_first)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()  # no communicator threads left at interpreter exit
    if not same:
        print(f"rank {rank}: weights differ from rank 0 after training", flush=True)
        return 1
    if not losses[-1] < losses[0]:
        print(f"rank {rank}: the loss did not go down", flush=True)
        return 1
    print(f"rank {rank}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
