"""Transformers x Accelerate 1.0: the Trainer cannot be built (``Accelerator.__init__() got an
unexpected keyword argument 'dispatch_batches'``) with transformers up to 4.39.3 (find-fix).

Source: https://github.com/huggingface/accelerate/pull/3098  "The Great Deprecation" (79a84264,
        first in accelerate v1.0.0) removed ``Accelerator``'s ``dispatch_batches``,
        ``even_batches`` and ``use_seedable_sampler`` arguments, deprecated since accelerate 0.28.0
        by https://github.com/huggingface/accelerate/pull/2441 (``DataLoaderConfiguration``).
        transformers' ``Trainer.create_accelerator_and_postprocess`` passed them as keywords:
        4.3x up to 4.37.2 as ``Accelerator(dispatch_batches=..., split_batches=..., ...)``, 4.38.0
        to 4.39.3 as ``**AcceleratorConfig().to_dict()`` (PR #28664, which holds all four).
        https://github.com/huggingface/transformers/pull/29779 "Silence deprecations and use the
        DataLoaderConfig" (4.40.0) builds a ``DataLoaderConfiguration`` when accelerate >= 0.28.
        The TypeError is what an older transformers meets after an upgrade of accelerate to 1.x.

Truth (kind: fix, --find-fix, with accelerate 1.0.1 held): last broken 4.39.3, first fixed 4.40.0
  (#29779).  Commit: not established here (the transformers history is too large to fetch in
  this environment).
How established: the released wheels' trainer.py: 4.37.2 ``Accelerator(dispatch_batches=...``;
  4.38.0 - 4.39.3 ``Accelerator(..., **accelerator_kwargs)`` with the AcceleratorConfig dict
  (``TrainingArguments.__post_init__`` sets ``AcceleratorConfig()`` when none is given); 4.40.0
  ``if is_accelerate_available("0.28.0"): dataloader_config = DataLoaderConfiguration(...)``;
  ``git show v1.0.0:src/accelerate/accelerator.py`` has no dispatch_batches argument, v0.34.2
  has it; and the script by hand (docs/results/zoo-round3-cpu.md).

Environment: CPU, 1 process (torchrun --nproc_per_node 1), < 1 GB, tens of seconds a run (mostly
imports).  A tiny BERT from a config, no downloads.  The matrix pins accelerate==1.0.1.

Check: build a Trainer and train 2 steps.  Exit 0 if it trains; the broken releases raise the
TypeError in Trainer.__init__ (exit 1).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.parse_args()

    import torch

    import accelerate
    import transformers
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"accelerate {accelerate.__version__}", flush=True)
    cfg = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=32, num_labels=2)
    torch.manual_seed(0)
    model = BertForSequenceClassification(cfg)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 64, (8, 8), generator=g)
    labels = torch.randint(0, 2, (8,), generator=g)

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return {"input_ids": ids[i], "labels": labels[i]}

    out = os.path.join(os.environ.get("DSBISECT_RUN_DIR") or tempfile.mkdtemp(), "trainer-out")
    targs = TrainingArguments(output_dir=out, per_device_train_batch_size=4, max_steps=2,
                              save_strategy="no", report_to=[], disable_tqdm=True, use_cpu=True,
                              seed=0)
    trainer = Trainer(model=model, args=targs, train_dataset=Data())
    result = trainer.train()
    print(f"trained {result.global_step} steps, loss {result.training_loss:.4f}", flush=True)
    print("ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
