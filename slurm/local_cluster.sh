#!/bin/bash
# A one-host Slurm cluster for trying slurm/train_ddp.sbatch on this machine (Debian's slurm-wlm
# and munge; everything on loopback). Needs root (munged and slurmd run as root here).
#
#   slurm/local_cluster.sh start     # install if needed, write the config, start the daemons
#   slurm/local_cluster.sh env       # prints: export SLURM_CONF=...  (eval it in your shell)
#   slurm/local_cluster.sh stop      # stop the daemons this script started
#
# One node named after this host, NodeAddr 127.0.0.1, CPUS cores declared (default 4: more
# task slots than a 2-core box has, so an allocation of 2 tasks fits; config_overrides lets
# slurmd accept it). State, logs and pid files live in $SLURM_LOCAL_DIR (default
# /tmp/slurm-local); nothing is written under /etc except what apt installs.
set -euo pipefail

DIR=${SLURM_LOCAL_DIR:-/tmp/slurm-local}
CPUS=${CPUS:-4}
NODE=$(hostname -s)
CONF=$DIR/slurm.conf

install() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v munged >/dev/null && command -v sbatch >/dev/null; then
        return
    fi
    [[ $(id -u) == 0 ]] || { echo "error: run as root to install slurm-wlm and munge" >&2; exit 1; }
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
}

write_conf() {
    mkdir -p "$DIR"/{state,spool,log}
    cat >"$CONF" <<CONF
ClusterName=local
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=${SLURMCTLD_PORT:-6817}
SlurmdPort=${SLURMD_PORT:-6818}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=600
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=1000 State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
}

start() {
    install
    write_conf
    export SLURM_CONF=$CONF
    if ! pgrep -x munged >/dev/null; then
        mkdir -p /run/munge /var/log/munge /var/lib/munge
        [[ -f /etc/munge/munge.key ]] || mungekey --create
        munged --force
    fi
    [[ -f $DIR/slurmctld.pid ]] && kill -0 "$(cat "$DIR/slurmctld.pid")" 2>/dev/null \
        || slurmctld -f "$CONF"
    [[ -f $DIR/slurmd.pid ]] && kill -0 "$(cat "$DIR/slurmd.pid")" 2>/dev/null \
        || slurmd -f "$CONF"
    for _ in $(seq 60); do  # wait until the node takes jobs
        state=$(sinfo -h -N -o %t 2>/dev/null | head -n 1 || true)
        if [[ $state == idle* || $state == mix* || $state == alloc* ]]; then
            echo "local Slurm up: node $NODE ($state), SLURM_CONF=$CONF"
            return
        fi
        [[ $state == drain* || $state == down* ]] && scontrol update nodename="$NODE" state=resume || true
        sleep 1
    done
    echo "error: the node did not come up; see $DIR/log/" >&2
    sinfo -N -l >&2 || true
    exit 1
}

stop() {
    for daemon in slurmd slurmctld; do
        if [[ -f $DIR/$daemon.pid ]]; then
            kill "$(cat "$DIR/$daemon.pid")" 2>/dev/null || true
            rm -f "$DIR/$daemon.pid"
        fi
    done
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
