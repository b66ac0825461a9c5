"""Accelerate: ``save_state``/``load_state`` round trip of a model with tied (shared) weights.

Issue:  https://github.com/huggingface/accelerate/issues/2807  "save_state removes shared weights
        but load_state cannot load properly" (reported on 0.27.2: "the code was working with the
        previous versions"); also https://github.com/huggingface/accelerate/issues/2155.
Cause:  https://github.com/huggingface/accelerate/pull/2120  "Make safetensors the default":
        ``save_state`` writes ``model.safetensors``, from which ``clean_state_dict_for_safetensors``
        drops the second name of a shared tensor; ``load_state`` then calls the model's strict
        ``load_state_dict`` -> ``RuntimeError: Error(s) in loading state_dict ... Missing key(s)``.
Fix:    https://github.com/huggingface/accelerate/pull/2875  "Correct loading of models with
        shared tensors when using accelerator.load_state()" (``safetensors.torch.load_model``).

Truth (kind: fail as a regression, fix for --find-fix):
  regression: last good 0.24.1, first bad 0.25.0, commit e638b1e21a52aa6b7846ce4b753401e1a1bcbfad
    (#2120; 41st of the 61 first-parent commits v0.24.0..v0.25.0);
  fix: last bad 0.32.1, first fixed 0.33.0, commit f4f1260a0edc9e2cd4209d555d421d8def2774a0
    (#2875; 10th of the 19 first-parent commits v0.32.0..v0.33.0).
How established: ``git tag --contains e638b1e2`` -> v0.25.0 first; ``git tag --contains
  f4f1260a`` -> v0.33.0 first; ``git show v0.25.0:src/accelerate/checkpointing.py`` has
  ``safe_serialization: bool = True`` and ``load_file`` + ``load_state_dict``, v0.33.0 has
  ``load_model``; and the script: 0.24.1 and 0.33.0 pass, 0.25.0 and 0.32.1 fail.

Environment: CPU, 1 process (torchrun --nproc_per_node 1), no GPU, < 1 GB, 7-11 s per run (most
of it the launcher).  The accelerate wheels are 250-320 KB each; safetensors and huggingface-hub
come from the index; from 0.32.0 accelerate requires numpy < 2 (an 18 MB wheel), so a test-suite
wheelhouse is best kept to 0.22.0 .. 0.28.0 (all pass/fail as above: 0.22.0 passes, 0.28.0 fails).
This is the cheap case meant for dsbisect's own end-to-end test against real PyPI releases.

Check: a tiny model whose output layer shares the embedding's weight, prepared with an SGD
optimizer; ``save_state``; perturb the weights; ``load_state``; the weights must equal the saved
ones and still be tied.  Exit 0 if so; an exception (exit 1) otherwise.
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
    from accelerate import Accelerator

    print(f"torch {torch.__version__}, accelerate {accelerate.__version__}", flush=True)

    class TiedLM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(32, 8)
            self.body = torch.nn.Linear(8, 8)
            self.head = torch.nn.Linear(8, 32, bias=False)
            self.head.weight = self.embed.weight  # tied, as in most language models

        def forward(self, ids):
            return self.head(torch.tanh(self.body(self.embed(ids))))

    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    model = TiedLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)

    ids = torch.randint(0, 32, (4, 6))
    loss = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()

    saved = {k: v.detach().clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
    folder = os.path.join(os.environ.get("DSBISECT_RUN_DIR") or tempfile.mkdtemp(), "state")
    accelerator.save_state(folder)
    print(f"saved: {sorted(os.listdir(folder))}", flush=True)

    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)

    accelerator.load_state(folder)  # 0.25.0 .. 0.32.1: RuntimeError ... Missing key(s) in state_dict
    net = accelerator.unwrap_model(model)
    for k, v in net.state_dict().items():
        if not torch.equal(v, saved[k]):
            raise AssertionError(f"load_state did not restore {k}")
    if net.head.weight.data_ptr() != net.embed.weight.data_ptr():
        raise AssertionError("load_state untied head.weight from embed.weight")
    print("ok: state restored, weights still tied", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
