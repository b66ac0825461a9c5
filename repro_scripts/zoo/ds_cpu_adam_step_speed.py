"""DeepSpeed 0.5.5: ``DeepSpeedCPUAdam.step`` about 15 times slower (the SIMD path lost).

Issue:  https://github.com/deepspeedai/DeepSpeed/issues/1697  "DeepSpeedCPUAdam becomes much
        slower after the commit 8abdaee": ``optimizer_step`` 86 ms in 0.5.3 and 1 322 ms in 0.5.8
        in the reporter's wall_clock_breakdown lines; "0.5.3 = 0.5.4 << 0.5.5 = 0.5.7".  A
        maintainer names the cause and the fix (259936a, "included in version 5.10").
Cause:  https://github.com/deepspeedai/DeepSpeed/pull/1358  "Add cpu adagrad" (8abdaee2, first in
        0.5.5): the SIMD helpers of ``cpu_adam.cpp`` moved into the shared ``csrc/includes/simd.h``.
Fix:    https://github.com/deepspeedai/DeepSpeed/pull/1637  "Fix cpu-adam AVX performance"
        (259936a7, ``csrc/includes/simd.h``; ``git tag --contains``: first in v0.5.9, where the
        maintainer said 0.5.10).

Truth (kind: metric, speed; a regression and its fix): last good 0.5.4, first bad 0.5.5, first
  fixed 0.5.9 or 0.5.10 (to be settled by the run).  Status: ready script, NOT measured here --
  see docs/results/metric-zoo.md: the 0.5.x op includes cuda_runtime_api.h, cublas_v2.h and
  curand.h and links cudart (CPUAdamBuilder derives from CUDAOpBuilder), so it builds only where
  CUDA is installed, and deepspeed 0.5.x imports ``torch._six`` (gone in torch 2.0).

Metric: ``step_ms``: the wall time of each of ``--steps`` ``DeepSpeedCPUAdam.step()`` calls over
  ``--params`` million fp32 parameters (one tensor, gradients fixed), a JSON line per step
  (``{"step": N, "step_ms": T}``) to the file named by ``DSBISECT_METRICS`` when set, and printed;
  the first step (the op's first use) is left out.
    dsbisect bisect deepspeed 0.5.4 0.5.5 --matrix repro_scripts/zoo/matrix.yaml \
        --case ds_cpu_adam_step_speed --metric step_ms --worse-if 'higher by 50%'
  No assertion: the script exits 0 whatever the number.

Environment: a machine with CUDA 11 (nvcc, to JIT-build the op; the step itself runs on the CPU),
torch 1.8-1.10 of the same CUDA, Python 3.8/3.9, 1 process (no distributed set-up is needed);
OMP_NUM_THREADS as the machine's cores (the step is OpenMP-parallel).  ~1 GB for 50 M parameters.
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
    ap.add_argument("--params", type=float, default=50.0, help="millions of fp32 parameters")
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()

    import torch

    import deepspeed
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    print(f"torch {torch.__version__}, deepspeed {deepspeed.__version__}, "
          f"{torch.get_num_threads()} threads", flush=True)
    torch.manual_seed(0)
    param = torch.nn.Parameter(torch.randn(int(args.params * 1e6)))
    param.grad = torch.randn_like(param) * 1e-3
    optimizer = DeepSpeedCPUAdam([param], lr=1e-3)
    optimizer.step()  # builds / loads the op
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        optimizer.step()
        emit({"step": step, "step_ms": round((time.perf_counter() - t0) * 1000, 3)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
