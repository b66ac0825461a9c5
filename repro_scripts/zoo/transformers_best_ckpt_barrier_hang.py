"""Transformers: with ``load_best_model_at_end`` only rank 0 knows the best checkpoint, and the end
of training deadlocks in a barrier the other ranks never enter (find-fix, a hang).

Issue / PR:
    https://github.com/huggingface/transformers/pull/40923  "Wait for main process in
        _save_checkpoint to ensure best checkpoint exists" (merged 2025-09-17): "In 4.50.0 a bug was
        introduced ... when we try to load the best model at end and a non-main process has a null
        self.state.best_model_checkpoint ... only the main process enters the if statement and the
        dist.barrier causes it to wait forever for process 1".  (Also reported downstream:
        huggingface/optimum-habana#2230, transformers#37025.)
    The cause: https://github.com/huggingface/transformers/pull/35885 ("Fix/best model checkpoint
        fix", 4.50.0) moved setting ``best_model_checkpoint`` into ``_save_checkpoint`` and sets it
        only ``if os.path.exists(best_checkpoint_dir)``, checked right after ``save_model``: only
        rank 0 saves the model, and nothing makes the other ranks wait for it, so a rank that gets
        there before rank 0 has created the folder keeps ``best_model_checkpoint = None``.  At the
        end of training ``if args.load_best_model_at_end and self.state.best_model_checkpoint is
        not None: dist.barrier()`` -- rank 0 waits in the barrier, rank 1 goes on into
        ``store_flos``'s all-gather: a deadlock.

Truth (kind: hang, --find-fix): last hanging release 4.56.2, first fixed 4.57.0 (yanked on PyPI,
  "Error in the setup causing installation issues"; its wheel installs and runs here), hence
  ``--include-yanked`` in the command; without it the first fixed release is 4.57.1.  The bug is
  in every release from 4.50.0 (#35885) to 4.56.2.  Commit: not established here (the
  transformers history is too large to fetch here).
How established: the released wheels' ``Trainer._save_checkpoint``: 4.49.0 has no
  ``best_global_step``; 4.50.0 .. 4.56.2 check ``os.path.exists(best_checkpoint_dir)`` with no
  barrier before it; 4.57.0 has #40923's ``dist.barrier()`` ("Wait for everyone to get here so we
  are sure the model has been saved by process 0 before we check if the best_checkpoint_dir
  exists") just before the check; and this script, run by hand on 4.56.2 (hang) and 4.57.0 (pass).

The race made deterministic: rank 0's ``_save`` waits ``SAVE_DELAY_S`` before writing (a slow disk
or a large model), so rank 1 always reaches the existence check first -- the order PR #40923
describes.  Nothing else is changed in the Trainer.

Environment: CPU only, 2 ranks (torchrun, gloo DDP), < 1 GB; a pass takes ~20 s, a hang is found
after the collective timeout (the case sets 30 s, passed on as ``ddp_timeout``).

Check: a tiny BERT, 2 training steps, one evaluation and one checkpoint at step 2,
``load_best_model_at_end=True``; training must end on every rank with the same
``best_model_checkpoint``.  Exit 0 if so; the bad releases hang (rank 0 in the end-of-training
barrier, rank 1 in store_flos's all-gather).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

SAVE_DELAY_S = 3.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.parse_args()

    import torch

    import transformers
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    timeout = int(float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "60")))
    out = os.path.join(os.environ.get("DSBISECT_RUN_DIR") or tempfile.gettempdir(),
                       f"trainer-out-{os.environ.get('MASTER_PORT', '0')}")
    targs = TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=2,
        per_device_eval_batch_size=2,
        max_steps=2,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="steps",
        save_steps=2,
        load_best_model_at_end=True,
        logging_steps=1000,
        report_to=[],
        ddp_backend="gloo",
        ddp_timeout=timeout,
        dataloader_num_workers=0,
        disable_tqdm=True,
        use_cpu=True,
        seed=0,
    )
    rank = targs.process_index
    print(f"rank {rank}/{targs.world_size}: torch {torch.__version__}, transformers {transformers.__version__}",
          flush=True)
    if targs.world_size < 2:
        print("needs at least 2 ranks", flush=True)
        return 125

    cfg = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=32, num_labels=2)
    torch.manual_seed(0)
    model = BertForSequenceClassification(cfg)

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return {"input_ids": torch.randint(0, 64, (8,), generator=g), "labels": torch.tensor(i % 2)}

    class SlowSaveTrainer(Trainer):
        def _save(self, output_dir=None, state_dict=None):
            if self.args.process_index == 0:
                time.sleep(SAVE_DELAY_S)  # rank 0 writes the checkpoint late: rank 1 checks first
            return super()._save(output_dir, state_dict=state_dict)

    trainer = SlowSaveTrainer(model=model, args=targs, train_dataset=Data(), eval_dataset=Data())
    trainer.train()  # 4.50.0 .. 4.56.2: rank 0 waits in the load-best barrier, rank 1 in store_flos
    best = trainer.state.best_model_checkpoint
    print(f"rank {rank}: training done, best_model_checkpoint {best}", flush=True)
    bests = [None] * targs.world_size
    torch.distributed.all_gather_object(bests, best)
    torch.distributed.destroy_process_group()
    if best is None or len(set(bests)) != 1:
        raise AssertionError(f"the ranks' best_model_checkpoint differ: {bests}")
    print(f"rank {rank}: ok", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown after the verdict (see accelerate_main_process_first.py)
