"""ZeRO-3 + ZeRO-Offload with gradient clipping: the step fails with "Expected all tensors to be on
the same device" (one GPU).

Issue / PR:
    https://github.com/deepspeedai/DeepSpeed/pull/5461  (the revert, "due to #5256 causing bugs when
        the ZeRO3 + ZeRO Offload features are enabled": "RuntimeError: Expected all tensors to be
        on the same device, but found at least two devices, cuda:3 and cpu!")
    https://github.com/deepspeedai/DeepSpeed/pull/5256  (the cause: "stage3: efficient compute of
        scaled_global_grad_norm", torch.norm(torch.stack(norm_groups)) instead of get_global_norm)
Truth (find-fix): last broken 0.14.2, first fixed 0.14.3, fix commit
    bc48371c5e1fb8fd70fc79285e66201dbb65679b (#5461).  The cause, 54c06872647c (#5256), is first
    contained in v0.14.1 (last good 0.14.0).
How established:
    `git tag --contains` on the DeepSpeed history: 54c068726 first in v0.14.1, bc48371c5 first in
    v0.14.3; deepspeed/runtime/zero/stage3.py holds `torch.norm(torch.stack(norm_groups))` in
    v0.14.1 and v0.14.2 only (not in v0.14.0, v0.14.3 .. v0.15.0).  Mechanism (read from the
    v0.14.1 source): the global norm becomes a CUDA tensor instead of a Python float, and
    unscale_and_clip_grads multiplies the offloaded fp32 gradient (on the CPU) in place by
    1 / (clip * loss_scale), a CUDA tensor, when the norm exceeds gradient_clipping.
Kind: fix (find the release that fixed it).
Environment: one CUDA GPU (the bug needs the gradient on the CPU and the norm on the GPU), 1 rank
    under the deepspeed launcher; deepspeed 0.14.x on torch >= 2.4 needs the torch-elastic-socket
    shim.  Without CUDA the script exits 125 (untestable).

One SGD step of a small fp32 MLP under ZeRO-3 with the optimizer offloaded to the CPU (a torch
optimizer, zero_force_ds_cpu_optimizer false and
zero_allow_untested_optimizer true: no JIT-built op), gradients far above the clipping
threshold of 1.0.  Exit 0 when the step runs and the applied update has the clipped norm
(lr * 1.0, within 20 %); the broken releases raise the RuntimeError in engine.step().
"""

from __future__ import annotations

import argparse
import os
import sys

LR = 0.1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
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
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    before = [p.detach().clone().cuda() for p in model.parameters()]
    config = {
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": False}},
        "zero_force_ds_cpu_optimizer": False,
        "zero_allow_untested_optimizer": True,  # a torch optimizer under ZeRO: else an AssertionError
        "steps_per_print": 1000,
    }
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    x = torch.randn(8, 64, device="cuda") * 10
    loss = (engine(x) ** 2).mean() * 1000  # gradient norm far above 1.0: the clip applies
    engine.backward(loss)
    engine.step()
    with deepspeed.zero.GatheredParameters(list(engine.module.parameters())):
        after = [p.detach().clone() for p in engine.module.parameters()]
    update = torch.sqrt(sum(((a - b) ** 2).sum() for a, b in zip(after, before))).item()
    print(f"grad norm {engine.get_global_grad_norm()}, update norm {update:.4g} (clipped: {LR})", flush=True)
    if not 0.8 * LR <= update <= 1.2 * LR:
        print(f"ClipError: the update norm {update:.4g} is not the clipped {LR}", file=sys.stderr)
        return 1
    print("OK: the clipped step ran", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
