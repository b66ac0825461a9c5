#!/usr/bin/env bash
# A 1-GPU bisection of a number (issue 38): peak CUDA memory, measured by dsbisect's start-up
# hook (torch.cuda.max_memory_allocated at each rank's exit), over toy releases built here whose
# 3.2.0 allocates 256 MiB more CUDA memory than 3.1.0.  No network: the toy wheels are written
# locally (tests/toypkg.py), point venvs are layered on this machine's python, which has torch
# with CUDA, and every install is --offline --find-links.
#
# Needs: one CUDA GPU; python3 with torch (CUDA); dsbisect's own dependencies importable, or a
# folder of their wheels in $TOOL (default .gpu/tool), made on a machine with a network by
#   dsbisect snapshot-base -o base.json                                   # on the GPU machine
#   dsbisect prefetch --no-cases --tool --dest .gpu/tool --base-snapshot base.json \
#       --python-version 3.12 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
#
# Usage, from the repository root:  OUT=/some/dir bash docs/results/gpu_metric.sh
# Writes $OUT/gpu-metric.log (the transcript), $OUT/gpu-metric.json (dsbisect's JSON),
# $OUT/gpu-metric.md (the Markdown report from the store) and $OUT/gpu-metric-runs.tgz (the runs'
# records and logs).  Expected: "found", last good 3.1.0, first bad 3.2.0, peak_gpu_mem up by
# about 268 MB (256 MiB) at 3.2.0.
set -u
OUT=${OUT:-/tmp/gpu-metric}
TOOL=${TOOL:-.gpu/tool}
W=$(mktemp -d /tmp/gpu-metric.XXXXXX)
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu-metric.log") 2>&1
export PYTHONUNBUFFERED=1

python3 -c "import torch, sys; assert torch.cuda.is_available(), 'no CUDA'; print('torch', torch.__version__, torch.cuda.get_device_name(0))" || exit 3
if ! python3 -c "import typer, rich, packaging, uv, pydantic, yaml, platformdirs, psutil, filelock, pypi_simple" 2>/dev/null; then
  [ -d "$TOOL" ] || { echo "dsbisect's dependencies are missing and there is no $TOOL to install them from (see the header)"; exit 3; }
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" "$TOOL"/*.whl || exit 3
  export PATH="$W/site/bin:$PATH"
fi
export PYTHONPATH="$W/site:$PWD/src:$PWD/tests"

# The toy releases and a one-case matrix: 1 rank on the GPU, dsbisect's own rank start (no launcher).
python3 - "$W" <<'EOF' || exit 3
import sys
from pathlib import Path
import toypkg
w = Path(sys.argv[1])
toypkg.build_wheelhouse(w / "wh", {"3.0.0": "ok", "3.1.0": "ok", "3.2.0": "cuda256", "3.3.0": "cuda256"},
                        dist="dsb-cuda")
toypkg.write_repro(w)
(w / "matrix.yaml").write_text("""\
defaults:
  collective_timeout: 60
  timeout: 300
  accelerator: cuda
  nproc: 1
  launcher: direct
  env: {OMP_NUM_THREADS: "1"}
cases:
  toy:
    script: toy_repro.py
    axes:
      dsb-cuda: ["3.0.0"]
""")
EOF

cd "$W" || exit 3
ARGS=(bisect dsb-cuda 3.0.0 3.3.0 --case toy --matrix matrix.yaml --offline --find-links "$W/wh"
      --cache-dir "$W/cache" --metric peak_gpu_mem --worse-if 'higher by 100 MiB')
echo "== $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg): dsbisect ${ARGS[*]}"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
python3 -m dsbisect "${ARGS[@]}" --format json -o "$OUT/gpu-metric.json" > /dev/null
rc=$?
echo "== exit $rc at $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 -m dsbisect "${ARGS[@]}" --format markdown -q -o "$OUT/gpu-metric.md" > /dev/null   # from the store: nothing runs
python3 -m dsbisect "${ARGS[@]}" -q                                                           # the table, into the log
tar czf "$OUT/gpu-metric-runs.tgz" -C "$W" --exclude='*.whl' $(cd "$W" && find .dsbisect \( -name run.json -o -name '*.log' -o -name '*.json' \) -size -2M) 2>/dev/null
python3 - "$OUT/gpu-metric.json" <<'EOF'
import json, sys
out = json.load(open(sys.argv[1]))
print("verdict", out["verdict"], "last good", out["last_good"], "first bad", out["first_bad"])
for p in out["numbers"]["points"]:
    print(f"  {p['label']}: peak_gpu_mem median {p['median']:.1f} {out['numbers']['unit']} over {len(p['values'])} runs, {p['call']}")
ok = (out["verdict"], out["last_good"], out["first_bad"]) == ("found", "3.1.0", "3.2.0")
print("AS EXPECTED" if ok else "NOT AS EXPECTED")
sys.exit(0 if ok else 1)
EOF
