"""DeepSpeed 0.11.2: the pipeline engine reports a wrong loss (zero) with bf16 on the first stage.

Issue:  https://github.com/deepspeedai/DeepSpeed/issues/4661  ("loss are always zero when I upgrate
        deepspeed==0.12.2", pipeline engine; "It's okay to change to version 0.11.1"), and #4726.
Cause:  https://github.com/deepspeedai/DeepSpeed/pull/4327  "pipe engine _aggregate_total_loss:
        more efficient loss concatenation" (a02de228d, first in 0.11.2): the last stage builds the
        broadcast buffer with ``torch.stack([dp_group_loss, agg_loss])`` in the loss's dtype (bf16)
        where the other stages receive into a float32 tensor: the first stage reads the bf16
        bytes as float32.
Fix:    https://github.com/deepspeedai/DeepSpeed/pull/4727  (02288bc1f, first in 0.12.4): ``.float()``.

Truth (kind: metric, loss; a regression and its fix): last good 0.11.1, first bad 0.11.2, first
  fixed 0.12.4.  Status: ready script, NOT measured here (docs/results/metric-zoo.md): it needs
  two GPUs on NCCL; on gloo the two stages' buffers differ in size (4 bytes against 8) and the
  broadcast fails instead of giving a number.

Metric: ``loss`` as rank 0 (the first stage) sees it after each ``train_batch()``: a JSON line per
  step (``{"step": N, "loss": L}``) to the file named by ``DSBISECT_METRICS`` when set, and
  printed; DeepSpeed's own ``steps: N loss: L iter time (s): ...`` line (every 5 steps) carries
  the same figure and dsbisect reads it too.  Near 0 (or garbage) at the bad end.
    dsbisect bisect deepspeed 0.11.1 0.11.2 --matrix repro_scripts/zoo/matrix.yaml \
        --case ds_pipe_bf16_loss_zero --metric loss@step20 --worse-if 'differs by 1%'
  No assertion: the script exits 0 whatever the number.

Environment: 2 CUDA GPUs, 2 ranks under the deepspeed launcher (NCCL), a PipelineModule of 4
Linear layers in 2 stages, bf16, 20 steps.  deepspeed 0.11-0.12 on torch >= 2.4 need the
torch-elastic-socket and numpy-bufsize shims (the matrix's ``compat``).  Without 2 GPUs the
script exits 125.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

STEPS = 20


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
    args = ap.parse_args()

    import torch

    if torch.cuda.device_count() < 2 and int(os.environ.get("WORLD_SIZE", "1")) < 2:
        print("needs 2 CUDA GPUs: untestable here", file=sys.stderr)
        return 125
    import deepspeed
    from deepspeed.pipe import PipelineModule

    deepspeed.init_distributed(dist_backend="nccl")
    torch.cuda.set_device(args.local_rank)
    rank = torch.distributed.get_rank()
    print(f"rank {rank}: torch {torch.__version__}, deepspeed {deepspeed.__version__}", flush=True)
    torch.manual_seed(0)
    layers = [torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
              torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)]
    net = PipelineModule(layers=layers, num_stages=2, loss_fn=torch.nn.MSELoss(), partition_method="uniform")
    config = {
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": 2,
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
        "steps_per_print": 5,
    }
    engine, *_ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1024, 32, generator=g)
    y = torch.tanh(x[:, :1])
    data = iter(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x.bfloat16(), y.bfloat16()), batch_size=8,
                                            shuffle=False, drop_last=True))
    for step in range(1, STEPS + 1):
        loss = engine.train_batch(data_iter=data)
        if rank == 0:
            emit({"step": step, "loss": round(float(loss), 6)})
    torch.distributed.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main())
