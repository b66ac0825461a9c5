"""Decoupled checkpointing: when the checkpoint writer process dies, training hangs forever.

Issue / PR:
    https://github.com/deepspeedai/DeepSpeed/issues/7741  ("DecoupledCheckpointEngine hangs
        indefinitely due to missing timeouts and process health checks")
    https://github.com/deepspeedai/DeepSpeed/pull/7742   (the fix)
Truth (find-fix): last broken 0.18.3, first fixed 0.18.4, fix commit
    ba29fdca304c00da7680229c7b199ae73d0b1a2c (#7742).
How established:
    Issue #7741: "commit() calls self.save_event.wait() with no timeout - if the checkpoint process
    dies before setting the event, training hangs forever"; its reproduction is "kill or crash
    the checkpoint subprocess".  PR #7742 ("Fixes #7741") waits with process health checks and
    raises instead.  In the DeepSpeed history ba29fdca3 (#7742) is first contained in tag
    v0.18.4; DecoupledCheckpointEngine itself first appears in v0.17.1 (24a1d8f93, #7215), so
    releases before 0.17.1 cannot test this (exit 125).
Kind: hang, fixed (find the release that fixed it).  The hang is not a collective: every rank
    waits on a multiprocessing Event, so it is seen by silence (idle_timeout) or the wall clock.
Wrong answer tempting: this script trains with ZeRO-2 before checkpointing, and 0.18.7 - 0.18.9
    fail that first step on the CPU accelerator for an unrelated reason (PR #7828's in-place
    error, case ds_zero2_cpu_flatten_inplace).  A find-fix search over 0.18.3 .. 0.19.5 that counts
    any failure as "still broken" (--regress-on any) probes 0.18.9 first and answers 0.19.0;
    --regress-on hang (or --signature naming the hang) steps around them and answers 0.18.4.
Environment: CPU (DS_ACCELERATOR=cpu, gloo), 2 ranks, < 1 GB RAM, a writable temp dir;
    deepspeed >= 0.17.1.

Exit 0 when DeepSpeed reports the dead writer (any exception out of the commit) instead of
waiting for it.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.add_argument("--stage", type=int, default=0)
    args = ap.parse_args()

    import torch

    import deepspeed

    try:
        from deepspeed.runtime.checkpoint_engine import decoupled_checkpoint_engine  # noqa: F401
    except ImportError:
        print("this deepspeed has no DecoupledCheckpointEngine (< 0.17.1): cannot test", flush=True)
        return 125

    import torch.multiprocessing as torch_mp

    if not hasattr(torch_mp, "get_start_methods"):
        # 0.17.1 - 0.18.3 construct the engine with torch.multiprocessing.get_start_methods(), a
        # function no torch has (added by #7349, dropped by #7742): without this stand-in those
        # releases fail in deepspeed.initialize and never reach the commit the issue is about.
        torch_mp.get_start_methods = lambda allow_None=False: torch_mp.get_start_method(allow_none=True)

    timeout = datetime.timedelta(seconds=float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    deepspeed.init_distributed(dist_backend="gloo", timeout=timeout)
    rank = torch.distributed.get_rank()
    print(f"rank {rank}: torch {torch.__version__}, deepspeed {deepspeed.__version__}", flush=True)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "Adam", "params": {"lr": 0.01, "torch_adam": True}},
        "zero_optimization": {"stage": args.stage},
        # the python writer needs no async-I/O op; "decoupled" moves it into a child process;
        # "replica": every data-parallel rank writes (and gets a writer process) -- without
        # "data_parallel", 0.18.x fails in create_data_parallel_writer_config (no dp_rank)
        "checkpoint": {"writer": {"type": "python", "decoupled": True, "data_parallel": "replica"}},
        "steps_per_print": 1000,
    }
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)

    gen = torch.Generator().manual_seed(1234 + rank)
    x = torch.randn(8, 16, generator=gen)
    y = x.sum(dim=1, keepdim=True)

    def train_step(i: int) -> None:
        loss = torch.nn.functional.mse_loss(engine(x[4 * i:4 * i + 4]), y[4 * i:4 * i + 4])
        engine.backward(loss)
        engine.step()

    train_step(0)
    print(f"rank {rank}: trained one step", flush=True)

    ckpt_engine = engine.checkpoint_engine
    if not ckpt_engine.is_decoupled():
        print(f"rank {rank}: the checkpoint engine is {type(ckpt_engine).__name__}, not decoupled", flush=True)
        return 125
    save_dir = os.path.join(tempfile.gettempdir(), f"ds-decoupled-{os.environ.get('MASTER_PORT', 'x')}")
    engine.save_checkpoint(save_dir, tag="step1")
    writer = getattr(ckpt_engine, "ckpt_process", None)
    if writer is not None:
        # the reproduction: the writer dies (OOM, signal, full disk) before it commits
        writer.kill()
        writer.join()
        print(f"rank {rank}: killed the checkpoint writer (pid {writer.pid})", flush=True)

    reported = ""
    try:
        # the decoupled checkpoint is committed at the next optimizer step: the broken releases
        # wait there forever for an event the dead writer will never set
        train_step(1)
    except Exception as exc:  # the fixed releases raise (RuntimeError: ... process died / not running)
        reported = f"{type(exc).__name__}: {exc}"
        print(f"rank {rank}: deepspeed reported the dead writer: {reported}", flush=True)

    if not (reported or writer is None):
        print(f"ReproError: rank {rank}: the step after the writer died neither hung nor failed", flush=True)
    flag = torch.tensor([1.0 if (reported or writer is None) else 0.0])
    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MIN)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    sys.stdout.flush()
    # leave without running the engine's destructor: it would try to commit once more
    os._exit(0 if flag.item() == 1.0 else 1)


if __name__ == "__main__":
    sys.exit(main())
