"""ZeRO-3 with a mixture-of-experts block set as a leaf module: when the ranks route to different
experts, the gradient reduce-scatter runs only where an expert was used, and the job hangs.

Issue / PR:
    https://github.com/deepspeedai/DeepSpeed/pull/5008  ("Delay reduce-scatter for ZeRO3 leaf
        modules": "Our data parallel processes may activate different sets of experts, but the
        hook is not fired unless the expert is activated at a forward pass. The reduce-scatter is
        called only on some processes in this case."; the thread has the user's "NCCL timeout")
    https://github.com/deepspeedai/DeepSpeed/pull/4966  (set_z3_leaf_modules, the API, first in 0.13.0)
Truth (find-fix): last broken 0.13.1, first fixed 0.13.2, fix commit
    19e0dc39ba9448d95aa49884e76f857f3357ef8e (#5008).
How established: 19e0dc39b (#5008) is first contained in tag v0.13.2, 96c5a873e (#4966) in
    v0.13.0, so 0.13.0 and 0.13.1 have leaf modules without the delayed reduce-scatter; releases
    before 0.13.0 have no set_z3_leaf_modules (exit 125).
Kind: hang, fixed (find the release that fixed it).
Environment: 2 CUDA GPUs (NCCL), a few MB of GPU memory, ~30 s per run plus the collective
    timeout when it hangs.  deepspeed 0.13.x on a current torch needs the compat shims
    torch-elastic-socket and numpy-bufsize (see the matrix entry); it reaches pydantic through
    pydantic.v1, which pydantic 2 ships (if that import fails, pin "pydantic<2").  Written without
    a GPU to try it on: not run here.  (DeepSpeed < 0.14.1 does not run on CPU ranks.)

Rank 0 routes every token to expert 0, rank 1 to expert 1, whose weights are 8 times larger, so
the two ranks' reduce-scatters differ in count as well as in order.  Exit 0 after three
training steps with equal weights on both ranks.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()

    import torch

    import deepspeed

    try:
        from deepspeed.utils import set_z3_leaf_modules
    except ImportError:
        print("this deepspeed has no set_z3_leaf_modules (< 0.13.0): cannot test", flush=True)
        return 125
    if not torch.cuda.is_available():
        print("needs CUDA GPUs (NCCL): cannot test here", flush=True)
        return 125

    local_rank = int(os.environ.get("LOCAL_RANK", args.local_rank))
    torch.cuda.set_device(local_rank)
    timeout = datetime.timedelta(seconds=float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    deepspeed.init_distributed(dist_backend="nccl", timeout=timeout)
    rank = torch.distributed.get_rank()
    print(f"rank {rank}: torch {torch.__version__}, deepspeed {deepspeed.__version__}", flush=True)

    class TwoExperts(torch.nn.Module):
        """A toy MoE block: the router is the rank (standing in for data-dependent routing)."""

        def __init__(self, dim: int) -> None:
            super().__init__()
            self.experts = torch.nn.ModuleList([
                torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.ReLU(), torch.nn.Linear(dim, dim)),
                torch.nn.Sequential(torch.nn.Linear(dim, 8 * dim), torch.nn.ReLU(), torch.nn.Linear(8 * dim, dim)),
            ])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.experts[torch.distributed.get_rank() % 2](x)

    class Net(torch.nn.Module):

        def __init__(self, dim: int = 64) -> None:
            super().__init__()
            self.inp = torch.nn.Linear(16, dim)
            self.moe = TwoExperts(dim)
            self.out = torch.nn.Linear(dim, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(self.moe(torch.relu(self.inp(x))))

    torch.manual_seed(0)
    model = Net()
    set_z3_leaf_modules(model, [TwoExperts])
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "Adam", "params": {"lr": 0.01, "torch_adam": True}},
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
        "steps_per_print": 1000,
    }
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)

    gen = torch.Generator().manual_seed(1234 + rank)
    for step in range(args.steps):
        x = torch.randn(4, 16, generator=gen).cuda()
        loss = engine(x).pow(2).mean()
        engine.backward(loss)  # 0.13.0 / 0.13.1: reduce-scatter of different experts on each rank
        engine.step()
        print(f"rank {rank}: step {step} loss {loss.item():.4f}", flush=True)

    with deepspeed.zero.GatheredParameters(list(engine.module.parameters())):
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
