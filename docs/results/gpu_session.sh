#!/usr/bin/env bash
# This session's GPU proofs, one stage per device call (outputs under $OUT).  Prepared here:
#   .gpu/tool  dsbisect's own wheels for Python 3.12 (pip download --only-binary ... typer rich ...)
#   .gpu/ds    deepspeed 0.19.8 (DS_BUILD_OPS=0 wheel) and its small dependencies
# Stages:
#   .gpu/seed2 the seed-2 grid's wheels, resolved against the GPU machine's base (stage S wrote it):
#      dsbisect prefetch matrix.yaml --case zero3_from_pretrained --extra 'setuptools<75' --dest .gpu/seed2 \
#        --python-version 3.12 --platform manylinux_2_28_x86_64 --base-snapshot .gpu/base.json
# Stages:
#   S  (any GPU machine) install dsbisect offline; write the base snapshot; pytest -m gpu;
#      the launch benchmark on the machine's GPUs (1 rank per GPU, up to 2)
#   X1 (2 GPUs) the seed-2 transformers bisection from a fresh cache and store, timed, at the
#      default 60 s collective timeout (early deadlock verdict on); the GPU launch and
#      concurrency benchmarks
#   E  (2 GPUs) the second seed as an environment diff (issue 26), in parts: see the stage
#   X2 (2 GPUs) pytest -m gpu: the NCCL hang test, the early deadlock tests and the false-hang
#      battery on NCCL
set -u
stage=${1:?stage}
OUT=${OUT:-/tmp/dsbisect-proof}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/$stage.log") 2>&1
export PYTHONUNBUFFERED=1
# dsbisect's own wheels: .gpu/tool (all of them) or .gpu/toolmin (what the machine's base lacks,
# from `dsbisect prefetch --no-cases --tool --base-snapshot`, plus typer); kept while the machine is warm
[ -x /tmp/site/bin/uv ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site \
  $(ls -d .gpu/toolmin 2>/dev/null || echo .gpu/tool)/*.whl || exit 1
# the seed-2 wheelhouse, copied out of the tree so that a warm machine keeps it for the next stage
[ -d .gpu/seed2 ] && { rm -rf /tmp/wh-seed2; cp -r .gpu/seed2 /tmp/wh-seed2; }
export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH
nvidia-smi -L
case $stage in
  S)
    python3 -m dsbisect snapshot-base -o "$OUT/base.json"
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
    timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/forensics/test_gpu.py tests/forensics/test_early_hang.py -rs 2>&1 | tail -15
    timeout 300 python3 benchmarks/bench.py --gpu --only launch --find-links .gpu/ds --find-links .gpu/tool \
      --gpu-pins deepspeed==0.19.8 --gpu-compat "" --out "$OUT/bench-launch.md"
    ;;
  X1)
    rm -rf /tmp/x1-cache /tmp/x1-store
    t0=$SECONDS
    python3 -m dsbisect bisect transformers 4.36.2 4.39.2 --case zero3_from_pretrained --pin deepspeed==0.9.5 \
      --offline --find-links /tmp/wh-seed2 --cache-dir /tmp/x1-cache --store /tmp/x1-store \
      --format json -o "$OUT/seed2-bisect.json" > /dev/null
    echo "== seed-2 bisection: exit $?, $(( SECONDS - t0 )) s wall from a fresh cache and store"
    python3 -m dsbisect report --store /tmp/x1-store --format json -o "$OUT/seed2-runs.json" > /dev/null
    python3 -m dsbisect bisect transformers 4.36.2 4.39.2 --case zero3_from_pretrained --pin deepspeed==0.9.5 \
      --offline --find-links /tmp/wh-seed2 --cache-dir /tmp/x1-cache --store /tmp/x1-store --format markdown -q \
      -o "$OUT/seed2-bisect.md" > /dev/null
    timeout $(( 560 - SECONDS )) python3 benchmarks/bench.py --gpu --only launch,concurrency \
      --find-links /tmp/wh-seed2 --gpu-pins "deepspeed==0.10.0,pydantic<2" \
      --gpu-compat torch-elastic-socket,numpy-bufsize --out "$OUT/bench-gpu.md"
    ;;
  E)  # (2 GPUs; issue 26) the second seed as an environment diff. The wheelhouse (~120 MiB with the
    # level-2 candidates) is more than one call carries: each call carries one part as .gpu/env-*
    # (prefetch --good-env/--bad-env --with-candidates, split by size) and adds it to /tmp/wh-env,
    # which a warm machine keeps; the call that finds .gpu/env-last runs the bisection.
    mkdir -p /tmp/wh-env; for d in .gpu/env-*; do [ -d "$d" ] && cp -n "$d"/* /tmp/wh-env/; done
    [ -e .gpu/env-last ] || { echo "== wheelhouse part added: $(ls /tmp/wh-env | wc -l) files"; exit 0; }
    rm -rf /tmp/e-cache /tmp/e-store; t0=$SECONDS
    timeout $(( 560 - SECONDS )) python3 -m dsbisect bisect --good-env repro_scripts/envdiff/seed2-good-2024-01.txt \
      --bad-env repro_scripts/envdiff/seed2-bad-2024-05.txt --hold torch --hold typing-extensions \
      --case zero3_from_pretrained --offline --find-links /tmp/wh-env --cache-dir /tmp/e-cache \
      --store /tmp/e-store --format json -o "$OUT/seed2-envdiff.json" > /dev/null
    echo "== seed-2 environment diff: exit $?, $(( SECONDS - t0 )) s wall from a fresh cache and store"
    timeout 60 python3 -m dsbisect bisect --good-env repro_scripts/envdiff/seed2-good-2024-01.txt \
      --bad-env repro_scripts/envdiff/seed2-bad-2024-05.txt --hold torch --hold typing-extensions \
      --case zero3_from_pretrained --offline --find-links /tmp/wh-env --cache-dir /tmp/e-cache \
      --store /tmp/e-store --format markdown -q -o "$OUT/seed2-envdiff.md" > /dev/null
    ;;
  X2)
    DSBISECT_TEST_DEEPSPEED=0.10.0 DSBISECT_TEST_FIND_LINKS=/tmp/wh-seed2 timeout 560 \
      python3 -m pytest -q -p no:cacheprovider -m gpu tests/forensics/test_gpu.py tests/forensics/test_early_hang.py -rs 2>&1 | tail -30
    ;;
esac
echo "== stage $stage done after ${SECONDS}s"
