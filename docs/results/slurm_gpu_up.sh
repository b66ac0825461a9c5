#!/bin/bash
# A one-node Slurm with one GPU as a generic resource, on a machine with no network and no
# Slurm installed (root): unpacks Debian 12 packages carried in DEBS (slurmctld, slurmd,
# slurm-client, slurm-wlm-basic-plugins, munge and the libraries the machine lacks), writes
# slurm.conf with GresTypes=gpu and the node's Gres=gpu:N, gres.conf naming /dev/nvidiaN, and
# starts munged, slurmctld and slurmd by hand, as .ci/slurm-up.sh does on CPU.
#   DEBS=folder-of-debs bash docs/results/slurm_gpu_up.sh        (down: ... slurm_gpu_up.sh down)
set -euo pipefail
D=${SLURM_DIR:-/tmp/slurm}
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
if [ "${1:-up}" = down ]; then
  for f in $D/slurmd.pid $D/slurmctld.pid /run/munge/munged.pid; do alive $f && kill "$(cat $f)"; done
  exit 0
fi
DEBS=${DEBS:?folder of .deb files}
# Libraries: only those the machine lacks (a library package never replaces one it has).
have=$(ldconfig -p)
for deb in "$DEBS"/lib*.deb; do
  # the library's soname: the name its symlink carries ("./usr/lib/.../libhwloc.so.15 -> libhwloc.so.15.6.3")
  so=$(dpkg -c "$deb" | grep -oE '[^/ ]+\.so\.[0-9]+ -> ' | sed -n 1p | cut -d' ' -f1 || true)
  [ -n "$so" ] && grep -qF " $so " <<< "$have" && continue
  echo "slurm-gpu-up: unpacking $(basename "$deb") (no $so here)"; dpkg -x "$deb" /
done
for deb in "$DEBS"/slurm*.deb "$DEBS"/munge_*.deb; do dpkg -x "$deb" /; done
# Debian names the daemons slurmctld-wlm / slurmd-wlm and links the plain names through
# update-alternatives, which dpkg -x does not run: link them here.
for d in slurmctld slurmd slurmstepd; do
  command -v $d >/dev/null || { [ -x /usr/sbin/$d-wlm ] && ln -sf /usr/sbin/$d-wlm /usr/sbin/$d; }
done
ldconfig
getent group munge >/dev/null || groupadd -r munge
getent passwd munge >/dev/null || useradd -r -g munge -d /nonexistent -s /usr/sbin/nologin munge
mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
[ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 700 /etc/munge; chmod 400 /etc/munge/munge.key
alive /run/munge/munged.pid || runuser -u munge -- /usr/sbin/munged
munge -n | unmunge >/dev/null

GPUS=$(ls /dev/nvidia[0-9]* 2>/dev/null | wc -l)
CPUS=${SLURM_CPUS:-$(nproc)}
MEM=$(( $(free -m | awk '/^Mem:/{print $2}') - 512 ))
mkdir -p $D/state $D/spool $D/log /etc/slurm
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=gpu1
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
GresTypes=gpu
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
NodeName=localhost CPUs=$CPUS RealMemory=$MEM Gres=gpu:$GPUS State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
# No systemd (no dbus scope for slurmstepd) on such a machine: slurmd makes its cgroup itself
mkdir -p /sys/fs/cgroup/system.slice 2>/dev/null || true  # where slurmd puts the stepds' scope
printf 'CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\nIgnoreSystemdOnFailure=yes\n' > /etc/slurm/cgroup.conf
: > /etc/slurm/gres.conf
for i in $(seq 0 $(( GPUS - 1 ))); do echo "NodeName=localhost Name=gpu File=/dev/nvidia$i" >> /etc/slurm/gres.conf; done
cat /etc/slurm/gres.conf
alive $D/slurmd.pid && kill "$(cat $D/slurmd.pid)" && sleep 1
alive $D/slurmctld.pid && kill "$(cat $D/slurmctld.pid)" && sleep 1
setsid nohup slurmctld -D > $D/log/slurmctld.out 2>&1 < /dev/null &
# each look bounded: with no controller answering, one `scontrol ping` can wait out MessageTimeout
for _ in $(seq 40); do timeout 3 scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.5; done
timeout 3 scontrol ping 2>/dev/null | grep -q UP || { echo "slurm-gpu-up: slurmctld does not answer" >&2; tail -n 30 $D/log/* >&2; exit 1; }
setsid nohup slurmd -D -N localhost > $D/log/slurmd.out 2>&1 < /dev/null &
for _ in $(seq 40); do timeout 3 sinfo -h -o %T 2>/dev/null | grep -qx idle && break; sleep 0.5; done
timeout 3 sinfo -h -o %T | grep -qx idle || { echo "slurm-gpu-up: the node did not become idle" >&2; tail -n 20 $D/log/*; exit 1; }
sinfo -o '%P %a %D %T %N %G'
