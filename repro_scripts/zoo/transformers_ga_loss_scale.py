"""Transformers: with gradient accumulation the Trainer's update is GA times too large (4.46.0 - 4.47.1).

Issue:  https://github.com/huggingface/transformers/issues/34263  "New GA fix causes training loss
        multiple times higher across the board (5x to 10x higher)" (on 4.46.0); also
        https://github.com/huggingface/transformers/issues/37766 (on 4.47.1, "if model does not
        accept loss_kwargs ... when gradient_accumulation_steps > 1 ... an increased loss") and
        the LLaMA-Factory workaround https://github.com/hiyouga/LLaMA-Factory/issues/6211.
Cause:  the gradient-accumulation rework of https://github.com/huggingface/transformers/pull/34191
        ("Fix Gradient Accumulation issue", 4.46.0).  For a model that does not take
        ``num_items_in_batch`` (here BertForSequenceClassification, whose loss is a per-micro-batch
        mean) the accumulated gradient becomes the *sum* of the micro-batch means: GA times the
        4.45 update.  4.46.0/4.46.1 do ``loss *= gradient_accumulation_steps`` before
        ``accelerator.backward`` (which divides by GA); 4.46.2 - 4.47.1 drop the multiplication but
        no longer give accelerate the GA count, so nothing divides: same factor.  The same holds
        under DeepSpeed, whose engine does its own GA division.
Fix:    4.48.0: ``get_batch_samples`` returns ``num_items_in_batch=None`` for models without loss
        kwargs ("Keep default behavior the same") and ``training_step`` divides the loss by GA
        before backward -- https://github.com/huggingface/transformers/pull/35207 "Scale loss
        before backward" (its thread compares 4.45.2 with 4.47).

Truth (kind: fail; tempting wrong answer): last good 4.45.2, first bad 4.46.0 -- which PyPI has
  YANKED ("does not work with 3.8") -- so the first bad release among installable ones is 4.46.1;
  bad through 4.47.1; first fixed 4.48.0.  Commits: not established here (the transformers history
  is too large to fetch in this environment); the fix PR attribution is the weakest part (several
  GA PRs landed between 4.46.2 and 4.48.0), the release-level truth is measured.
How established: the released wheels' ``Trainer.training_step``/``get_batch_samples``/accelerator
  set-up (above), PyPI's simple index (4.46.0 yanked), and the script on every release from 4.45.2
  to 4.49.0: ratio 1.000 on 4.45.2, 4.48.0, 4.49.0; 2.000 (GA = 2) on 4.46.0, 4.46.1, 4.46.2,
  4.46.3, 4.47.0, 4.47.1.  A bisection that leaves yanked releases out (dsbisect's default) can at
  best answer "first bad 4.46.1"; the right answer names 4.46.0.

Environment: CPU, 1 process (torchrun --nproc_per_node 1), < 1 GB, ~22 s per run.  Tiny BERT from a
config, no downloads.

Metric form (``--metric-only``, issue 38): the same job asserts nothing and exits 0; it writes
  ``{"step": 1, "update_ratio": R, "loss": L}`` as a JSON line to the file named by
  ``DSBISECT_METRICS`` when set (and prints it): R the ratio below, L the Trainer's training loss.
    dsbisect bisect transformers 4.45.2 4.46.3 --matrix repro_scripts/zoo/matrix.yaml \
        --case transformers_ga_loss_scale_metric --metric update_ratio --worse-if 'differs by 5%'

Check: one optimizer step (SGD, lr 1, no clipping, no dropout) over 8 samples as 2 micro-batches
of 4 (GA = 2); the parameter change must equal -lr times the gradient of the mean loss over the
8 samples, computed by hand on a copy of the model.  The ratio of the two (projected) must be 1
(+-1 %); the bad releases give 2.  Exit 0 if so; an exception (exit 1) otherwise.
"""

from __future__ import annotations

import argparse
import copy
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
    ap.add_argument("--ga", type=int, default=2)
    ap.add_argument("--metric-only", action="store_true", help="report the numbers, assert nothing")
    args = ap.parse_args()

    import torch

    import transformers
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    print(f"torch {torch.__version__}, transformers {transformers.__version__}", flush=True)
    mb = 4
    n = mb * args.ga
    cfg = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=32, num_labels=2,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = BertForSequenceClassification(cfg)

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 64, (n, 8), generator=g)
    labels = torch.randint(0, 2, (n,), generator=g)

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return n

        def __getitem__(self, i):
            return {"input_ids": ids[i], "labels": labels[i]}

    # The update one optimizer step should make: -lr * d(mean loss over all n samples)/dw.
    ref = copy.deepcopy(model).train()
    ref(input_ids=ids, labels=labels).loss.backward()
    expected = torch.cat([p.grad.flatten() for p in ref.parameters()]) * -1.0
    before = torch.cat([p.detach().flatten() for p in model.parameters()]).clone()

    out = os.path.join(os.environ.get("DSBISECT_RUN_DIR") or tempfile.mkdtemp(), "trainer-out")
    targs = TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=mb,
        gradient_accumulation_steps=args.ga,
        max_steps=1,
        learning_rate=1.0,
        lr_scheduler_type="constant",
        optim="sgd",
        weight_decay=0.0,
        max_grad_norm=0.0,  # no clipping: it would hide the scale
        save_strategy="no",
        report_to=[],
        logging_steps=1,
        disable_tqdm=True,
        use_cpu=True,
        seed=0,
    )
    result = Trainer(model=model, args=targs, train_dataset=Data()).train()

    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    delta = after - before
    ratio = float(torch.dot(delta, expected) / torch.dot(expected, expected))
    rel = float((delta - ratio * expected).norm() / expected.norm())
    print(f"update / expected update = {ratio:.4f} (off-direction residue {rel:.2e})", flush=True)
    if args.metric_only:
        emit({"step": 1, "update_ratio": round(ratio, 6), "loss": round(float(result.training_loss), 6)})
        return 0
    if abs(ratio - 1.0) > 0.01 or rel > 0.01:
        raise AssertionError(f"gradient accumulation scaled the update by {ratio:.3f} (expected 1.000)")
    print("ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
