#!/usr/bin/env bash
# A one-node SLURM cluster on this Debian machine, for the tests that need a real sbatch
# (tests/launching/test_slurm_real.py). Run as root; idempotent: a second run finds it up and returns.
#
#   sudo bash scripts/slurm_local.sh          # install, configure, start; prints "slurm ready"
#   sudo bash scripts/slurm_local.sh stop     # stop the daemons (the packages and config stay)
#
# Packages come from the distribution (slurmctld, slurmd, slurm-client, munge). The node is this
# host, with its CPUs and memory; one partition "debug"; jobs may be requeued (time limits,
# preemption). No accounting: sacct fails, and the driver asks scontrol and squeue about its jobs.
set -euo pipefail

if [[ ${1:-} == stop ]]; then
  pkill -x slurmd || true; pkill -x slurmctld || true; pkill -x munged || true
  echo "slurm stopped"; exit 0
fi
[[ $(id -u) == 0 ]] || { echo "slurm_local.sh: needs root (apt, /etc/slurm, daemons)" >&2; exit 2; }

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
fi

host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))  # leave 10% to the OS

# munge: one key, its daemon
if [[ ! -s /etc/munge/munge.key ]]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || su -s /bin/sh munge -c "/usr/sbin/munged" 2>/dev/null || /usr/sbin/munged --force

mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
cat > /etc/slurm/slurm.conf.new <<CONF
# Written by grpo_exp's scripts/slurm_local.sh: a one-node cluster for tests.
ClusterName=grpo_exp_local
SlurmctldHost=$host
AuthType=auth/munge
SlurmUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobRequeue=1
# A job past its time limit gets KillWait seconds between SIGTERM and SIGKILL.
KillWait=30
MinJobAge=300
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
# Up to two jobs per core: the tests run several small jobs at once on a 2-core machine.
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:2
CONF


changed=0
cmp -s /etc/slurm/slurm.conf.new /etc/slurm/slurm.conf || changed=1
mv /etc/slurm/slurm.conf.new /etc/slurm/slurm.conf

if [[ $changed == 1 ]] && pgrep -x slurmctld >/dev/null; then
  scontrol reconfigure  # running daemons take the new configuration
fi
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd

for _ in $(seq 60); do
  state=$(sinfo -h -o %T 2>/dev/null | head -1)
  case $state in
    idle|mixed|allocated) echo "slurm ready: node $host, $cpus CPUs, ${mem_mb} MB, partition debug"; exit 0 ;;
    down*|drain*) scontrol update nodename="$host" state=resume 2>/dev/null || true ;;
  esac
  sleep 1
done
echo "slurm_local.sh: the node did not come up; see /var/log/slurm/slurmctld.log and slurmd.log" >&2
exit 1
