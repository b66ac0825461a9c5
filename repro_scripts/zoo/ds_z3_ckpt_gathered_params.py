"""DeepSpeed 0.16.0: ZeRO-3 with activation checkpointing keeps parameters gathered after backward (OOM).

Issue:  https://github.com/deepspeedai/DeepSpeed/issues/7116  "OOM when train 70B models using
        16.4" (a commenter names cd20a3bbc: "`ds_grads_remaining` cannot correctly count for the
        forward pass when using gradient checkpointing"); Open-Reasoner-Zero#13.
Cause:  https://github.com/deepspeedai/DeepSpeed/pull/6726  "Fix potential memory issues when use
        deepspeed Z3" (cd20a3bbc, first in 0.16.0): the post-backward pre-forward hook no longer
        resets ``module.ds_grads_remaining`` to 0.  Under checkpointing a block's forward runs
        twice (once more in backward), the count never returns to 0, and the block's parameters are
        not released after its backward: they stay gathered, full size, on every rank.
Fix:    https://github.com/deepspeedai/DeepSpeed/pull/7258  "rollback #6726" (f45950258, first in
        0.16.8).

Truth (kind: metric, memory; a regression and its fix): last good 0.15.4, first bad 0.16.0, first
  fixed 0.16.8 (last bad 0.16.7).  Measured by hand: docs/results/metric-zoo-truth.json.

Metric: ``gathered_mib``: the most parameter memory (MiB, full fp32 size) that ZeRO-3 held
  gathered (``ds_status`` AVAILABLE, persistent small parameters left out) on this rank at the end
  of any block's backward (a hook on each block's input gradient), in each step -- what the GPU
  holds beyond the partitions; ``gathered_after_step_mib`` (0 at both ends: everything is
  released at the step's end) and ``rss_mib`` besides.  A JSON line per step and rank
  (``{"step": N, "rank": R, "gathered_mib": G, ...}``) to the file named by
  ``DSBISECT_METRICS`` when set, and printed.  Exact: 0 at the good end, the 8 blocks (32 MiB)
  at the bad.  On a GPU (CUDA available and DS_ACCELERATOR not cpu: NCCL) each record also has
  ``peak_cuda_mib``, torch's peak allocation over the step's backward and optimizer step,
  ``backward_peak_cuda_mib``, the peak over the backward alone, and ``cuda_after_backward_mib``,
  what is allocated when the backward returns.  With one rank (blocks of 4096) all three were the
  same at 0.15.4, 0.16.0, 0.16.7 and 0.16.8 on an H200, and at the points an H100 ran (4022.7 /
  4022.7 / 3510.6 MiB), while ``gathered_mib`` read 512 at 0.16.0 and 0.16.7: one rank's held
  blocks take no memory of their own that these see; bisect ``gathered_mib`` there
  (docs/results/metric-zoo.md, "GPU").
    dsbisect bisect deepspeed 0.15.4 0.16.0 --matrix repro_scripts/zoo/matrix.yaml \
        --case ds_z3_ckpt_gathered_params --metric gathered_mib@step3@max --worse-if 'higher by 8'
  No assertion: the script exits 0 whatever the number.

Environment: CPU (DS_ACCELERATOR=cpu; deepspeed < 0.16 needs ``numactl`` on PATH there), 2 ranks
under the deepspeed launcher on gloo, ZeRO-3, fp32, 8 blocks of Linear(1024, 1024) each under
``torch.utils.checkpoint`` (``--reentrant`` chooses the variant; the default, non-reentrant, is
what was measured), 3 steps, no prefetch and
``stage3_max_reuse_distance`` 0.  < 1 GB a rank; 1-3 min a run on 2 cores, most of it DeepSpeed's
JIT-loaded shm op.  Or 1..N GPUs (NCCL).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

MIB = 2 ** 20


def emit(record: dict) -> None:
    """One JSON line: on stdout, and appended to $DSBISECT_METRICS when it is set."""
    line = json.dumps(record)
    print(line, flush=True)
    path = os.environ.get("DSBISECT_METRICS")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--reentrant", action="store_true", help="torch.utils.checkpoint(use_reentrant=True)")
    args = ap.parse_args()

    import torch
    from torch.utils.checkpoint import checkpoint

    import deepspeed
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    timeout = datetime.timedelta(seconds=float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    cuda = os.environ.get("DS_ACCELERATOR") != "cpu" and torch.cuda.is_available()
    deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo", timeout=timeout)
    rank = torch.distributed.get_rank()
    device = torch.device("cuda", args.local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    print(f"rank {rank}: torch {torch.__version__}, deepspeed {deepspeed.__version__}", flush=True)

    peak = [0.0, 0]

    def gathered():
        held = [p for p in engine.module.parameters()  # persistent (small) ones are always there
                if p.ds_status == ZeroParamStatus.AVAILABLE and not getattr(p, "ds_persist", False)]
        return sum(p.ds_numel for p in held) * 4 / MIB, len(held)

    def watch():
        mib, n = gathered()
        if mib > peak[0]:
            peak[:] = [mib, n]

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(args.width, args.width)

        def forward(self, x):
            if x.requires_grad:  # fires when this block's input gradient is done: its backward is over
                x.register_hook(lambda g: watch())
            return x + torch.tanh(self.fc(x))

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList(Block() for _ in range(args.blocks))
            self.head = torch.nn.Linear(args.width, 1)

        def forward(self, x):
            for block in self.blocks:
                x = checkpoint(block, x, use_reentrant=args.reentrant)
            return self.head(x)

    config = {
        "train_micro_batch_size_per_gpu": 4,
        # no prefetch and no keeping for reuse: once the trace is recorded (step 2) either would
        # hold blocks gathered by design (the defaults, 5e7 and 1e9 elements, hold all 8 here)
        "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0},
        "zero_allow_untested_optimizer": True,  # torch SGD: no JIT-built optimizer op
        "steps_per_print": 1000,
    }
    torch.manual_seed(0)
    with deepspeed.zero.Init(config_dict_or_path=config):
        net = Net()
    engine, *_ = deepspeed.initialize(model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.01),
                                      config=config)
    g = torch.Generator().manual_seed(1 + rank)
    for step in range(1, args.steps + 1):
        x = torch.randn(4, args.width, generator=g).to(device).requires_grad_()
        loss = engine(x).pow(2).mean()
        peak[:] = [0.0, 0]
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        engine.backward(loss)
        if cuda:  # what the backward alone took and left: the held blocks sit on top of it
            backward_peak = torch.cuda.max_memory_allocated() / MIB
            after_backward = torch.cuda.memory_allocated() / MIB
        engine.step()
        after, _ = gathered()
        record = {"step": step, "rank": rank, "gathered_mib": round(peak[0], 3), "gathered_params": peak[1],
                  "gathered_after_step_mib": round(after, 3), "rss_mib": round(rss_mib(), 1)}
        if cuda:  # the peak of the backward and step, as an OOM would see it
            record["peak_cuda_mib"] = round(torch.cuda.max_memory_allocated() / MIB, 1)
            record["backward_peak_cuda_mib"] = round(backward_peak, 1)
            record["cuda_after_backward_mib"] = round(after_backward, 1)
        emit(record)
    torch.distributed.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main())
