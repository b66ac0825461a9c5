"""bf16 with ZeRO stage 0: the optimizer step divides the gradients by an unapplied loss scale.

Issue / PR:
    https://github.com/deepspeedai/DeepSpeed/issues/7837  ("Gradient norm abnormally increases when
        training with ZeRO-0")
    https://github.com/deepspeedai/DeepSpeed/pull/7839   (the fix)
Truth (find-fix): last broken 0.18.5, first fixed 0.18.6, fix commit
    1752c2ab64e789341af6a15bb4af8466edad7c22 (#7839).
How established:
    PR #7839 ("Fixes: #7837"): "FP16_UnfusedOptimizer applies dynamic_loss_scale with
    cur_scale=65536 but engine.backward() never scales the loss, so step() divides gradients by
    65536", and "_take_model_step skips zero_grad for bf16 without ZeRO".  In the DeepSpeed
    history 1752c2ab6 (#7839) is first contained in tag v0.18.6 (first-parent range
    v0.18.5..v0.18.6).  Where the bug began is not documented: PR #8029 says #7515 (v0.17.6)
    routed bf16 + ZeRO-0 to the FP16 optimizers, but here 0.17.6 and 0.18.2 pass and 0.18.3
    fails (0.18.3 brought the new engine.backward of #7665, which scales the loss only for ZeRO
    optimizers) -- an observation, not part of the truth.
Kind: fix (find the release that fixed it).
Environment: CPU (DS_ACCELERATOR=cpu, gloo) or CUDA, 2 ranks, < 1 GB RAM; deepspeed >= 0.14.1 on CPU.

Two matrix cases run this script:
  ds_bf16_zero0_grad_scale            the bug alone.
  ds_bf16_zero0_grad_scale_side_zero2 (--side-engine) first trains a second, ZeRO-2 engine for one
      step, as an RLHF-style script with a ZeRO-2 reward model would.  On the CPU accelerator
      0.18.7 - 0.18.9 fail that step for an unrelated reason (PR #7828's in-place error, fixed in
      0.19.0: case ds_zero2_cpu_flatten_inplace).  A find-fix search 0.18.5 -> 0.19.0 that takes
      every failure for "still broken" is steered to 0.19.0; --signature GradScaleError makes
      those releases untestable and leaves 0.18.6.  The wrong answer is tempting.

One SGD step of a small MLP in bf16 under ZeRO stage 0, checked against the update computed
here in fp32 from the same weights and the same global batch: exit 0 when the weight update
DeepSpeed applied is within 25 % of the reference (the broken releases apply ~1/65536 of it).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

LR = 0.5
BATCH = 8  # per rank


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.add_argument("--tolerance", type=float, default=0.25)
    ap.add_argument("--side-engine", action="store_true", help="first train a ZeRO-2 engine for one step")
    args = ap.parse_args()

    import torch

    import deepspeed

    timeout = datetime.timedelta(seconds=float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    deepspeed.init_distributed(dist_backend="gloo", timeout=timeout)
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    print(f"rank {rank}/{world}: torch {torch.__version__}, deepspeed {deepspeed.__version__}", flush=True)

    if args.side_engine:
        # a second model trained with ZeRO-2 in the same job (a reward model, say)
        torch.manual_seed(1)
        side = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        side_config = {
            "train_micro_batch_size_per_gpu": BATCH,
            "optimizer": {"type": "Adam", "params": {"lr": 0.01, "torch_adam": True}},
            "zero_optimization": {"stage": 2},
            "steps_per_print": 1000,
        }
        side_engine, *_ = deepspeed.initialize(model=side, model_parameters=side.parameters(), config=side_config)
        xs = torch.randn(BATCH, 32, generator=torch.Generator().manual_seed(7 + rank))
        side_engine.backward(side_engine(xs).pow(2).mean())
        side_engine.step()  # 0.18.7 - 0.18.9 fail here on the CPU accelerator (#7828)
        print(f"rank {rank}: side ZeRO-2 engine trained one step", flush=True)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    config = {
        "train_micro_batch_size_per_gpu": BATCH,
        "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 0},
        "steps_per_print": 1000,
    }
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)

    # every rank builds the whole global batch, then trains on its own slice of it
    gen = torch.Generator().manual_seed(1234)
    x_all = torch.randn(world * BATCH, 32, generator=gen)
    y_all = torch.tanh(x_all[:, :1] * 2.0)

    # reference: the same (bf16-rounded) starting weights, fp32 arithmetic, the mean loss over the
    # global batch (= the average of the ranks' gradients that data parallelism computes)
    w0 = [p.detach().float().clone() for p in engine.module.parameters()]
    ref = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    with torch.no_grad():
        for p, w in zip(ref.parameters(), w0):
            p.copy_(w)
    torch.nn.functional.mse_loss(ref(x_all), y_all).backward()
    expected = [w - LR * p.grad for p, w in zip(ref.parameters(), w0)]

    x = x_all[rank * BATCH:(rank + 1) * BATCH].to(torch.bfloat16)
    y = y_all[rank * BATCH:(rank + 1) * BATCH].to(torch.bfloat16)
    loss = torch.nn.functional.mse_loss(engine(x).float(), y.float())
    engine.backward(loss)
    engine.step()

    w1 = [p.detach().float() for p in engine.module.parameters()]
    got = torch.cat([(a - b).flatten() for a, b in zip(w1, w0)])
    want = torch.cat([(a - b).flatten() for a, b in zip(expected, w0)])
    rel = ((got - want).norm() / want.norm()).item()
    ratio = (got.norm() / want.norm()).item()
    print(f"rank {rank}: update norm {got.norm().item():.3e}, expected {want.norm().item():.3e} "
          f"(ratio {ratio:.3e}), relative error {rel:.3f}", flush=True)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    if not rel < args.tolerance:
        # an exception-style line, so that the run's failure reason (and --signature) can name it
        print(f"GradScaleError: rank {rank}: bf16 ZeRO-0 update wrong: applied {ratio:.3e} of the expected "
              f"step (relative error {rel:.3f} >= {args.tolerance})", flush=True)
        return 1
    print(f"rank {rank}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
