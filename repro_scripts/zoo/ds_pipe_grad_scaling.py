"""Pipeline parallelism (2 stages): one optimizer step checked against plain PyTorch.

Two DeepSpeed bugs of the PipelineEngine, two matrix cases (see repro_scripts/zoo/matrix.yaml):

ds_pipe_backward_zero0  (--gas 1; kind: fail, regression, commit level)
    https://github.com/deepspeedai/DeepSpeed/pull/7787 ("Fix backward for pipeline engine"):
    "The new backward API introduced in #7665 broke the nested backward call used in the
    pipeline engine. Tests in unit/checkpoint/test_pipeline.py hang because of this issue."
    With ZeRO stage 0 the first stage's backward raises "Direct calls to tensor.backward() are
    not supported in this configuration" (the unit tests, run without a launcher, then wait for
    the dead peer; under the deepspeed launcher the job fails).
    Truth: last good 0.18.2, first bad 0.18.3, commit 53e91a098d0a0666ac8cb8025a5b36e5af172d08
    (#7665, "PyTorch-compatible backward API"); fixed in 0.18.5 by
    3d896d7e06aa3359282fbe2300a85f9520b6b594 (#7787).
    How established: PR #7787's text names #7665; 53e91a098 is first contained in tag v0.18.3
    (first-parent range v0.18.2..v0.18.3, 22 commits) and 3d896d7e0 first in v0.18.5.
    Checked by building 53e91a098 and its first parent 51dc88842 outside dsbisect: the parent
    passes, 53e91a098 fails.

ds_pipe_ga_scaling  (--gas 4; kind: fix, find the release that fixed it)
    https://github.com/deepspeedai/DeepSpeed/issues/8152 ("Gradient accumulation scaling is applied
    repeatedly across pipeline stages", observed with 0.19.2: with 2 stages and GAS 8 the first
    stage gets 1/64 of the accumulated gradient) and
    https://github.com/deepspeedai/DeepSpeed/pull/8154 (the fix, "Fixes #8152").
    Truth: last broken 0.19.2, first fixed 0.19.3, commit d99a6429eeddb33915b910a1586b52ef927cb44f
    (#8154, first contained in tag v0.19.3).

Environment: CPU (DS_ACCELERATOR=cpu, gloo) or CUDA, 2 ranks (= 2 pipeline stages, data parallel
    1), < 1 GB RAM; deepspeed >= 0.14.1 on CPU.  fp32, ZeRO stage 0, torch SGD.

Every rank builds the same small MLP, keeps a plain copy of it, and hands the layers to a
2-stage PipelineModule; one train_batch of GAS micro-batches, then each stage compares its
weights with one SGD step of the plain copy on the mean loss of the same samples.  Exit 0 when
every stage is within 5 % of that reference.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import sys

LR = 0.2
MICRO = 4


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.add_argument("--gas", type=int, default=1, help="gradient accumulation steps (micro-batches)")
    ap.add_argument("--tolerance", type=float, default=0.05)
    args = ap.parse_args()

    import torch

    import deepspeed
    from deepspeed.pipe import PipelineModule

    timeout = datetime.timedelta(seconds=float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    deepspeed.init_distributed(dist_backend="gloo", timeout=timeout)
    rank = torch.distributed.get_rank()
    print(f"rank {rank}: torch {torch.__version__}, deepspeed {deepspeed.__version__}, gas {args.gas}", flush=True)

    torch.manual_seed(0)
    layers = [torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)]
    reference = torch.nn.Sequential(*copy.deepcopy(layers))
    twin = {id(p): q for p, q in zip(torch.nn.Sequential(*layers).parameters(), reference.parameters())}

    model = PipelineModule(layers=layers, num_stages=2, loss_fn=torch.nn.MSELoss(), partition_method="uniform")
    config = {
        "train_micro_batch_size_per_gpu": MICRO,
        "gradient_accumulation_steps": args.gas,
        "zero_optimization": {"stage": 0},
        "gradient_clipping": 0.0,
        "steps_per_print": 1000,
    }
    params = [p for p in model.parameters() if p.requires_grad]
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(params, lr=LR), config=config)

    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(args.gas * MICRO, 8, generator=gen)
    y = torch.sin(x[:, :1] * 3.0)
    batches = iter([(x[i * MICRO:(i + 1) * MICRO], y[i * MICRO:(i + 1) * MICRO]) for i in range(args.gas)])
    loss = engine.train_batch(data_iter=batches)
    print(f"rank {rank}: stage {engine.stage_id} trained one batch, loss {float(loss):.4f}", flush=True)

    # the reference step: the mean loss over all GAS * MICRO samples, one SGD step
    torch.nn.functional.mse_loss(reference(x), y).backward()
    got, want = [], []
    for p in engine.module.parameters():
        q = twin[id(p)]
        w0 = q.detach().clone()
        got.append((p.detach() - w0).flatten())
        want.append((-LR * q.grad).flatten())
    got, want = torch.cat(got), torch.cat(want)
    rel = ((got - want).norm() / want.norm()).item()
    ratio = (got.norm() / want.norm()).item()
    print(f"rank {rank}: stage {engine.stage_id} update {ratio:.4f} of the reference "
          f"(relative error {rel:.4f})", flush=True)
    ok = torch.tensor([1.0 if rel < args.tolerance else 0.0])
    torch.distributed.all_reduce(ok, op=torch.distributed.ReduceOp.MIN)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    if ok.item() != 1.0:
        if rel >= args.tolerance:
            # an exception-style line, so that the run's failure reason (and --signature) can name it
            print(f"GradientMismatchError: rank {rank}: stage {engine.stage_id}'s step is {ratio:.4f} of "
                  f"the reference, relative error {rel:.4f} >= {args.tolerance}", flush=True)
        return 1
    print(f"rank {rank}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
