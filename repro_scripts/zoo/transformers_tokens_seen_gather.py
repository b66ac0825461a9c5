"""Transformers: ``include_num_input_tokens_seen`` all-gathers whole input tensors of unequal sizes.

Issue:  https://github.com/huggingface/transformers/issues/28791  "Inappropriate reduce operation
        of "num_input_tokens_seen" is prone to get training stuck".
Cause:  https://github.com/huggingface/transformers/pull/27274 ("Track the number of tokens seen to
        metrics", 4.36.0) counts tokens with ``accelerator.gather(inputs[main_input_name]).numel()``:
        an all-gather of each rank's whole ``input_ids``, whose lengths differ between ranks
        whenever batches are padded per batch.  A collective over tensors of different sizes:
        NCCL hangs (or reads garbage), gloo aborts the receiving rank
        ("op.preamble.length <= op.nbytes") and the peer then loses its connection.
Fix:    https://github.com/huggingface/transformers/pull/29099 "Fix the behavior of collecting
        'num_input_tokens_seen'" gathers each rank's ``numel()`` instead.

Truth (kind: fail on CPU/gloo, hang on NCCL; --find-fix): last bad 4.39.3, first fixed 4.40.0
  (#29099); the bug exists since 4.36.0 (#27274; 4.35.2 has no ``include_num_input_tokens_seen``).
  Commits: not established here (the transformers history is too large to fetch here).
How established: the released wheels' ``Trainer._inner_training_loop``: 4.36.0 .. 4.39.3
  ``self.accelerator.gather(inputs[main_input_name]).numel()``; 4.40.0 gathers
  ``torch.tensor(inputs[main_input_name].numel())``; PR #29099 says it fixes #28791 (merged
  2024-03-25, between the 4.39 and 4.40 releases).

Environment: CPU, 2 ranks (torchrun, gloo DDP), < 2 GB, ~20 s per run; the same script runs on
2 GPUs (``accelerator: cuda``, NCCL), where the bad releases are expected to hang instead.

Check: 3 training steps, batch size 1 per rank, every sample a different length (so the ranks'
``input_ids`` always differ in size), ``include_num_input_tokens_seen=True``; training must finish
on every rank and ``state.num_input_tokens_seen`` must equal the tokens the ranks' models were fed
(counted by a forward pre-hook, summed over ranks) -- should NCCL let the unequal gather through,
the bad releases count ``world_size * numel`` of the local batch instead.  Exit 0 if so; an
exception (exit 1) otherwise; a hang on NCCL.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()

    import torch

    import transformers
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    timeout = int(float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    cuda = torch.cuda.is_available()
    out = os.path.join(os.environ.get("DSBISECT_RUN_DIR") or tempfile.gettempdir(),
                       f"trainer-out-{os.environ.get('MASTER_PORT', '0')}")
    targs = TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=1,
        max_steps=args.steps,
        include_num_input_tokens_seen=True,
        save_strategy="no",
        logging_steps=1000,
        report_to=[],
        ddp_backend="nccl" if cuda else "gloo",
        ddp_timeout=timeout,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
    )
    rank = targs.process_index
    print(f"rank {rank}/{targs.world_size}: torch {torch.__version__}, transformers {transformers.__version__}",
          flush=True)
    if targs.world_size < 2:
        return 125

    cfg = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64, num_labels=2)
    torch.manual_seed(0)
    model = BertForSequenceClassification(cfg)

    class Data(torch.utils.data.Dataset):  # sample i has 4 + i tokens: no two samples alike
        def __len__(self):
            return 32

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return {"input_ids": torch.randint(0, 64, (4 + i,), generator=g), "labels": torch.tensor(i % 2)}

    local = [0]  # tokens this rank's model was given in training forwards

    def count(module, fwd_args, fwd_kwargs):
        ids = fwd_kwargs.get("input_ids")
        if module.training and ids is not None:
            local[0] += ids.numel()

    model.register_forward_pre_hook(count, with_kwargs=True)
    trainer = Trainer(model=model, args=targs, train_dataset=Data())
    trainer.train()  # 4.36.0 .. 4.39.3: all_gather of input_ids of different lengths
    seen = trainer.state.num_input_tokens_seen
    total = torch.tensor([local[0]], dtype=torch.int64, device=targs.device)
    torch.distributed.all_reduce(total)
    print(f"rank {rank}: num_input_tokens_seen {seen}, tokens fed to the ranks {int(total)}", flush=True)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    if seen != int(total):  # where NCCL lets the unequal gather through, the count is wrong
        raise AssertionError(f"num_input_tokens_seen is {seen}, the ranks were fed {int(total)} tokens")
    print(f"rank {rank}: ok", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown after the verdict (see accelerate_main_process_first.py)
