#!/usr/bin/env bash
# The test suite under load: two full runs of the README's test command side by side, each from
# its own clean clone and venv (installed as .ci/run installs them), with the 1-minute load
# average logged every minute. On a 2-core machine two suites of three workers each, with their
# toy jobs' ranks, keep the load near 10 (up to 15; docs/benchmarks.md has the figures).
#
#     bash benchmarks/suite_under_load.sh            # two suites side by side
#     bash benchmarks/suite_under_load.sh 1          # one suite alone: the quiet figure
#
# Prints, per suite, pytest's last line and its wall time, then the load's min / mean / max.
# Figures only: nothing is asserted here. Needs what .ci/run needs (torch from the machine's
# wheels, the registries for the rest); Slurm, sshd and chromium as .ci/run sets them up.
set -euo pipefail
n="${1:-2}"
here="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/suite-load.XXXXXX")"
echo "suite_under_load: $n suite(s) of $(git -C "$here" rev-parse --short HEAD) in $work" >&2

for i in $(seq "$n"); do
  git clone --quiet "$here" "$work/s$i"
  (cd "$work/s$i" && python3 -m venv .venv \
     && .venv/bin/pip install --quiet --no-compile torch==2.13.0 -e . \
     && .venv/bin/pip install --quiet -e '.[test]' \
     && DS_BUILD_OPS=0 .venv/bin/pip install --quiet --no-build-isolation deepspeed==0.19.8) >"$work/s$i.install" 2>&1
done
"$here/.ci/slurm-up.sh" >/dev/null 2>&1 || echo "suite_under_load: no local Slurm; its tests skip" >&2

(while true; do cut -d' ' -f1 /proc/loadavg >>"$work/load"; sleep 60; done) &
logger=$!
trap 'kill $logger 2>/dev/null || true' EXIT

pids=()
for i in $(seq "$n"); do
  # (set -e holds in the subshell: a failing suite must still write its rc and seconds)
  (cd "$work/s$i" && start=$(date +%s) && rc=0 \
     && { .venv/bin/python -m pytest -p no:cacheprovider >"$work/s$i.log" 2>&1 || rc=$?; } \
     && echo "rc=$rc" >>"$work/s$i.log" && echo "seconds=$(( $(date +%s) - start ))" >>"$work/s$i.log") &
  pids+=($!)
done
wait "${pids[@]}"

for i in $(seq "$n"); do
  last=$(grep -E '(passed|failed|error)' "$work/s$i.log" | tail -1)
  echo "suite $i: ${last:-no result} ($(grep -E '^(rc|seconds)=' "$work/s$i.log" | tr '\n' ' ' | sed 's/ $//'))"
done
awk '{s+=$1; if(min==""||$1<min)min=$1; if($1>max)max=$1} END {if (NR) printf "load (1-min average, %d samples): min %.1f, mean %.1f, max %.1f\n", NR, min, s/NR, max}' "$work/load"
echo "logs: $work/s*.log" >&2
