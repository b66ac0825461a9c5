#!/usr/bin/env bash
# The zoo's single-GPU cases on one H200 (no network), one device call per stage; outputs under $OUT.
# Prepared on a machine with a network, in the repository root, in an ignored folder G (default
# .gpuzoo) that the call carries:
#   G/base.json   `dsbisect snapshot-base` of the GPU machine (or the format-1 equivalent)
#   G/tool        dsbisect's wheels the base lacks: prefetch --no-cases --tool --base-snapshot G/base.json
#   G/wh, G/wh-acc  the cases' wheelhouses: prefetch repro_scripts/zoo/matrix.yaml --case ... --with-candidates
#                 --python-version 3.12 --platform manylinux_2_28_x86_64 --base-snapshot G/base.json
#                 (wheels that G/tool holds too, pydantic's, dropped from G/wh: 64 MiB a call)
#   G/src, G/zoo  copies of src/ and repro_scripts/zoo/ (the tool's code and the cases, fixed)
#   G/debs        stage S: Debian 12 packages of Slurm 22.05 and munge (docs/results/slurm_gpu_up.sh)
# Stage A (one call): the five single-GPU bisections in four lanes side by side on the one GPU, and
# a one-node Slurm with the GPU as gres running one of them again with --executor slurm
# (--gres=gpu:1).  Each lane's log streams to $OUT/lane-X.log; each finished bisection is appended
# (json, meta, markdown) to $OUT/A-results.tar.
set -u
set -m   # lanes run in the background: with job control they keep SIGINT (else ignored there)
stage=${1:?stage A}
G=${G:-.gpuzoo}
OUT=${OUT:-/tmp/gpu-zoo}
W=/tmp/gz-$stage            # everything the stage writes; $OUT gets $stage.log and $stage.tgz of W
mkdir -p "$OUT" "$W"
exec > >(tee -a "$OUT/$stage.log") 2>&1
export PYTHONUNBUFFERED=1
BUDGET=${BUDGET:-560}
[ -x /tmp/site/bin/uv ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$G"/tool/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/$G/src PATH=/tmp/site/bin:$PATH
left() { local l=$(( BUDGET - SECONDS )); echo $(( l > 1 ? l : 1 )); }
FL="--offline"
for d in wh wh-s wh-acc tool; do [ -d "$G/$d" ] && FL="$FL --find-links $PWD/$G/$d"; done
M="--matrix $G/zoo/matrix.yaml"
# bisect NAME LANE ARGS...: the bisection as JSON (wall time and exit in NAME.meta), then Markdown
# from the store; LANE names the store and cache (lanes run side by side on the one GPU)
bisect() {
  local name=$1 lane=$2; shift 2
  local store=$W/store-$lane
  local fl="$FL --cache-dir /tmp/gz-cache-$lane"
  if [ "$(left)" -lt 45 ]; then echo "== no time left for $name"; return; fi
  echo "== $(date -u +%T) dsbisect bisect $*"
  local t0=$SECONDS
  timeout -s INT "$(left)" python3 -m dsbisect bisect "$@" $M $fl --store "$store" --format json -o "$W/$name.json" > /dev/null
  local rc=$?
  echo "{\"exit_code\": $rc, \"seconds\": $(( SECONDS - t0 )), \"date\": \"$(date -u +%F)\"}" > "$W/$name.meta"
  echo "== $name: exit $rc after $(( SECONDS - t0 )) s"
  [ $rc -ne 124 ] && [ $rc -ne 130 ] && timeout 30 python3 -m dsbisect bisect "$@" $M $fl --store "$store" --format markdown -q \
    -o "$W/$name.md" > /dev/null
  # what is done comes back even if the call is cut short: appended to one tar under $OUT
  flock /tmp/gz.lock tar rf "$OUT/$stage-results.tar" -C "$W" "$name.json" "$name.meta" $( [ -f "$W/$name.md" ] && echo "$name.md" ) 2>/dev/null
  # and the runs' own logs and records (small), so that a surprising answer can be read back here
  ( cd "$W" && find "store-$lane" \( -name '*.log' -o -name 'run.json' \) -size -2M -print0 \
      | flock /tmp/gz.lock tar rf "$OUT/$stage-results.tar" --null -T - ) 2>/dev/null
}
# lane NAME CMDS: a lane's log streams to $OUT
LANES=()
lane() { local n=$1; shift; ( "$@" ) > "$OUT/lane-$n.log" 2>&1 & LANES+=($!); }
lane_a() { bisect ds_z3_offload_clip_device a deepspeed 0.14.1 0.15.0 --find-fix --case ds_z3_offload_clip_device --regress-on fail $T; }
lane_b() { bisect ds_z3_offload_set_grad_norm b deepspeed 0.16.5 0.17.1 --find-fix --case ds_z3_offload_set_grad_norm --regress-on fail $T
           bisect ds_z2_offload_gpu_memory b deepspeed 0.16.5 0.17.1 --find-fix --case ds_z2_offload_gpu_memory --regress-on fail $T; }
lane_c() { bisect accelerate_fp16_wrapped_forward c accelerate 0.15.0 0.20.3 --case accelerate_fp16_wrapped_forward --regress-on fail $T; }
lane_d() { bisect ds_z2_offload_ga d deepspeed 0.14.4 0.15.3 --find-fix --case ds_z2_offload_ga --regress-on fail $T; }
lane_s() {
  if ! DEBS=$G/debs timeout 120 bash $G/slurm_gpu_up.sh; then  # keep Slurm's own logs of a failed start
    cp -r /tmp/slurm/log "$W/slurm-log" 2>/dev/null
    flock /tmp/gz.lock tar rf "$OUT/$stage-results.tar" -C "$W" slurm-log 2>/dev/null
    return 1
  fi
  # what Slurm gave each job (GRES, CUDA_VISIBLE_DEVICES), polled while the bisection runs
  ( while sleep 2; do scontrol show job -d 2>/dev/null; done >> "$W/slurm-jobs.raw" ) &
  local poll=$!
  bisect slurm-gpu s deepspeed 0.16.5 0.17.1 --find-fix --case ds_z3_offload_set_grad_norm --regress-on fail $T \
    --executor slurm --partition debug
  kill $poll
  grep -E "JobId=|JobState=|TresPerNode|GRES=|TRES=|Command=" "$W/slurm-jobs.raw" | awk '!seen[$0]++' > "$W/slurm-jobs.txt"
  grep -h -iE "gres|Allocate JobId|done" /tmp/slurm/log/slurmctld.log | tail -80 > "$W/slurmctld-gres.log"
  grep -rh "CUDA_VISIBLE_DEVICES=" "$W/store-s" 2>/dev/null | sort | uniq -c > "$W/job-cvd.txt"
  cp /etc/slurm/slurm.conf /etc/slurm/gres.conf "$W/"
  timeout 30 python3 -m dsbisect report --store "$W/store-s" --format json -o "$W/slurm-runs.json" > /dev/null
  flock /tmp/gz.lock tar rf "$OUT/$stage-results.tar" -C "$W" slurm-jobs.txt slurmctld-gres.log job-cvd.txt slurm.conf gres.conf slurm-runs.json
  bash $G/slurm_gpu_up.sh down
}
T="--timeout ${RUN_TIMEOUT:-150}"
nvidia-smi -L
case $stage in
  A)  # everything at once: five local bisections in four lanes, and one through Slurm (--gres=gpu:1)
    lane a lane_a; lane b lane_b; lane c lane_c; lane d lane_d; lane s lane_s
    wait "${LANES[@]}"   # the lanes only: a bare wait also waits for the log's tee (bash >= 5.1), forever
    for l in a b c d; do timeout 30 python3 -m dsbisect report --store "$W/store-$l" --format json -o "$W/runs-$l.json" > /dev/null; done
    flock /tmp/gz.lock tar rf "$OUT/$stage-results.tar" -C "$W" $(cd "$W" && ls runs-*.json)
    ;;
  *) echo "stage A only"; exit 2 ;;
esac
echo "== GPU processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
echo "== stage $stage done after ${SECONDS}s"

