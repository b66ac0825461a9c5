"""A tiny Llama trained by transformers' Trainer under DDP, configured as transformers' example
scripts are: every TrainingArguments field is a command-line option (HfArgumentParser).

With ``--gradient_checkpointing=true`` and ``--ddp_find_unused_parameters=true`` together, the
first backward raises ``RuntimeError: Expected to mark a variable ready only once`` on every rank:
transformers (4.x) checkpoints with ``use_reentrant=True`` by default, the checkpointed layers'
parameters are not in the autograd graph DDP walks after the forward, so DDP marks them ready as
unused, then the recomputation in the backward marks them again.  Either setting alone trains
(the Trainer turns ``find_unused_parameters`` off by itself when checkpointing); the workarounds
the trackers give are ``--gradient_checkpointing_kwargs '{"use_reentrant": false}'`` or
``--ddp_find_unused_parameters=false``.  See docs/how-to/settings.md.

Run with two ranks on CPU (gloo)::

    torchrun --nproc_per_node 2 train.py --max_steps 3 --report_to none \
        --gradient_checkpointing=true --ddp_find_unused_parameters=true
"""

import torch
from transformers import HfArgumentParser, LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    """Random token sequences, the same on every rank (seeded): a causal LM's own labels."""

    def __init__(self, n: int = 64, length: int = 32, vocab: int = 256) -> None:
        gen = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=gen)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    (args,) = HfArgumentParser((TrainingArguments,)).parse_args_into_dataclasses()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    model = LlamaForCausalLM(config)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens())
    result = trainer.train()
    if args.process_index == 0:
        print(f"trained {result.global_step} steps, loss {result.training_loss:.4f}")


if __name__ == "__main__":
    main()
