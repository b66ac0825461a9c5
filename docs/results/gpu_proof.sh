#!/usr/bin/env bash
# The GPU proof of the seed cases, with dsbisect itself, on a 2-GPU machine with no network,
# in stages that each fit in one 10-minute command:
#
#   A  seed 2: the zero3_from_pretrained grid, the transformers bisection, and the find-fix
#      bisection into the DeepSpeed commits between 0.9.5 and 0.10.0
#   B  seed 1: bisect 0.12.2..0.12.4 with the calibrated headroom, into the 28 commits of
#      v0.12.3..v0.12.4; then the same without the memory fill (expected: not reproduced)
#   C  whatever an earlier stage left unfinished (bisections resume from the store), and
#      the GPU tests (pytest -m gpu)
#   D  seed 1's commit step and the no-fill bisection, resumed from the store
#   E  D, then the GPU tests (pytest -m gpu) in the time left
#   G  the GPU tests, then the GPU benchmarks (benchmarks/bench.py --gpu, BENCH=hang,concurrency)
#
# Prepared on a machine with a network, in the repository root (.gpu/ is git-ignored):
#   dsbisect snapshot-base -o base.json                        # on the GPU machine, once
#   T="--python-version 3.12 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --base-snapshot base.json"
#   dsbisect prefetch --no-cases --tool --dest .gpu/tool $T
#   dsbisect prefetch matrix.yaml --case zero3_from_pretrained --extra 'setuptools<75' --dest .gpu/seed2 $T
#   dsbisect prefetch matrix.yaml --case checkpoint_after_training --extra 'setuptools<75' --dest .gpu/seed1 $T
#   .gpu/r095, .gpu/r124: bare clones of DeepSpeed holding v0.9.5..v0.10.0 and v0.12.3..v0.12.4
#   (shallow at the older tag; blobs of the paths setup.py needs), small enough to carry.
#
# Usage: bash docs/results/gpu_proof.sh A|B|C|D|E|G   (outputs go to $OUT)
set -u
stage=${1:?stage A, B or C}
OUT=${OUT:-/tmp/dsbisect-proof}
mkdir -p "$OUT/reports"
exec > >(tee -a "$OUT/$stage.log") 2>&1
export PYTHONUNBUFFERED=1
BUDGET=${BUDGET:-570}

if [ ! -x /tmp/site/bin/uv ]; then
  [ -d .gpu/tool ] || { echo "no dsbisect here and no .gpu/tool to install it from"; exit 3; }
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/tool/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD/src
ds() { python3 -m dsbisect "$@"; }
left() { local l=$(( BUDGET - SECONDS )); echo $(( l > 1 ? l : 1 )); }
CACHE="--cache-dir /tmp/dsbisect-cache"
# One store per seed (a stage can resume the other's bisections from a carried copy).
S2="--offline --find-links ${S2DIR:-.gpu/seed2} $CACHE --store .gpu/store-seed2"
S1="--offline --find-links .gpu/seed1 $CACHE --store .gpu/store-seed1"
CT="--collective-timeout 30"

# report NAME ARGS...: the command as JSON, then (if it ended, not interrupted) as Markdown from the store
report() {
  local name=$1; shift
  if [ "$(left)" -lt 60 ]; then echo "== no time left for: dsbisect $*"; return; fi
  echo "== $(date -u +%T) dsbisect $*"
  timeout -s INT "$(left)" python3 -m dsbisect "$@" --format json -o "$OUT/reports/$name.json" > /dev/null
  local rc=$?
  echo "== exit $rc after ${SECONDS}s"
  if [ $rc -ne 130 ] && [ $rc -ne 124 ] && [ "$(left)" -gt 20 ]; then
    python3 -m dsbisect "$@" --format markdown -q -o "$OUT/reports/$name.md" > /dev/null
  fi
}

gpu_tests() {
  echo "== $(date -u +%T) pytest -m gpu"
  DSBISECT_TEST_DEEPSPEED=0.12.4 DSBISECT_TEST_FIND_LINKS=$PWD/.gpu/seed1 DSBISECT_KEEP_RUNS=$OUT \
    timeout -s INT "$(left)" python3 -m pytest -q -p no:cacheprovider -m gpu tests/forensics/test_gpu.py -rs
  echo "== pytest exit $? after ${SECONDS}s"
}

nvidia-smi -L
case $stage in
  A)
    report seed2-grid run matrix.yaml --case zero3_from_pretrained $CT $S2
    report seed2-bisect-transformers bisect transformers 4.36.2 4.39.2 --case zero3_from_pretrained \
      --pin deepspeed==0.9.5 $CT $S2
    report seed2-bisect-fix bisect deepspeed 0.9.5 0.10.0 --find-fix --pin transformers==4.39.2 \
      --case zero3_from_pretrained $CT --git-repo .gpu/r095 --no-verify-commit-ends $S2
    ;;
  B)
    report seed1-bisect bisect deepspeed 0.12.2 0.12.4 --case checkpoint_after_training --regress-on any \
      --git-repo .gpu/r124 $S1
    report seed1-nofill bisect deepspeed 0.12.2 0.12.4 --case checkpoint_after_training_nofill --regress-on any $S1
    ;;
  C)
    report seed2-bisect-fix bisect deepspeed 0.9.5 0.10.0 --find-fix --pin transformers==4.39.2 \
      --case zero3_from_pretrained $CT --git-repo .gpu/r095 --no-verify-commit-ends $S2
    report seed1-bisect bisect deepspeed 0.12.2 0.12.4 --case checkpoint_after_training --regress-on any \
      --git-repo .gpu/r124 --no-verify-commit-ends $S1
    ;;
  D)
    report seed1-bisect bisect deepspeed 0.12.2 0.12.4 --case checkpoint_after_training --regress-on any \
      --git-repo .gpu/r124 --no-verify-commit-ends $S1
    report seed1-nofill bisect deepspeed 0.12.2 0.12.4 --case checkpoint_after_training_nofill --regress-on any $S1
    report seed2-bisect-fix bisect deepspeed 0.9.5 0.10.0 --find-fix --pin transformers==4.39.2 \
      --case zero3_from_pretrained $CT --git-repo .gpu/r095 --no-verify-commit-ends $S2
    ;;
  T)
    gpu_tests
    ;;
  E)
    report seed1-bisect bisect deepspeed 0.12.2 0.12.4 --case checkpoint_after_training --regress-on any \
      --git-repo .gpu/r124 --no-verify-commit-ends ${CONFIRM:+--confirm $CONFIRM} $S1
    report seed1-nofill bisect deepspeed 0.12.2 0.12.4 --case checkpoint_after_training_nofill --regress-on any $S1
    [ "$(left)" -gt 150 ] && gpu_tests
    ;;
  G)
    gpu_tests
    echo "== $(date -u +%T) benchmarks/bench.py --gpu --only ${BENCH:-hang,concurrency}"
    timeout -s INT "$(left)" python3 benchmarks/bench.py --gpu --only "${BENCH:-hang,concurrency}" \
      --find-links .gpu/seed1 --out "$OUT/reports/bench-gpu.md"
    echo "== exit $? after ${SECONDS}s"
    ;;
esac

for st in .gpu/store-seed*; do
  [ -d "$st" ] && ds report --store "$st" --format json -o "$OUT/reports/$(basename "$st")-report.json" > /dev/null
done
echo "== GPU processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
tar czf "$OUT/$stage-reports.tgz" -C "$OUT" reports $( [ -d "$OUT/gpu-toy-hang" ] && echo gpu-toy-hang )
tar czf "$OUT/$stage-store.tgz" --exclude='dsbisect-bert-*' --exclude='*.pt' .gpu/store-seed*
ls -la "$OUT"
