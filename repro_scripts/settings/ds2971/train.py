"""A training script that brings its own torch optimizer, as the HF Trainer, Lightning and many
fine-tuning scripts do, under a DeepSpeed config file.  Run it the way its user does:

    deepspeed --num_gpus 2 train.py --deepspeed ds_config.json --steps 3

(on a CPU-only machine: ``DS_ACCELERATOR=cpu``).  A few ZeRO steps of a tiny MLP with
``torch.optim.AdamW``; it exits non-zero if ``deepspeed.initialize`` refuses the setup, if the
loss does not drop, or if the ranks' weights differ after training.

From DeepSpeed 0.8.3 (PR #2971) ``deepspeed.initialize`` raises ``ZeRORuntimeException`` when
the config offloads the optimizer (``zero_optimization.offload_optimizer.device``: ``cpu`` or
``nvme``) and the optimizer is not DeepSpeed's CPU Adam or Lion, unless the config sets
``"zero_force_ds_cpu_optimizer": false``.
"""

import argparse
import json

import torch

import deepspeed

ap = argparse.ArgumentParser()
ap.add_argument("--deepspeed", dest="config", required=True, help="the DeepSpeed config file")
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--local_rank", type=int, default=0)
args = ap.parse_args()

deepspeed.init_distributed()
rank = torch.distributed.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
config = json.load(open(args.config))
engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
x = torch.randn(64, 16, generator=torch.Generator().manual_seed(1 + rank))
y = x.sum(dim=1, keepdim=True)
losses = []
for step in range(args.steps):
    batch = slice(0, 16)
    loss = torch.nn.functional.mse_loss(engine(x[batch]), y[batch])
    engine.backward(loss)
    engine.step()
    losses.append(loss.item())
flat = torch.cat([p.detach().float().flatten() for p in engine.module.parameters()])
first = flat.clone()
torch.distributed.broadcast(first, src=0)
print(f"rank {rank}: deepspeed {deepspeed.__version__}, losses {losses}", flush=True)
assert losses[-1] < losses[0], f"the loss did not drop: {losses}"
assert torch.equal(flat, first), "the ranks' weights differ after training"
torch.distributed.barrier()
