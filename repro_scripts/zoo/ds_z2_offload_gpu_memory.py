"""ZeRO-Offload (stage 1/2) briefly holds an fp32 copy of the whole parameter partition on the GPU
at every step (one GPU).

Issue / PR:
    https://github.com/deepspeedai/DeepSpeed/pull/7309  ("Fix the GPU memory usage of ZeRO-Offload
        (only update stage_1_and_2.py)": "Before the fix, the memory usage is about 3x that of
        params_FP16. This is caused by the H2D data copy is using different data type. Now the
        GPU memory usage is about 1x params_FP16.")
Truth (find-fix): last broken 0.16.9, first fixed 0.17.0, fix commit
    17c8be07060045632190bd1f66e482192be0c1dd (#7309).
How established:
    `git tag --contains 17c8be070` on the DeepSpeed history: first in v0.17.0; the fix's
    param_buffer_of_bit16_for_cpu_offload_groups is in deepspeed/runtime/zero/stage_1_and_2.py
    from v0.17.0 on and in none of v0.16.4 .. v0.16.9.  Mechanism (the PR's diff): the step copied
    the updated fp32 CPU partition to the GPU with `fp32_partition.to(device)` (a temporary fp32
    tensor of 4 bytes per parameter on the GPU) before the copy into the bf16 parameters; the fix
    copies through a pinned bf16 CPU buffer.
Kind: fix (find the release that fixed it).
Environment: one CUDA GPU (~1 GB of its memory), 1 rank under the deepspeed launcher.  Without
    CUDA the script exits 125.

A bf16 model of 16 Linear(2048, 2048) layers (67 M parameters, 134 MB in bf16) under ZeRO-2 with
the optimizer offloaded (a torch SGD, zero_force_ds_cpu_optimizer false and
zero_allow_untested_optimizer true: no JIT-built op).  The
GPU memory the optimizer step allocates on top of what was allocated before it
(torch.cuda.max_memory_allocated after reset_peak_memory_stats) is measured on the second step.
Exit 0 when it is under half the bf16 parameter size; the broken releases allocate ~2x it (the
fp32 partition).
"""

from __future__ import annotations

import argparse
import os
import sys

LAYERS, WIDTH = 16, 2048


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)
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
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(LAYERS)])
    n = sum(p.numel() for p in model.parameters())
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}},
        "zero_force_ds_cpu_optimizer": False,
        "zero_allow_untested_optimizer": True,  # a torch optimizer under ZeRO: else an AssertionError
        "steps_per_print": 1000,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=1e-3),
                                           config=config)
    extra = 0
    for step in range(2):
        x = torch.randn(4, WIDTH, device="cuda", dtype=torch.bfloat16)
        loss = engine(x).float().pow(2).mean()
        engine.backward(loss)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        engine.step()
        torch.cuda.synchronize()
        extra = torch.cuda.max_memory_allocated() - base
        print(f"step {step + 1}: the step allocated {extra / 2**20:.1f} MiB on top of {base / 2**20:.1f} MiB "
              f"({extra / (2 * n):.2f}x the bf16 parameters, {n / 1e6:.1f} M)", flush=True)
    if extra > n:  # half the bf16 size (2 bytes a parameter)
        print(f"OffloadMemoryError: the offloaded step allocates {extra / (2 * n):.2f}x the bf16 parameters "
              "on the GPU", file=sys.stderr)
        return 1
    print("OK: the offloaded step allocates no fp32 copy on the GPU", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
