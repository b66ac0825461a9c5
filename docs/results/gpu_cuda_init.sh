#!/usr/bin/env bash
# STATUS: NOT RUN. No GPU machine was at hand when it was written; no result of it exists yet,
# and nothing in the docs rests on it (on CPU the hook's note is tested with this machine's
# torch: tests/verdict/test_machine.py).
#
# What it checks: a run meant for GPUs whose CUDA cannot be initialised is the machine's (a
# skip), not a failure of the code. A broken node is stood in for by a script that asks for a
# device the driver cannot give (CUDA_VISIBLE_DEVICES=99 set before torch).
# Expected: gone.py a skip, "the machine's: CUDA could not be initialised (rank 0: RuntimeError: …)",
# skip_cause cuda; fine.py a pass.
#
# What it needs:
# - a Linux machine with at least one NVIDIA GPU, its driver (nvidia-smi) and a python3 whose torch
#   is built with CUDA (the point venvs are layered on it); no network;
# - the merged checkout (this branch merged into main), run from the repository root;
# - dsbisect's dependencies as wheels in .gpu/tool/, fetched elsewhere with
#   `pip download --only-binary=:all: --python-version 3.12 -d .gpu/tool typer rich packaging uv
#   pydantic pyyaml platformdirs psutil filelock py-spy pypi-simple`;
# - OUT (default /tmp/dsbisect-cuda-init) for its log and the two runs' JSON.
set -u
OUT=${OUT:-/tmp/dsbisect-cuda-init}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/cuda-init.log") 2>&1
[ -x /tmp/site/bin/uv ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/tool/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/tests PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi -L
work=/tmp/cuda-init && rm -rf "$work" && mkdir -p "$work/house" && cd "$work" || exit 1
# A versioned point for the run (a command line needs one): a toy release built here, offline.
python3 -c "import sys, toypkg; from pathlib import Path; toypkg.build_wheelhouse(Path(sys.argv[1]), {'3.0.0': 'ok'}, dist='dsb-cuda')" "$work/house" || exit 1
cat > gone.py <<'PY'
import os
os.environ["CUDA_VISIBLE_DEVICES"] = "99"  # a device the driver cannot give, as on a broken node
import torch
print(torch.zeros(1, device="cuda"))
PY
cat > fine.py <<'PY'
import torch
print(torch.zeros(1, device="cuda"))
PY
common=(--versions dsb-cuda=3.0.0 --accelerator cuda --nproc 1 --store "$work/store" --cache-dir "$work/cache" --offline --find-links "$work/house")
for s in gone fine; do
  python3 -m dsbisect run "${common[@]}" --format json -- python "$s.py" > "$OUT/$s.json"
  echo "$s: exit $?"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]; print(r['outcome'], '|', r['reason'], '|', r.get('evidence', {}).get('skip_cause'))" "$OUT/$s.json"
done
ls "$work"/store/runs/*/machine/ 2>/dev/null && cat "$work"/store/runs/*/machine/*.json
