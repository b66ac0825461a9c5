"""ZeRO-1 checks gradient overflow on each rank's own partition only: one rank skips the step,
the other runs it, and the job deadlocks.

Issue / PR:
    https://github.com/deepspeedai/DeepSpeed/issues/7568  ("Training hangs with scheduler + fp16 +
        zero_optimization enabled": rank 0 waits in scaled_global_norm's all-reduce)
    https://github.com/deepspeedai/DeepSpeed/pull/6976   (the cause: "Improve overflow handling in
        ZeRO", e440506be)
    https://github.com/deepspeedai/DeepSpeed/pull/7580   (the fix: "Broadcast fp16 overflow in Z1",
        bc9ed477e, "Fix #7568")
Truth (regression): last good 0.17.0, first bad 0.17.1, first bad commit
    e440506bee5f523691693a7fad6251202ec3dbcb (#6976).  Find-fix: last broken 0.17.6, first fixed
    0.18.0, fix commit bc9ed477e9c23f167761c1a122c76616e6b0ab70 (#7580).
How established:
    DeepSpeedZeroOptimizer.has_overflow in v0.17.0 computes the overflow flag inside
    `if partition_gradients:` (ZeRO-2) and, for ZeRO-1, from every parameter's full gradient;
    and v0.17.0's step() checks it for fp16 only.  #6976 (e440506be, the 6th of the 15
    first-parent commits v0.17.0..v0.17.1; `git tag --contains` gives v0.17.1 first) computes the
    flag from the rank's own gradient partition for both stages but leaves the cross-rank
    all-reduce inside `if partition_gradients:`, and adds bf16.check_grad_overflow (step() checks
    overflow when it is set).  An inf/NaN gradient then lies in one rank's partition: that rank
    skips the step, the other enters scaled_global_norm's all-reduce, and the next collectives no
    longer pair.  #7580 (bc9ed477e, first in v0.18.0) all-reduces the flag for ZeRO-1 too.
    `git show v0.17.6:deepspeed/runtime/zero/stage_1_and_2.py` still has the guarded all-reduce.
Kind: hang on NCCL (a collective one rank never enters); on CPU/gloo a failure: gloo sees the
    mismatched collectives and rank 0 aborts ('Is there a distributed collective mismatch in your
    code?').  The CPU case is bisected with --regress-on fail.
Wrong answer tempting: 0.17.0 and older pass only because they never look at the overflow with
    bf16 (the gradient is inf there too and the step is taken on both ranks); a check that the
    weights stay finite would call them bad as well and move the boundary to the oldest release.
Environment: CPU (DS_ACCELERATOR=cpu, gloo), 2 ranks under the deepspeed launcher, < 1 GB RAM;
    deepspeed >= 0.17.0 here (the bisection's range: on torch 2.13 a new venv's first run
    JIT-compiles the shm op, up to 8 min on a loaded 2-core machine; 0.16.9's first run ran into a
    600 s limit there).  The hang shows as gloo's collective timeout (DSBISECT_COLLECTIVE_TIMEOUT).
    Hand runs: docs/results/zoo-round3-cpu.md.

bf16 + ZeRO-1 (grad_accum_dtype bf16, so the ZeRO-1 optimizer, not BF16_Optimizer) with
bf16.check_grad_overflow; the last parameter's gradient is made inf on every rank, so only the
rank that owns the end of the flat buffer sees it.  Three steps; exit 0 when every rank gets
through them and agrees on how many were skipped.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

STEPS = 3


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.parse_args()

    import torch

    import deepspeed

    timeout = datetime.timedelta(seconds=float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    deepspeed.init_distributed(dist_backend="gloo", timeout=timeout)
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    print(f"rank {rank}/{world}: torch {torch.__version__}, deepspeed {deepspeed.__version__}", flush=True)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True, "check_grad_overflow": True},
        "data_types": {"grad_accum_dtype": "bf16"},
        "zero_optimization": {"stage": 1},
        "zero_allow_untested_optimizer": True,  # torch SGD
        "steps_per_print": 1000,
    }
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                      config=config)
    print(f"rank {rank}: optimizer {type(engine.optimizer).__name__}", flush=True)
    last = list(engine.module.parameters())[-1]
    inf = torch.tensor(float("inf"))

    skipped = 0
    gen = torch.Generator().manual_seed(rank)
    for step in range(STEPS):
        x = torch.randn(4, 16, generator=gen).to(torch.bfloat16)
        loss = engine(x).float().pow(2).mean() + (last.float().sum() * inf if step == 0 else 0.0)
        engine.backward(loss)
        engine.step()
        skipped += int(bool(getattr(engine.optimizer, "overflow", False)))
        print(f"rank {rank}: step {step} done (overflow {getattr(engine.optimizer, 'overflow', None)})",
              flush=True)

    counts = [torch.zeros(1) for _ in range(world)]
    torch.distributed.all_gather(counts, torch.tensor([float(skipped)]))
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    agreed = len({c.item() for c in counts}) == 1
    if not agreed:
        print(f"OverflowDesyncError: the ranks skipped different numbers of steps: "
              f"{[int(c.item()) for c in counts]}", flush=True)
        return 1
    print(f"rank {rank}: ok ({skipped} of {STEPS} steps skipped on every rank)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
