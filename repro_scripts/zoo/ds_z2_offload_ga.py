"""ZeRO-2 + ZeRO-Offload with gradient accumulation accumulates the micro-batch gradients wrongly
(one GPU).

Issue / PR:
    https://github.com/deepspeedai/DeepSpeed/pull/6550  ("Fix gradient accumulation for
        Z2+offload": "The ZeRO 1/2 optimizer performs incorrect gradient accumulation in the path
        for ZeRO2 + Offloading": micro_step_id starts at 0 but is reset to -1 after a step, and
        gradients are copied to the CPU buffer at steps that are not the accumulation boundary)
Truth (find-fix): last broken 0.15.1, first fixed 0.15.2, fix commit
    c85c8703bc49eefb78d8d64b5f0027f7b8acf9ff (#6550).
How established:
    `git tag --contains c85c8703b` on the DeepSpeed history: first in v0.15.2;
    deepspeed/runtime/zero/stage_1_and_2.py has INITIAL_MICRO_STEP_ID (the fix) from v0.15.2 on
    and not in v0.14.5 .. v0.15.1; v0.15.1 is an ancestor of v0.15.2.  Where the bug began is not
    part of the truth (the copy-at-non-boundary code is older than the range).
Kind: fix (find the release that fixed it).
Environment: one CUDA GPU (the offload path moves gradients between the GPU and pinned CPU
    buffers), 1 rank under the deepspeed launcher.  Without CUDA the script exits 125.

Two optimizer steps of a small fp32 MLP under ZeRO-2 with the optimizer offloaded to the CPU (a
torch SGD, zero_force_ds_cpu_optimizer false and
zero_allow_untested_optimizer true: no JIT-built op), 4 micro-batches each, checked
against the same two steps computed here with plain torch (mean of the micro-batch gradients).
Exit 0 when both updates DeepSpeed applied are within 5 % of the reference.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

LR, GAS, MICRO = 0.1, 4, 8


def flat(params):
    import torch

    return torch.cat([p.detach().float().reshape(-1) for p in params])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)
    ap.add_argument("--tolerance", type=float, default=0.05)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU: untestable here", file=sys.stderr)
        return 125
    import deepspeed

    deepspeed.init_distributed(dist_backend="nccl")
    torch.cuda.set_device(args.local_rank)
    print(f"torch {torch.__version__}, deepspeed {deepspeed.__version__}, {torch.cuda.get_device_name()}, "
          f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.Tanh(), torch.nn.Linear(128, 16)).cuda()
    ref = copy.deepcopy(model)
    batches = [torch.randn(MICRO, 32, device="cuda") for _ in range(2 * GAS)]
    config = {
        "train_micro_batch_size_per_gpu": MICRO,
        "gradient_accumulation_steps": GAS,
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}},
        "zero_force_ds_cpu_optimizer": False,
        "zero_allow_untested_optimizer": True,  # a torch optimizer under ZeRO: else an AssertionError
        "steps_per_print": 1000,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR),
                                           config=config)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=LR)
    worst = 0.0
    for step in range(2):
        w0, r0 = flat(engine.module.parameters()), flat(ref.parameters())
        for x in batches[step * GAS:(step + 1) * GAS]:
            loss = (engine(x) ** 2).mean()
            engine.backward(loss)
            engine.step()  # a real optimizer step only at the accumulation boundary
            ((ref(x) ** 2).mean() / GAS).backward()
        ref_opt.step()
        ref_opt.zero_grad()
        got, want = flat(engine.module.parameters()) - w0, flat(ref.parameters()) - r0
        err = ((got - want).norm() / want.norm()).item()
        worst = max(worst, err)
        print(f"step {step + 1}: update {got.norm():.5g}, reference {want.norm():.5g}, relative error {err:.3g}",
              flush=True)
    if worst > args.tolerance:
        print(f"GradAccumError: the accumulated update is off by {worst:.1%} (tolerance {args.tolerance:.0%})",
              file=sys.stderr)
        return 1
    print("OK: both accumulated steps match the reference", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
