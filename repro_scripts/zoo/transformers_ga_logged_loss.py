"""Transformers 4.48.0: with gradient accumulation the Trainer logs a training loss GA times too large.

Issue:  https://github.com/huggingface/transformers/issues/35787  "Significant Increase in Training
        Loss after Upgrading from Transformers 4.47.1 to 4.48.0"; and
        https://github.com/huggingface/transformers/issues/35663 (by the author of the cause: "in my
        previous PR #35438, I accidentally inherited the typo in #34915 ... This caused the training
        loss of models with `loss_kwargs` to become very large once the gradient accumulation is
        enabled").
Cause:  https://github.com/huggingface/transformers/pull/35438  "Pass correct `num_items_in_batch`
        value into the training_step function" (4.48.0): ``training_step`` divides the loss it
        returns (the logged one) by GA only ``if num_items_in_batch is None``, which is now never
        the case, so a model that takes ``num_items_in_batch`` (LlamaForCausalLM) has its per-step
        figures summed over the micro-batches, not averaged.
Fix:    https://github.com/huggingface/transformers/pull/35651  "Fix condition when GA loss bug fix
        is not performed" (fixes #35649): the condition becomes ``if not
        self.model_accepts_loss_kwargs and self.compute_loss_func is None``.

Truth (kind: metric, a regression and its fix): last good 4.47.1, first bad 4.48.0, first fixed:
  see docs/results/metric-zoo-truth.json (measured on the 4.48.x patches).

Metric: ``loss`` at each logged step, written as JSON lines (``{"step": N, "loss": L}``) to the
  file named by ``DSBISECT_METRICS`` when set, and printed the same way on stdout; the Trainer's
  own ``{'loss': ...}`` dicts are printed too.  Exact on CPU with the fixed seeds: the bad end
  logs GA (= 4) times the good end's loss.
    dsbisect bisect transformers 4.47.1 4.48.0 --matrix repro_scripts/zoo/matrix.yaml \
        --case transformers_ga_logged_loss --metric loss@step1 --worse-if 'differs by 5%'
  No assertion: the script exits 0 whatever the number.

Environment: CPU, 1 process (torchrun --nproc_per_node 1), < 1 GB, ~20 s per run.  A tiny
LlamaForCausalLM from a config (2 layers, hidden 64, vocab 256), random token rows; no downloads.
Pins as for transformers_ga_loss_scale: accelerate 1.2.1, huggingface-hub < 0.28.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile


def emit(record: dict) -> None:
    """One JSON line: on stdout, and appended to $DSBISECT_METRICS when it is set."""
    line = json.dumps(record)
    print(line, flush=True)
    path = os.environ.get("DSBISECT_METRICS")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    ap.add_argument("--ga", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()

    import torch

    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

    print(f"torch {torch.__version__}, transformers {transformers.__version__}", flush=True)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(1)
    rows = torch.randint(0, 256, (64, 16), generator=g)

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return len(rows)

        def __getitem__(self, i):
            return {"input_ids": rows[i], "labels": rows[i]}

    class Emit(TrainerCallback):
        def on_log(self, targs, state, control, logs=None, **kw):
            if logs and "loss" in logs and state.is_world_process_zero:
                emit({"step": state.global_step, "loss": float(logs["loss"])})

    out = os.path.join(os.environ.get("DSBISECT_RUN_DIR") or tempfile.mkdtemp(), "trainer-out")
    targs = TrainingArguments(
        output_dir=out, per_device_train_batch_size=2, gradient_accumulation_steps=args.ga,
        max_steps=args.steps, learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[],
        disable_tqdm=True, use_cpu=True, seed=0, dataloader_drop_last=True,
    )
    Trainer(model=model, args=targs, train_dataset=Data(), callbacks=[Emit()]).train()
    return 0


if __name__ == "__main__":
    sys.exit(main())
