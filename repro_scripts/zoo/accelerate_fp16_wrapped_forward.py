"""Accelerator(mixed_precision="fp16").prepare() fails on a model whose forward was replaced by a
plain function (AttributeError: 'function' object has no attribute '__func__'; one GPU).

Issue / PR:
    https://github.com/huggingface/accelerate/pull/1492  (the cause, "adjust overriding of model's
        forward function": prepare() wraps `model.forward.__func__` in autocast and binds it with
        types.MethodType; its review: "looks like this breaks in mixed precision settings")
    https://github.com/huggingface/accelerate/pull/1637  (the fix, "fix autocasting bug": use
        model.forward itself when it has no __func__)
    Reports: https://github.com/axolotl-ai-cloud/axolotl/issues/195,
        https://github.com/ExponentialML/Text-To-Video-Finetuning/issues/83 ("'function' object has
        no attribute '__func__'" in accelerator.prepare after an update of accelerate)
Truth: last good 0.19.0, first bad 0.20.0, commit b7d5d9072accf882b83be665b82953a1aea91f32 (#1492);
    fixed in 0.21.0 (b76409ba, #1637).
How established:
    `git tag --contains` on the accelerate history: b7d5d907 (#1492) first in v0.20.0, b76409ba
    (#1637) first in v0.21.0; src/accelerate/accelerator.py has `model.forward.__func__` in v0.20.0
    .. v0.20.3 and not in v0.12.0 .. v0.19.0, which wrap `model.forward` itself.
Kind: fail.
Environment: one CUDA GPU (accelerate refuses fp16 mixed precision without one), 1 process, not
    distributed (the script drops torchrun's variables: under DDP the wrapper's bound forward hides
    the bug); accelerate < 0.21 imports pkg_resources (setuptools < 82).  The same line breaks on the
    CPU with bf16 (checked by hand on 0.19.0 / 0.20.3 / 0.21.0), but the case uses fp16, the GPU path.  Without CUDA the script
    exits 125.

A Linear model whose forward a library has wrapped in a plain function (as monkey-patching
libraries do), prepared with fp16 mixed precision, then one forward pass: exit 0 when prepare()
returns and the forward runs under autocast (fp16 inside, fp32 out).
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU: untestable here", file=sys.stderr)
        return 125
    import accelerate
    from accelerate import Accelerator

    print(f"torch {torch.__version__}, accelerate {accelerate.__version__}, {torch.cuda.get_device_name()}, "
          f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
    # A single-process run, as `python train.py` starts it.  dsbisect's 1-rank run sets torchrun's
    # variables; under them accelerate (DistributedType.MULTI_GPU) wraps the model in DDP, whose
    # forward is a bound method, and the plain function below never reaches the broken line (seen
    # on the H200: 0.20.3 passed).
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(k, None)
    acc = Accelerator(mixed_precision="fp16")
    model = torch.nn.Linear(16, 16)
    inner = model.forward
    seen = {}

    def forward(x):  # a plain function, not a bound method: no __func__
        out = inner(x)
        seen["dtype"] = out.dtype
        return out

    model.forward = forward
    model = acc.prepare(model)
    y = model(torch.randn(4, 16, device=acc.device))
    print(f"inside: {seen.get('dtype')}, out: {y.dtype}", flush=True)
    if seen.get("dtype") != torch.float16:
        print(f"AutocastError: the wrapped forward ran in {seen.get('dtype')}, not under fp16 autocast", file=sys.stderr)
        return 1
    print("OK: prepared and ran under fp16 autocast", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
