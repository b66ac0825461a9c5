"""Seed 1: checkpointing after training fails with DeepSpeed 0.12.4 (DeepSpeed issue #4781).

The OpenChat trainer's end-of-epoch sequence: ZeRO-2 training in bf16 with a torch AdamW
passed to ``deepspeed.initialize``, an eval pass, ``dist.reduce`` of a 2-element metric on
the *default* process group (its first collective there, so its NCCL communicator is
created only now), ``dist.barrier()``, then rank 0 saves
``clone_tensors_for_torch_save(state_dict)``.  The seed saw a watchdog timeout at that
reduce (``REDUCE, NumelIn=2, SeqNum=1``) with 0.12.4 and not with 0.12.2-0.12.3.

Knobs: steps, model width/depth, sequence length, ``overlap_comm``, and ``--headroom-gb``:
the GPU memory left free after ``deepspeed.initialize`` (the rest is filled), which is
how memory pressure like that of a 7B full fine-tune on 80 GB cards is recreated on one
model size.  The headroom that separates the releases depends on the GPU and the model:
it is a per-GPU calibration in matrix.yaml.  Without ``--headroom-gb`` nothing is filled.

Checks its own result: all ranks must hold identical weights, and the saved file must
load back equal to them; otherwise it exits 1.  Runs on the CPU too (tiny sizes, gloo)
so that its logic can be tested without a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile


def build_model(vocab: int, width: int, ffn: int, depth: int):
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.up = nn.Linear(width, ffn)
            self.down = nn.Linear(ffn, width)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.blocks = nn.ModuleList(Block() for _ in range(depth))
            self.head = nn.Linear(width, vocab)

        def forward(self, tokens):
            x = self.embed(tokens)
            for b in self.blocks:
                x = b(x)
            return self.head(x)

    return LM()


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=8192)
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--eval-batches", type=int, default=4)
    ap.add_argument("--overlap-comm", type=int, default=1)
    ap.add_argument("--headroom-gb", type=float, default=None,
                    help="GPU memory left free after deepspeed.initialize; the rest is filled")
    ap.add_argument("--local_rank", type=int, default=0)
    return ap.parse_args()


def main() -> int:
    args = parse()
    import torch
    import torch.distributed as dist

    import deepspeed

    cuda = torch.cuda.is_available() and os.environ.get("DS_ACCELERATOR", "cuda") != "cpu"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", args.local_rank))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    timeout = datetime.timedelta(seconds=float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}/{world}: torch {torch.__version__}, deepspeed {deepspeed.__version__}, "
          f"{torch.cuda.get_device_name(device) if cuda else 'cpu'}", flush=True)

    torch.manual_seed(0)
    model = build_model(args.vocab, args.width, args.ffn, args.depth).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1,
                            fused=cuda)
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2, "overlap_comm": bool(args.overlap_comm)},
        "steps_per_print": 100,
    }
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    filler = fill_memory(args.headroom_gb, device, rank) if cuda else None

    gen = torch.Generator(device="cpu").manual_seed(1000 + rank)
    for step in range(args.steps):
        tokens = torch.randint(0, args.vocab, (1, args.seq + 1), generator=gen).to(device)
        logits = engine(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, args.vocab), tokens[:, 1:].reshape(-1))
        engine.backward(loss)
        engine.step()
        if step % 20 == 0 or step == args.steps - 1:
            print(f"rank {rank}: step {step} loss {loss.item():.4f}{memory(device)}", flush=True)
    return finish(engine, args, device, rank, filler)


def fill_memory(headroom_gb: float | None, device, rank: int):
    import torch

    if headroom_gb is None:
        return None
    free, total = torch.cuda.mem_get_info(device)
    fill = int(free - headroom_gb * 1e9)
    if fill <= 0:
        print(f"rank {rank}: only {free / 1e9:.2f} GB free, nothing to fill for {headroom_gb} GB headroom", flush=True)
        return None
    print(f"rank {rank}: filling {fill / 1e9:.2f} GB, leaving {headroom_gb:.2f} GB of {total / 1e9:.1f} GB", flush=True)
    return torch.empty(fill, dtype=torch.uint8, device=device)


def memory(device) -> str:
    import torch

    if device.type != "cuda":
        return ""
    free, _ = torch.cuda.mem_get_info(device)
    return (f" (free {free / 1e9:.2f} GB, max allocated {torch.cuda.max_memory_allocated(device) / 1e9:.2f} GB, "
            f"reserved {torch.cuda.memory_reserved(device) / 1e9:.2f} GB)")


def finish(engine, args, device, rank: int, filler) -> int:
    """Eval, the seed's reduce on the default group, barrier, save on rank 0, check."""
    import torch
    import torch.distributed as dist

    from deepspeed.checkpoint.utils import clone_tensors_for_torch_save

    engine.eval()
    total = torch.zeros(2, device=device)
    gen = torch.Generator(device="cpu").manual_seed(7)
    with torch.inference_mode():
        for _ in range(args.eval_batches):
            tokens = torch.randint(0, args.vocab, (1, args.seq + 1), generator=gen).to(device)
            logits = engine(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, args.vocab), tokens[:, 1:].reshape(-1))
            total += torch.stack([loss.float(), torch.ones((), device=device)])
    metric = total.clone()
    print(f"rank {rank}: eval done{memory(device)}; dist.reduce on the default group", flush=True)
    dist.reduce(metric, dst=0)  # the seed's REDUCE, NumelIn=2, SeqNum=1
    dist.barrier()
    if rank == 0:
        print(f"rank 0: eval loss {float(metric[0] / metric[1]):.4f}", flush=True)
    state = clone_tensors_for_torch_save(engine.module.state_dict())
    ok = same_on_all_ranks(state, device, rank)
    if rank == 0:
        folder = os.environ.get("DSBISECT_RUN_DIR") or tempfile.mkdtemp()
        path = os.path.join(folder, "checkpoint.pt")
        torch.save(state, path)
        back = torch.load(path, map_location="cpu")
        ok = ok and all(torch.equal(back[k], v) for k, v in state.items())
        os.remove(path)
        print(f"rank 0: saved and reloaded {len(state)} tensors", flush=True)
    flag = torch.tensor([1.0 if ok else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    dist.barrier()
    del filler
    if float(flag) < 1:
        print(f"rank {rank}: checkpoint check failed", flush=True)
        return 1
    print(f"rank {rank}: ok", flush=True)
    return 0


def same_on_all_ranks(state: dict, device, rank: int) -> bool:
    import torch
    import torch.distributed as dist

    sums = torch.tensor([float(v.double().sum()) for _, v in sorted(state.items())], dtype=torch.float64, device=device)
    ref = sums.clone()
    dist.broadcast(ref, src=0)
    return bool(torch.equal(sums, ref))


if __name__ == "__main__":
    sys.exit(main())
