#!/bin/bash
# Start a one-node Slurm on localhost for the tests marked `slurm` (Debian 12, as root).
#
# Installs slurm-wlm and munge when they are missing, writes /etc/slurm/slurm.conf and starts
# munged, slurmctld and slurmd by hand (no systemd): about 1 s when the packages are there.
# Idempotent: when the node already answers `idle`/`mixed`/`allocated`, it only prints sinfo.
# No slurmdbd: dsbisect follows its jobs with `scontrol show job`, which needs no accounting.
# Stop it with `.ci/slurm-up.sh down` (kills the daemons by the pids in their pid files).
#
# Settings: SLURM_DIR (state, spool, logs; default /tmp/slurm), SLURM_CPUS (CPUs the node
# declares; default nproc, so that jobs of dsbisect's CPU cases do not oversubscribe).
set -euo pipefail
D=${SLURM_DIR:-/tmp/slurm}

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

if [ "${1:-up}" = down ]; then
  for f in $D/slurmd.pid $D/slurmctld.pid /run/munge/munged.pid; do
    alive $f && kill "$(cat $f)"
  done
  exit 0
fi

if command -v sinfo >/dev/null && alive $D/slurmctld.pid && alive $D/slurmd.pid \
   && timeout 10 sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
  sinfo
  exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq slurm-wlm munge >/dev/null
fi

CPUS=${SLURM_CPUS:-$(nproc)}
MEM=$(( $(free -m | awk '/^Mem:/{print $2}') - 512 ))   # RealMemory above the real amount drains the node
mkdir -p $D/state $D/spool $D/log /etc/slurm
cat > /etc/slurm/slurm.conf <<EOF
ClusterName=ci
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
SlurmdParameters=config_overrides
MailProg=/bin/true
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
KillWait=5
OverTimeLimit=0
InactiveLimit=0
MinJobAge=300
NodeName=localhost CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF

# munge: Debian's package made /etc/munge/munge.key; only /run/munge is missing without systemd.
[ -s /etc/munge/munge.key ] || { mungekey --create 2>/dev/null || create-munge-key -f; }
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
mkdir -p /run/munge && chown munge:munge /run/munge
alive /run/munge/munged.pid || runuser -u munge -- /usr/sbin/munged
munge -n | unmunge >/dev/null

# Controller, then the node daemon (named "localhost" whatever the hostname: -N localhost).
alive $D/slurmd.pid && kill "$(cat $D/slurmd.pid)" && sleep 1
alive $D/slurmctld.pid && kill "$(cat $D/slurmctld.pid)" && sleep 1
setsid nohup slurmctld -D > $D/log/slurmctld.out 2>&1 < /dev/null &
for _ in $(seq 60); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.5; done
setsid nohup slurmd -D -N localhost > $D/log/slurmd.out 2>&1 < /dev/null &
for _ in $(seq 60); do sinfo -h -o %T 2>/dev/null | grep -qx idle && break; sleep 0.5; done
sinfo -h -o %T | grep -qx idle || { echo "slurm-up: the node did not become idle; see $D/log" >&2; exit 1; }
sinfo
