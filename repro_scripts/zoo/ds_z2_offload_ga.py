"""ZeRO-2 + ZeRO-Offload with gradient accumulation drops the gradients of every micro-step but the
first (one GPU): a regression brought in by the PR that set out to fix the accumulation.

Issue / PR:
    https://github.com/deepspeedai/DeepSpeed/pull/7967  ("Fix zero 1 and 2 CPU-offloaded gradient
        norm": "This PR fixes a bug introduced in #6550 ... gradients are only copied to CPU when
        micro_step_id=0. For micro_step_id > 0, the gradients were effectively dropped"), and the
        comment of 2024-10-17 on https://github.com/deepspeedai/DeepSpeed/pull/6550 (grad norms of
        ZeRO-2 and ZeRO-3 "not in the same scale" since that PR).
Truth (regression): last good 0.15.1, first bad 0.15.2, first bad commit
    c85c8703bc49eefb78d8d64b5f0027f7b8acf9ff (#6550, "Fix gradient accumulation for Z2+offload").
How established:
    #7967 names #6550 as the cause; `git tag --contains c85c8703b` on the DeepSpeed history: first
    in v0.15.2; v0.15.1 is an ancestor of v0.15.2.  (This case was first written as the find-fix
    of #6550; its own run on an H200 showed 0.14.4 matching the reference and 0.15.3 off by 58 %,
    which is what sent us to #7967: docs/results/2026-12-02-h200-gpuzoo.md.)
Kind: regression.
Environment: one CUDA GPU (the offload path moves gradients between the GPU and pinned CPU
    buffers), 1 rank under the deepspeed launcher.  Without CUDA the script exits 125.

Metric form (``--metric-only``, issue 38): the same job asserts nothing and exits 0; it writes a
JSON line per optimizer step, ``{"step": N, "update_rel_error": E, "update_norm": U, "loss": L}``
(E the relative error below, L the last micro-batch's loss), to the file named by
``DSBISECT_METRICS`` when set, and prints it.
    dsbisect bisect deepspeed 0.14.4 0.15.3 --matrix repro_scripts/zoo/matrix.yaml \
        --case ds_z2_offload_ga_metric --metric update_rel_error@step2 --worse-if 'higher by 0.05'

Two optimizer steps of a small fp32 MLP under ZeRO-2 with the optimizer offloaded to the CPU (a
torch SGD, zero_force_ds_cpu_optimizer false and
zero_allow_untested_optimizer true: no JIT-built op), 4 micro-batches each, checked
against the same two steps computed here with plain torch (mean of the micro-batch gradients).
Exit 0 when both updates DeepSpeed applied are within 5 % of the reference.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys

LR, GAS, MICRO = 0.1, 4, 8


def emit(record: dict) -> None:
    """One JSON line: on stdout, and appended to $DSBISECT_METRICS when it is set."""
    line = json.dumps(record)
    print(line, flush=True)
    path = os.environ.get("DSBISECT_METRICS")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def flat(params):
    import torch

    return torch.cat([p.detach().float().reshape(-1) for p in params])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--metric-only", action="store_true", help="report the numbers, assert nothing")
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
        if args.metric_only:
            emit({"step": step + 1, "update_rel_error": round(err, 6), "update_norm": round(got.norm().item(), 8),
                  "loss": round(loss.item(), 8)})
    if args.metric_only:
        return 0
    if worst > args.tolerance:
        print(f"GradAccumError: the accumulated update is off by {worst:.1%} (tolerance {args.tolerance:.0%})",
              file=sys.stderr)
        return 1
    print("OK: both accumulated steps match the reference", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
