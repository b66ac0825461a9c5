"""Accelerate 0.32.0: a full ``gc.collect()`` for every tensor an offload hook moves (a slowdown).

Issue:  https://github.com/huggingface/accelerate/pull/2914  "Fix slowdown on init with
        `device_map="auto"`" (the fix's own title names the symptom).
Cause:  https://github.com/huggingface/accelerate/pull/2857  "Fix get_backend bug and add
        clear_device_cache function" (8330b375, first in 0.32.0): ``set_module_tensor_to_device``
        calls ``clear_device_cache()``, which begins with ``gc.collect()``, whenever the target
        device is not ``"cpu"``.  The offload hooks move every offloaded weight to the execution
        device before each forward (a ``torch.device``, not the string ``"cpu"``) and to ``"meta"``
        after it (``AlignDevicesHook``), so each forward runs two full collections per weight (16
        for 8 layers, counted with ``gc.callbacks``), each costing in proportion to the live
        Python objects (~170 000 here, most of them torch's own).
Fix:    https://github.com/huggingface/accelerate/pull/2914  (9726538b, first in 0.32.1): the
        collection became opt-in (``clear_cache=False`` by default).

Truth (kind: metric, speed; a regression and its fix): last good 0.31.0, first bad 0.32.0, first
  fixed 0.32.1.  Measured by hand: docs/results/metric-zoo-truth.json.

Metric: ``step_ms``: the wall time of each of ``--steps`` forwards of a stack of ``--layers``
  linear layers under ``accelerate.cpu_offload`` (execution on the CPU), with ``--objects`` live
  Python objects kept on the side, as a training job has; a JSON line per forward
  (``{"step": N, "step_ms": T}``) to the file named by ``DSBISECT_METRICS`` when set, and
  printed.  Under a millisecond at the good end, seconds at the bad end.
    dsbisect bisect accelerate 0.31.0 0.32.0 --matrix repro_scripts/zoo/matrix.yaml \
        --case accelerate_offload_gc_speed --metric step_ms --worse-if 'higher by 50%'
  No assertion: the script exits 0 whatever the number.

Environment: CPU, 1 process (torchrun --nproc_per_node 1), < 1 GB, ~10 s per run at the good end, ~30 s at the
bad.  Pins:
numpy < 2 (accelerate 0.32 requires it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


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
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--objects", type=int, default=50_000)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()

    import torch

    import accelerate
    from accelerate import cpu_offload

    print(f"torch {torch.__version__}, accelerate {accelerate.__version__}", flush=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64, bias=False) for _ in range(args.layers)]).eval()
    cpu_offload(model, execution_device=torch.device("cpu"))
    live = [[i] for i in range(args.objects)]  # what a real job keeps alive: a collection walks it
    x = torch.randn(4, 64)
    with torch.no_grad():
        model(x)  # warm-up
        for step in range(1, args.steps + 1):
            t0 = time.perf_counter()
            model(x)
            emit({"step": step, "step_ms": round((time.perf_counter() - t0) * 1000, 3)})
    print(f"{len(live)} live objects kept", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
