"""Accelerate 0.23.0: with DeepSpeed on 2 processes the learning-rate schedule runs at half pace.

Issue:  https://github.com/huggingface/accelerate/pull/2304  (the fix's description: "Deepspeed
        0.12.6, accelerate 0.22.0 works, Deepspeed 0.12.6, accelerate 0.23.0 regresses ... the
        learning is much slower on multi-gpu ds setup as compared to 1 gpu").
Cause:  https://github.com/huggingface/accelerate/pull/1909  "Add support for deepspeed optimizer
        and custom scheduler" (727d6243, first in 0.23.0): ``Accelerator._prepare_deepspeed``
        hands any torch ``LRScheduler`` to ``deepspeed.initialize``; the engine steps it once per
        optimizer step and accelerate's ``DeepSpeedSchedulerWrapper.step`` does nothing.  Before
        (and after the fix) accelerate's ``AcceleratedScheduler`` steps it ``num_processes`` times
        per optimizer step (its convention without ``split_batches``): on 2 ranks the schedule of
        0.23.0 - 0.25.0 runs at half the pace of 0.22.0's, and the model of step N differs.
Fix:    https://github.com/huggingface/accelerate/pull/2304  (3969731c, first in 0.26.0): only
        DeepSpeed's own schedulers go to DeepSpeed again.

Truth (kind: metric, loss / learning rate; a regression and its fix): last good 0.22.0, first bad
  0.23.0, first fixed 0.26.0 (last bad 0.25.0).  Measured by hand: docs/results/metric-zoo-truth.json.

Metric: ``lr`` (the optimizer's learning rate after each optimizer step) and ``loss``, a JSON line
  per step (``{"step": N, "lr": ..., "loss": ...}``, rank 0) to the file named by
  ``DSBISECT_METRICS`` when set, and printed.  A LambdaLR decaying linearly to 0 over 40 schedule
  steps; exact on CPU.  On 2 ranks the learning rate of step 10 is 0.005 at the good end, 0.0075
  at the bad (one schedule step per optimizer step instead of two), and the losses part from
  step 3 on.
    dsbisect bisect accelerate 0.22.0 0.23.0 --matrix repro_scripts/zoo/matrix.yaml \
        --case accelerate_ds_scheduler_double_step --metric lr@step10 --worse-if 'differs by 1%'
  No assertion: the script exits 0 whatever the number.

Environment: CPU, 2 ranks under torchrun on gloo, DeepSpeed's CPU accelerator (DS_ACCELERATOR=cpu;
deepspeed 0.19.8 here: the bug is accelerate's), ZeRO stage 1.  accelerate 0.22-0.26 always ask
DeepSpeed for NCCL, so the script starts the gloo process group itself first (accelerate and
DeepSpeed then use it) and sets ACCELERATE_TORCH_DEVICE=cpu.  < 1 GB a rank, ~100 s a run on 2
cores (most of it loading DeepSpeed's JIT-built shm op).  Pins: setuptools < 82, deepspeed 0.19.8.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

STEPS, SCHEDULE = 12, 40


def emit(record: dict) -> None:
    """One JSON line: on stdout, and appended to $DSBISECT_METRICS when it is set."""
    line = json.dumps(record)
    print(line, flush=True)
    path = os.environ.get("DSBISECT_METRICS")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.parse_args()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("ACCELERATE_TORCH_DEVICE", "cpu")

    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    import accelerate
    import deepspeed
    from accelerate import Accelerator, DeepSpeedPlugin

    print(f"torch {torch.__version__}, accelerate {accelerate.__version__}, deepspeed {deepspeed.__version__}",
          flush=True)
    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=1, gradient_accumulation_steps=1))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1 - s / SCHEDULE))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 16, generator=g)
    y = x[:, :1] * 0.5 - x[:, 1:2]
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    step = 0
    for xb, yb in loader:
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        step += 1
        if accelerator.is_main_process:
            lr = optimizer.param_groups[0]["lr"]
            emit({"step": step, "lr": round(float(lr), 10), "loss": round(float(loss), 6)})
        if step == STEPS:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
