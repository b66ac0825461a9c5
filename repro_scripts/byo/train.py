"""A user's own training script, as a bug report would bring it: its own arguments, a DeepSpeed
config file, no dsbisect anywhere.  Run it the way its user does:

    deepspeed --num_gpus 2 train.py --deepspeed ds_config.json --steps 3

(on a CPU-only machine under dsbisect: `--accelerator cpu`).  A few ZeRO steps of a tiny MLP;
it exits non-zero if training goes wrong (the loss does not drop, or the ranks' weights differ).
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
config = json.load(open(args.config))
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
x = torch.randn(64, 16, generator=torch.Generator().manual_seed(1 + rank))
y = x.sum(dim=1, keepdim=True)
losses = []
for step in range(args.steps):
    batch = slice(step * 4 % 64, step * 4 % 64 + 4)
    loss = torch.nn.functional.mse_loss(engine(x[batch]), y[batch])
    engine.backward(loss)
    engine.step()
    losses.append(loss.item())
flat = torch.cat([p.detach().float().flatten() for p in engine.module.parameters()])
first = flat.clone()
torch.distributed.broadcast(first, src=0)
print(f"rank {rank}: deepspeed {deepspeed.__version__}, losses {losses}", flush=True)
assert torch.equal(flat, first), "the ranks' weights differ after training"
torch.distributed.barrier()
