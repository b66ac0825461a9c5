#!/usr/bin/env bash
# The zoo's DeepSpeed GPU metric cases (issue 38), bisected by dsbisect on one CUDA GPU with no
# network: ds_z2_offload_ga_metric (update_rel_error@step2, the ZeRO-2 + offload accumulation bug
# of 0.15.2) and ds_z3_ckpt_gathered_params_gpu (gathered_mib@step3@max, ZeRO-3 + checkpointing
# keeping parameters gathered from 0.16.0 until 0.16.8).  Three lanes of bisections run side by side on the one GPU, each with its own store and
# cache (the metrics are per process: the allocator's peak and exact counts, which other processes
# on the card do not move).
#
# Needs: one CUDA GPU; python3 with torch (CUDA); in $G (default .gpu), made on a machine with a
# network (docs/results/metric-zoo.md, "GPU", says how):
#   $G/tool  dsbisect's own dependencies for that python (pip download --only-binary :all:
#            --python-version 3.12 ... of pyproject's dependencies), pydantic among them
#   $G/wh    deepspeed wheels built with DS_BUILD_OPS=0 (pip wheel --no-deps --no-build-isolation
#            from the sdists) and hjson: what the point venvs add to the base
# Point venvs are layered over the machine's python (dsbisect's --base auto: its torch, numpy,
# ninja, psutil ... are used, not installed); every install is --offline --find-links.
#
# Usage, from the repository root:  OUT=/some/dir bash docs/results/gpu_metric_zoo.sh
# LANES_RUN (default "a b c") picks the lanes.  Writes $OUT/zoo.log (the transcript),
# $OUT/lane-{a,b,c}.log (each lane's own output, as it runs), $OUT/zoo-results.tar (per
# bisection: dsbisect's JSON, the Markdown from the store, and a .meta with exit and seconds;
# appended as each ends) and $OUT/zoo-runs.tgz (the runs' records).
# Without CUDA it stops at once with "no CUDA" (exit 3); DRY_CPU=1 skips that check, to try the
# paths and flags on a CPU machine (the scripts then exit 125: untestable there).
# Expected: a: last good 0.15.1, first bad 0.15.2; b: last good 0.15.4, first bad 0.16.0;
# c (the fix, as the release where the number fell): from 0.16.0, or 0.16.7 where its
# wheel is there, to 0.16.8.
set -u
set -m   # lanes in the background keep SIGINT with job control
G=$(cd "${G:-.gpu}" 2>/dev/null && pwd) || { echo "missing ${G:-.gpu} (see the header)"; exit 3; }
OUT=${OUT:-/tmp/gpu-metric-zoo}
BUDGET=${BUDGET:-540}
W=$(mktemp -d /tmp/gpu-metric-zoo.XXXXXX)
mkdir -p "$OUT"
exec > >(tee -a "$OUT/zoo.log") 2>&1
export PYTHONUNBUFFERED=1
echo "== $(date -u +%FT%TZ) $(hostname) load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"

if [ "${DRY_CPU:-0}" != 1 ]; then
  python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA'" 2>/dev/null || { echo "no CUDA: this script needs one CUDA GPU"; exit 3; }
fi
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA')" || exit 3
for d in tool wh; do [ -d "$G/$d" ] || { echo "missing $G/$d (see the header)"; exit 3; }; done
if python3 -c "import typer, rich, packaging, uv, pydantic, yaml, platformdirs, psutil, filelock, pypi_simple, ruamel.yaml, tomlkit" 2>/dev/null; then
  export PYTHONPATH="$PWD/src"   # dsbisect's dependencies are there already
else
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" "$G"/tool/*.whl || exit 3
  export PATH="$W/site/bin:$PATH" PYTHONPATH="$W/site:$PWD/src"
fi
python3 -m dsbisect --version || exit 3
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
echo "wheels: $(cd "$G/wh" && ls | tr '\n' ' ')"

FL=(--offline --find-links "$G/wh" --find-links "$G/tool")
M=(--matrix "${ZOO:-repro_scripts/zoo}/matrix.yaml")   # ZOO: another copy of the zoo's folder
left() { local l=$(( BUDGET - SECONDS )); echo $(( l > 1 ? l : 1 )); }
# bisect NAME STORE ARGS...: one bisection (JSON), then the Markdown from its store (nothing runs
# again); bisections of one STORE run one after the other and reuse its recorded runs
bisect() {
  local name=$1 store=$W/store-$2; shift 2
  local fl=("${FL[@]}" --cache-dir "$W/cache-${store##*/store-}")
  echo "== $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg): dsbisect bisect $*"
  local t0=$SECONDS
  timeout -s INT "$(left)" python3 -m dsbisect bisect "$@" "${M[@]}" "${fl[@]}" --store "$store" \
    --format json -o "$W/$name.json" > /dev/null
  local rc=$?
  echo "{\"exit_code\": $rc, \"seconds\": $(( SECONDS - t0 )), \"date\": \"$(date -u +%FT%TZ)\", \"load_end\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" > "$W/$name.meta"
  echo "== $name: exit $rc after $(( SECONDS - t0 )) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
  if [ -s "$W/$name.json" ]; then
    timeout 60 python3 -m dsbisect bisect "$@" "${M[@]}" "${fl[@]}" --store "$store" --format markdown -q -o "$W/$name.md" > /dev/null
    timeout 60 python3 -m dsbisect bisect "$@" "${M[@]}" "${fl[@]}" --store "$store" -q   # the table, into the lane's log
  fi
  flock "$W/lock" tar rf "$OUT/zoo-results.tar" -C "$W" $(cd "$W" && ls "$name".json "$name".md "$name".meta 2>/dev/null)
}
LANES=()
lane() { local n=$1; shift; ( "$@" ) > "$OUT/lane-$n.log" 2>&1 & LANES+=($!); }

Z3=(--case ds_z3_ckpt_gathered_params_gpu)
lane_a() { bisect z2_offload_ga a deepspeed 0.15.1 0.15.4 --case ds_z2_offload_ga_metric \
             --metric update_rel_error@step2 --worse-if 'higher by 0.05'; }
# ZeRO-3: the blocks held gathered as ZeRO-3 counts them (exact; the CPU case's metric).  The CUDA
# readings (peak_cuda_mib, backward_peak_cuda_mib, cuda_after_backward_mib) are recorded with each
# run but not bisected: on one GPU they were the same at every end (4022.7 / 4022.7 / 3510.6 MiB on
# one H100): with one rank the held blocks seem to take no memory of their own (not checked
# further).  Thresholds are bare numbers: the script's JSON lines carry no unit.
lane_b() { bisect z3_ckpt_regress b deepspeed 0.15.4 0.16.0 "${Z3[@]}" --metric gathered_mib@step3@max --worse-if 'higher by 8'; }
# The fix: --metric does not go with --find-fix yet, so the release where the number *fell* is
# bisected as the change ("worse" read as "lower": the fix), 0.16.0 as the reference end.
lane_c() { bisect z3_ckpt_fix c deepspeed 0.16.0 0.16.8 "${Z3[@]}" --metric gathered_mib@step3@max --worse-if 'lower by 8'; }
for l in ${LANES_RUN:-a b c}; do lane $l lane_$l; done
wait "${LANES[@]}"   # the lanes only: a bare wait would also wait for the log's tee

for n in ${LANES_RUN:-a b c}; do echo "---- lane $n"; cat "$OUT/lane-$n.log"; done
( cd "$W" && find . -path './cache-*' -prune -o \( -name run.json -o -name '*.log' -o -name '*.jsonl' \) -size -2M -print ) \
  | tar czf "$OUT/zoo-runs.tgz" -C "$W" -T - 2>/dev/null
python3 - "$W" <<'EOF'
import json, sys
from pathlib import Path
want = {"z2_offload_ga": ("0.15.1", "0.15.2"), "z3_ckpt_regress": ("0.15.4", "0.16.0"),
        "z3_ckpt_fix": (None, "0.16.8")}   # the last high point: 0.16.0, or 0.16.7 with its wheel
bad = 0
for name, (good, first) in want.items():
    p = Path(sys.argv[1]) / f"{name}.json"
    if not p.is_file():
        print(f"{name}: no JSON (not run, or see its lane's log)"); bad += 1; continue
    out = json.loads(p.read_text())
    nums = out.get("numbers") or {}
    print(f"{name}: verdict {out.get('verdict')}, last good {out.get('last_good')}, first bad {out.get('first_bad')}")
    for pt in nums.get("points", []):
        print(f"  {pt['label']}: median {pt['median']:.6g} {nums.get('unit') or ''} over {len(pt['values'])} runs")
    ok = out.get("verdict") == "found" and out.get("first_bad") == first and (good is None or out.get("last_good") == good)
    print("  AS EXPECTED" if ok else "  NOT AS EXPECTED"); bad += not ok
sys.exit(1 if bad else 0)
EOF
rc=$?
command -v nvidia-smi > /dev/null && echo "== GPU processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
echo "== done after ${SECONDS}s, exit $rc"
exit $rc
