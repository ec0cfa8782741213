#!/usr/bin/env bash
# A one-host Slurm cluster for the Slurm tests (tests/test_slurm.py): Debian's
# slurm-wlm and munge, one node (this host) with 2 CPUs, daemons run as root.
# Best effort: if any step fails the cluster is absent and those tests are
# skipped, saying why.
set -u
if ! command -v sbatch >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge) \
    >/tmp/mixer-slurm-apt.log 2>&1 || { echo "slurm setup: apt-get failed (see /tmp/mixer-slurm-apt.log)"; exit 0; }
fi
if sinfo -h >/dev/null 2>&1; then
  echo "slurm setup: a cluster is already running"; exit 0
fi
host=$(hostname -s)
mkdir -p /tmp/mixer-slurm/d /tmp/mixer-slurm/ctld /tmp/mixer-slurm/log /etc/slurm /run/munge
[ -f /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1k count=1 2>/dev/null
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null
chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || munged --force
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=mixer
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldPidFile=/tmp/mixer-slurm/slurmctld.pid
SlurmdPidFile=/tmp/mixer-slurm/slurmd.pid
SlurmdSpoolDir=/tmp/mixer-slurm/d
StateSaveLocation=/tmp/mixer-slurm/ctld
SlurmUser=root
SlurmdUser=root
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SlurmctldLogFile=/tmp/mixer-slurm/log/ctld.log
SlurmdLogFile=/tmp/mixer-slurm/log/d.log
NodeName=$host CPUs=$(nproc) RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
slurmctld && slurmd || { echo "slurm setup: daemons did not start"; exit 0; }
for _ in $(seq 1 30); do
  sinfo -h -o %T 2>/dev/null | grep -q idle && { echo "slurm setup: one-host cluster up"; exit 0; }
  sleep 1
done
echo "slurm setup: the node did not become idle"
exit 0
