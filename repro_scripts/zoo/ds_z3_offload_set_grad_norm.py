"""ZeRO-3 + ZeRO-Offload: gradients replaced with safe_set_local_grad are not seen by the global
gradient norm (one GPU).

Issue / PR:
    https://github.com/deepspeedai/DeepSpeed/issues/7292
    https://github.com/deepspeedai/DeepSpeed/pull/7302  ("Fix: Update grad norm calculation for CPU
        offload": "gradient clipping modifications are not reflected in the global gradient norm
        calculation when CPU offloading is enabled ... the _global_grad_norm calculation still
        uses the original unclipped gradients")
Truth (find-fix): last broken 0.16.9, first fixed 0.17.0, fix commit
    b9af5d8d6181c68b8b3f9e754442bd12ab3a914e (#7302).
How established:
    `git tag --contains b9af5d8d6` on the DeepSpeed history: first in v0.17.0; the fix's line
    (`self.norm_for_param_grads[...] = self._constant_buffered_norm2(value)` under
    `if self.offload_optimizer:` in set_local_grad_for_param) is in deepspeed/runtime/zero/stage3.py
    from v0.17.0 on and in none of v0.16.4 .. v0.16.9.  A different change from the one of
    ds_z2_offload_gpu_memory (#7309, stage 1/2), released together.
Kind: fix (find the release that fixed it).
Environment: one CUDA GPU, 1 rank under the deepspeed launcher.  Without CUDA the script exits 125.

One step of a small fp32 MLP under ZeRO-3 with the optimizer offloaded (a torch SGD,
zero_force_ds_cpu_optimizer false and
zero_allow_untested_optimizer true: no JIT-built op): after backward every parameter's gradient is
set to zero with deepspeed.utils.safe_set_local_grad.  Exit 0 when the engine's global gradient
norm after the step is zero (the gradients it stepped on); the broken releases report the norm of
the gradients from before the replacement.
"""

from __future__ import annotations

import argparse
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU: untestable here", file=sys.stderr)
        return 125
    import deepspeed
    from deepspeed.utils import safe_get_local_grad, safe_set_local_grad

    deepspeed.init_distributed(dist_backend="nccl")
    torch.cuda.set_device(args.local_rank)
    print(f"torch {torch.__version__}, deepspeed {deepspeed.__version__}, {torch.cuda.get_device_name()}, "
          f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 16))
    config = {
        "train_micro_batch_size_per_gpu": 8,
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": False},
                              "contiguous_gradients": True, "overlap_comm": False},
        "zero_force_ds_cpu_optimizer": False,
        "zero_allow_untested_optimizer": True,  # a torch optimizer under ZeRO: else an AssertionError
        "steps_per_print": 1000,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                           config=config)
    loss = (engine(torch.randn(8, 32, device="cuda")) ** 2).mean() * 100
    engine.backward(loss)
    replaced = 0
    for p in engine.module.parameters():
        g = safe_get_local_grad(p)
        if g is not None:
            safe_set_local_grad(p, torch.zeros_like(g))
            replaced += 1
    engine.step()
    norm = float(engine.get_global_grad_norm())
    print(f"{replaced} gradients set to zero; global grad norm after the step: {norm:.6g}", flush=True)
    if replaced == 0:
        print("no local gradient found: untestable", file=sys.stderr)
        return 125
    if norm > 1e-6:
        print(f"GradNormError: the global norm {norm:.6g} ignores the replaced (zero) gradients", file=sys.stderr)
        return 1
    print("OK: the norm is that of the replaced gradients", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
