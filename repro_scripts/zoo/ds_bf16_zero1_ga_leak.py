"""bf16 + ZeRO-1 with fp32 gradient accumulation: the last micro-batch's gradient misses the
cross-rank average, so each rank steps with a different gradient.

Issue / PR:
    https://github.com/deepspeedai/DeepSpeed/pull/7985  ("Fix BF16_Optimizer last-microbatch grad
        leak under ZeRO-1"; "The bug is reproducible in DeepSpeed 0.18.6 through current master")
Truth (find-fix): last broken 0.18.9, first fixed 0.19.0, fix commit
    5999fb069b0c1ef52c0cfe4450f5c00472f5cad1 (#7985).
How established:
    PR #7985: DeepSpeedEngine._backward_epilogue calls allreduce_gradients() before
    optimizer.backward_epilogue(); for BF16_Optimizer (bf16 model + grad_accum_dtype fp32 +
    ZeRO stage 1, without immediate_grad_update) the boundary micro-batch is added to the fp32
    accumulator after the all-reduce, "so it is silently skipped from the average".  5999fb069
    (#7985) is first contained in tag v0.19.0 (first-parent range v0.18.9..v0.19.0).  Where the
    bug began is not documented (the PR tested from 0.18.6): not part of the truth.
Kind: fix (find the release that fixed it).
Environment: CPU (DS_ACCELERATOR=cpu, gloo) or CUDA, 2 ranks, < 1 GB RAM; deepspeed >= 0.14.1 on CPU.

One optimizer step of GAS micro-batches with torch SGD; the ranks get deliberately different
data.  Exit 0 when every rank's weights match one SGD step of a plain fp32 copy on the mean
loss of all samples (within 5 %).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import sys

LR = 0.5
MICRO = 4
GAS = 4


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.add_argument("--tolerance", type=float, default=0.05)
    args = ap.parse_args()

    import torch

    import deepspeed

    timeout = datetime.timedelta(seconds=float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    deepspeed.init_distributed(dist_backend="gloo", timeout=timeout)
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    print(f"rank {rank}/{world}: torch {torch.__version__}, deepspeed {deepspeed.__version__}", flush=True)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    reference = copy.deepcopy(model)
    config = {
        "train_micro_batch_size_per_gpu": MICRO,
        "gradient_accumulation_steps": GAS,
        "bf16": {"enabled": True},
        "data_types": {"grad_accum_dtype": "fp32"},
        "zero_optimization": {"stage": 1},
        "zero_allow_untested_optimizer": True,  # torch SGD
        "gradient_clipping": 0.0,
        "steps_per_print": 1000,
    }
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR),
                                      config=config)
    print(f"rank {rank}: optimizer {type(engine.optimizer).__name__}", flush=True)

    # the whole global batch on every rank: rank r's micro-batch m is block (r, m); the last
    # micro-batches of the two ranks are made very different, which is where the bug shows
    gen = torch.Generator().manual_seed(1234)
    x_all = torch.randn(world, GAS, MICRO, 16, generator=gen)
    x_all[:, -1] *= torch.arange(1, world + 1, dtype=torch.float32).view(world, 1, 1) * 2.0
    y_all = torch.tanh(x_all[..., :1])

    # reference: fp32 copy with the bf16-rounded starting weights, mean loss over all samples
    with torch.no_grad():
        for p, q in zip(reference.parameters(), engine.module.parameters()):
            p.copy_(q.detach().float())
    w0 = [p.detach().clone() for p in reference.parameters()]
    torch.nn.functional.mse_loss(reference(x_all.reshape(-1, 16)), y_all.reshape(-1, 1)).backward()
    want = torch.cat([(-LR * p.grad).flatten() for p in reference.parameters()])

    for m in range(GAS):
        out = engine(x_all[rank, m].to(torch.bfloat16))
        loss = torch.nn.functional.mse_loss(out.float(), y_all[rank, m])
        engine.backward(loss)
        engine.step()

    got = torch.cat([(p.detach().float() - w).flatten() for p, w in zip(engine.module.parameters(), w0)])
    rel = ((got - want).norm() / want.norm()).item()
    print(f"rank {rank}: update {(got.norm() / want.norm()).item():.4f} of the reference, "
          f"relative error {rel:.4f}", flush=True)
    ok = torch.tensor([1.0 if rel < args.tolerance else 0.0])
    torch.distributed.all_reduce(ok, op=torch.distributed.ReduceOp.MIN)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    if ok.item() != 1.0:
        if rel >= args.tolerance:
            print(f"GradientMismatchError: rank {rank}: bf16 ZeRO-1 step off the reference by {rel:.4f} "
                  f"(>= {args.tolerance})", flush=True)
        return 1
    print(f"rank {rank}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
