#!/usr/bin/env bash
# A two-node SLURM cluster on this one Debian machine, for the tests that need a real sbatch and a real network
# between nodes (tests/launching/test_slurm_real.py, tests/launching/test_two_nodes.py). Run as root; idempotent:
# a second run finds it up and returns.
#
#   sudo bash scripts/slurm_local.sh          # install, configure, start; prints "slurm ready: node1 node2 ..."
#   sudo bash scripts/slurm_local.sh stop     # stop the daemons, remove the namespaces, bridge and /etc/hosts lines
#
# Each node is a network namespace with its own address and host name, so every process of a job sees what it would
# on a real node: its own interface, a peer it reaches over a link (which a test can cut or slow), and nothing that
# resolves the other node to 127.0.0.1:
#
#   host (slurmctld, munged, the driver)  gxbr0 10.77.0.1/24
#      ├── veth gxv1 ── netns node1: eth0 10.77.0.11, host name node1, slurmd -N node1
#      └── veth gxv2 ── netns node2: eth0 10.77.0.12, host name node2, slurmd -N node2
#
# The file system is shared (only the network and the host name are per node): run dirs, munge's socket and the
# model cache are the same paths on both nodes, as on a cluster with a shared home.
# Packages come from the distribution (slurmctld, slurmd, slurm-client, munge). One partition "debug" with both
# nodes; jobs may be requeued (time limits, preemption). No accounting: sacct fails, and the driver asks scontrol
# and squeue about its jobs.
set -euo pipefail

NODES=(node1 node2)
BRIDGE=gxbr0
SUBNET=10.77.0
HOSTS_TAG="# grpo_exp two-node cluster"  # marks the /etc/hosts lines this script owns

address() { echo "$SUBNET.1$1"; }  # node index (1, 2) -> its address

stop() {
  pkill -x slurmd || true; pkill -x slurmctld || true; pkill -x munged || true
  for i in "${!NODES[@]}"; do
    ip netns del "${NODES[$i]}" 2>/dev/null || true
    ip link del "gxv$((i + 1))" 2>/dev/null || true
  done
  ip link del $BRIDGE 2>/dev/null || true
  sed -i "/$HOSTS_TAG/d" /etc/hosts
  echo "slurm stopped"
}

if [[ ${1:-} == stop ]]; then stop; exit 0; fi
[[ $(id -u) == 0 ]] || { echo "slurm_local.sh: needs root (apt, /etc/slurm, network namespaces, daemons)" >&2; exit 2; }

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
  || ! command -v munged >/dev/null || ! command -v ip >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge iproute2 >/dev/null
fi

host=$(hostname -s)
cpus=$(nproc)
# Both nodes share this machine's memory: each is given half of 90% (slurmd drains a node configured with more
# memory than it has).
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 / 2 ))

# munge: one key, one daemon; both nodes reach it through its socket on the shared file system
if [[ ! -s /etc/munge/munge.key ]]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || su -s /bin/sh munge -c "/usr/sbin/munged" 2>/dev/null || /usr/sbin/munged --force

# The network: a bridge on the host (the controller's address) and a veth pair into each node's namespace.
ip link show $BRIDGE >/dev/null 2>&1 || ip link add $BRIDGE type bridge
ip addr show $BRIDGE | grep -q "$SUBNET.1/" || ip addr add "$SUBNET.1/24" dev $BRIDGE
ip link set $BRIDGE up
for i in "${!NODES[@]}"; do
  node=${NODES[$i]} n=$((i + 1))
  [[ -e /var/run/netns/$node ]] || ip netns add "$node"
  if ! ip link show "gxv$n" >/dev/null 2>&1; then
    ip link add "gxv$n" type veth peer name "gxv${n}p"
    ip link set "gxv${n}p" netns "$node"
    ip -n "$node" link set "gxv${n}p" name eth0
  fi
  ip link set "gxv$n" master $BRIDGE
  ip link set "gxv$n" up
  ip -n "$node" link set lo up  # torchrun on one node rendezvouses on 127.0.0.1
  ip -n "$node" addr show eth0 | grep -q "$(address $n)/" || ip -n "$node" addr add "$(address $n)/24" dev eth0
  ip -n "$node" link set eth0 up
done

# Names: every process, on the host or a node, resolves each node to its own address (gloo resolves the peer it is
# given by name; a node name that resolved to 127.0.0.1 sends each rank to itself).
sed -i "/$HOSTS_TAG/d" /etc/hosts
for i in "${!NODES[@]}"; do echo "$(address $((i + 1))) ${NODES[$i]} $HOSTS_TAG" >> /etc/hosts; done
echo "$SUBNET.1 $host-ctl $HOSTS_TAG" >> /etc/hosts

mkdir -p /etc/slurm /var/spool/slurmctld /var/log/slurm
for node in "${NODES[@]}"; do mkdir -p "/var/spool/slurmd/$node"; done
nodelist=$(IFS=,; echo "${NODES[*]}")
cat > /etc/slurm/slurm.conf.new <<CONF
# Written by grpo_exp's scripts/slurm_local.sh: a two-node cluster in network namespaces, for tests.
ClusterName=grpo_exp_local
# The controller runs on the host; the nodes reach it over the bridge.
SlurmctldHost=$host($SUBNET.1)
AuthType=auth/munge
SlurmUser=root
StateSaveLocation=/var/spool/slurmctld
# Two slurmd on one file system: each its own spool, pid and log file (%n = the node's name).
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmdPidFile=/run/slurmd.%n.pid
SlurmdLogFile=/var/log/slurm/slurmd.%n.log
SlurmctldPidFile=/run/slurmctld.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
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
# A node whose slurmd stops answering is marked DOWN after this long (its jobs then end NODE_FAIL).
SlurmdTimeout=30
NodeName=${NODES[0]} NodeAddr=$(address 1) NodeHostname=${NODES[0]} CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
NodeName=${NODES[1]} NodeAddr=$(address 2) NodeHostname=${NODES[1]} CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
# Up to two jobs per core: the tests run several small jobs at once on a 2-core machine.
PartitionName=debug Nodes=$nodelist Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:2
CONF

changed=0
cmp -s /etc/slurm/slurm.conf.new /etc/slurm/slurm.conf || changed=1
mv /etc/slurm/slurm.conf.new /etc/slurm/slurm.conf

# A slurmd of the one-node layout (no -N) or of another configuration is stopped: the nodes' own start below.
if [[ $changed == 1 ]]; then pkill -x slurmd || true; pkill -x slurmctld || true; sleep 1; fi
pgrep -x slurmctld >/dev/null || slurmctld
for node in "${NODES[@]}"; do
  # nsenter, not `ip netns exec`: that remounts /sys, and slurmd's cgroup detection then fails ("Hybrid mode is not
  # supported"). unshare --uts: the node's own host name, which torchrun, gloo and SLURM's step daemons read.
  pgrep -f "slurmd -N $node\$" >/dev/null \
    || nsenter --net="/var/run/netns/$node" unshare --uts sh -c "hostname $node && exec slurmd -N $node"
done

for _ in $(seq 90); do
  up=$(sinfo -h -N -o "%N %T" 2>/dev/null | grep -cE " (idle|mixed|allocated)" || true)
  if [[ $up -ge ${#NODES[@]} ]]; then
    echo "slurm ready: nodes ${NODES[*]} ($(address 1), $(address 2)), $cpus CPUs and ${mem_mb} MB each, partition debug"
    exit 0
  fi
  for node in $(sinfo -h -N -o "%N %T" 2>/dev/null | awk '$2 ~ /down|drain/ {print $1}'); do
    scontrol update nodename="$node" state=resume 2>/dev/null || true
  done
  sleep 1
done
echo "slurm_local.sh: the nodes did not come up; see /var/log/slurm/slurmctld.log and slurmd.node*.log" >&2
sinfo -N >&2 || true
exit 1
