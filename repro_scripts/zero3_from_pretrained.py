"""Seed 2: ``BertLMHeadModel.from_pretrained`` hangs under ZeRO-3 (LLaMA-VID's Q-Former).

Rank 0 saves a tiny BERT *without* cross-attention; then, with ZeRO-3 on (an
``HfDeepSpeedConfig`` alive, as the HF Trainer sets it), every rank loads it as a decoder
*with* cross-attention, so about 40 parameters are missing from the checkpoint.
transformers >= 4.37 gathers those with ``deepspeed.zero.GatheredParameters`` over a
Python ``set`` of tensors, whose order differs between processes; DeepSpeed before 0.10
all-gathers in the order given, so the ranks enter different all-gathers and NCCL waits
forever.  From DeepSpeed 0.10.0 (PR #3819) the list is sorted by ``ds_id``.

No hub download: the model is built from a config.  The script checks its own result:
every rank must end with identical weights, equal to the checkpoint where it had them.
Honours ``DSBISECT_COLLECTIVE_TIMEOUT``; prints the versions it runs with.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile

os.environ.setdefault("USE_TF", "0")
os.environ.setdefault("USE_FLAX", "0")
os.environ.setdefault("USE_JAX", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def log_gather_order(rank: int) -> None:
    """Print the order of each GatheredParameters list: the evidence of the divergence."""
    import hashlib

    import deepspeed

    cls = deepspeed.zero.GatheredParameters
    original = cls.__init__

    def init(self, params, *args, **kwargs):
        try:
            items = list(params) if isinstance(params, (list, tuple, set)) else None
            if items and len(items) > 1:
                ids = [getattr(p, "ds_id", -1) for p in items]
                numels = [getattr(p, "ds_tensor", p).numel() for p in items]
                digest = hashlib.sha1(repr(ids).encode()).hexdigest()[:8]
                print(f"[rank{rank}] GatheredParameters n={len(items)} order_hash={digest} "
                      f"first ds_ids={ids[:6]} partition numels={numels[:6]}", flush=True)
        except Exception as e:  # logging must never change the outcome
            print(f"[rank{rank}] (could not log the gather order: {e})", flush=True)
        original(self, params, *args, **kwargs)

    cls.__init__ = init


def save_tiny_bert(path: str, layers: int, hidden: int) -> None:
    from transformers import BertConfig, BertLMHeadModel

    config = BertConfig(vocab_size=512, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=hidden * 2, max_position_embeddings=64, is_decoder=True)
    import torch

    torch.manual_seed(0)
    BertLMHeadModel(config).save_pretrained(path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--local_rank", type=int, default=0)
    args = ap.parse_args()

    import torch
    import torch.distributed as dist

    import deepspeed
    import transformers

    cuda = torch.cuda.is_available() and os.environ.get("DS_ACCELERATOR", "cuda") != "cpu"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", args.local_rank)))
    timeout = datetime.timedelta(seconds=float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo", timeout=timeout)
    rank = dist.get_rank()
    print(f"rank {rank}: torch {torch.__version__}, deepspeed {deepspeed.__version__}, "
          f"transformers {transformers.__version__}, {'cuda' if cuda else 'cpu'}", flush=True)

    # 1. Rank 0 writes the checkpoint (no ZeRO yet), every rank learns where it is.
    folder = [tempfile.mkdtemp(prefix="dsbisect-bert-", dir=os.environ.get("DSBISECT_RUN_DIR")) if rank == 0 else None]
    dist.broadcast_object_list(folder, src=0)
    if rank == 0:
        save_tiny_bert(folder[0], args.layers, args.hidden)
    dist.barrier()

    # 2. ZeRO-3 on, as the HF Trainer turns it on; then the load that hangs.
    from transformers import BertLMHeadModel

    try:
        from transformers.integrations import HfDeepSpeedConfig
    except ImportError:  # transformers < 4.31
        from transformers.deepspeed import HfDeepSpeedConfig

    ds_config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}
    keep = HfDeepSpeedConfig(ds_config)  # noqa: F841 - must stay alive for zero3 to be on
    log_gather_order(rank)
    model = BertLMHeadModel.from_pretrained(folder[0], is_decoder=True, add_cross_attention=True)
    print(f"rank {rank}: from_pretrained returned", flush=True)
    return check(model, folder[0], rank)


def check(model, folder: str, rank: int) -> int:
    """All ranks hold the same full weights, and the ones in the checkpoint match it."""
    import torch
    import torch.distributed as dist

    import deepspeed
    from safetensors.torch import load_file

    saved = {}
    path = os.path.join(folder, "model.safetensors")
    if os.path.exists(path):
        saved = load_file(path)
    else:
        saved = torch.load(os.path.join(folder, "pytorch_model.bin"), map_location="cpu")
    params = sorted(model.named_parameters(), key=lambda kv: kv[0])
    sums, mismatched = [], []
    for name, p in params:
        with deepspeed.zero.GatheredParameters([p]):
            full = p.detach().float().cpu()
            sums.append(float(full.double().sum()))
            key = name if name in saved else name.replace("bert.", "", 1)
            if key in saved and not torch.allclose(saved[key].float(), full):
                mismatched.append(name)
    local = torch.tensor(sums, dtype=torch.float64, device="cuda" if torch.cuda.is_available() and
                         os.environ.get("DS_ACCELERATOR", "cuda") != "cpu" else "cpu")
    reference = local.clone()
    dist.broadcast(reference, src=0)
    same = torch.equal(local, reference)
    dist.barrier()
    if mismatched:
        print(f"rank {rank}: {len(mismatched)} loaded weights differ from the checkpoint, e.g. {mismatched[0]}")
        return 1
    if not same:
        print(f"rank {rank}: weights differ from rank 0 after from_pretrained", flush=True)
        return 1
    print(f"rank {rank}: ok ({len(params)} parameters identical on all ranks)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
