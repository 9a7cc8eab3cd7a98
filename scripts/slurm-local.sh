#!/usr/bin/env bash
# slurm-local.sh start|stop|status STATE_DIR [--cpus N] [--gpus N]
#
# A private single-node Slurm cluster for testing the job templates on this
# machine: its own munged (own key and socket), its own slurmctld and slurmd on
# free ports, every file (config, state, spool, logs, pid files) under STATE_DIR.
# Nothing system-wide is touched, so it can run next to a real Slurm or another
# copy of itself. Needs root (slurmd runs jobs as their submitting user) and
# Debian's slurm-wlm + munge (scripts/install-deps.sh).
#
#   start   writes STATE_DIR/slurm.conf and STATE_DIR/env.sh, starts the daemons,
#           waits until the node is idle. Use: source STATE_DIR/env.sh (sets
#           SLURM_CONF), then sbatch/srun/squeue/scontrol as usual.
#   stop    stops the daemons this STATE_DIR started (by the pids in their pid
#           files, never by name) and waits for them to exit.
#   status  sinfo + squeue of this cluster.
#
# Exit codes: 0 ok, 1 error, 77 cannot run here (not root, Slurm/munge missing):
# the test harness turns 77 into a skipped test.
#
# --gpus N declares N count-only GPUs (GRES without device files) so that
# templates asking for --gpus-per-node are schedulable on a CPU-only machine.
set -euo pipefail

usage() { echo "usage: slurm-local.sh start|stop|status STATE_DIR [--cpus N] [--gpus N]" >&2; exit 1; }
cmd=${1:-}; dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || usage
shift 2
cpus=2; gpus=8
while (($#)); do
  case "$1" in
    --cpus) cpus=${2:?--cpus needs a number}; shift 2 ;;
    --gpus) gpus=${2:?--gpus needs a number}; shift 2 ;;
    *) echo "slurm-local: unknown option '$1'" >&2; usage ;;
  esac
done
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

skip() { echo "slurm-local: SKIP: $*" >&2; exit 77; }
die() { echo "slurm-local: ERROR: $*" >&2; exit 1; }

# Stops one daemon by the pid in its pid file, if that pid is still the daemon
# we started (same executable name), then waits up to 10 s for it to go.
stop_pidfile() {
  local pidfile=$1 name=$2 pid i
  [[ -f "$pidfile" ]] || return 0
  pid=$(tr -dc '0-9' <"$pidfile")
  rm -f "$pidfile"
  [[ -n "$pid" ]] || return 0
  if [[ -r /proc/$pid/comm ]] && [[ "$(cat "/proc/$pid/comm")" == "$name"* ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      [[ -e /proc/$pid ]] || return 0
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
}

# A TCP port nobody listens on (the kernel picks it; tiny race is acceptable).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

do_stop() {
  stop_pidfile "$dir/slurmd.pid" slurmd
  stop_pidfile "$dir/slurmctld.pid" slurmctld
  stop_pidfile "$dir/munge/munged.pid" munged
  echo "slurm-local: stopped daemons of $dir"
}

do_start() {
  [[ $(id -u) -eq 0 ]] || skip "needs root to run slurmd (you are $(id -un))"
  local b
  for b in slurmctld slurmd munged munge sbatch sinfo scontrol python3; do
    command -v "$b" >/dev/null 2>&1 || [[ -x /usr/sbin/$b ]] ||
      skip "'$b' not found (Debian: apt-get install slurm-wlm munge)"
  done
  export PATH=$PATH:/usr/sbin
  [[ ! -f "$dir/slurmctld.pid" ]] || die "$dir already has a running cluster (slurm-local.sh stop $dir first)"

  # --- munge: private key + socket. munged wants the key dir private and the
  # socket dir world-traversable; a unix socket path must stay under ~100 bytes.
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
  chmod 700 "$dir/munge"
  local sockdir="$dir/munge-sock"
  if ((${#sockdir} > 80)); then
    sockdir=$(mktemp -d /tmp/slurm-local-munge.XXXXXX)
    echo "$sockdir" >"$dir/munge/sockdir.tmp"
  fi
  mkdir -p "$sockdir"; chmod 755 "$sockdir"
  local sock="$sockdir/munge.socket"
  if [[ ! -f "$dir/munge/munge.key" ]]; then
    head -c 1024 /dev/urandom >"$dir/munge/munge.key"
    chmod 400 "$dir/munge/munge.key"
  fi
  munged --socket="$sock" --key-file="$dir/munge/munge.key" --log-file="$dir/log/munged.log" \
         --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed" ||
    { cat "$dir/log/munged.log" >&2 || true; skip "munged did not start (log above)"; }
  munge -S "$sock" -n | unmunge -S "$sock" >/dev/null || die "munge credential round trip failed"

  # --- slurm.conf: localhost, free ports, count-only GPUs, all state here.
  local host ctl_port d_port mem
  host=$(hostname -s)
  ctl_port=$(free_port); d_port=$(free_port)
  mem=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.8}' /proc/meminfo)
  local gres_node="" gres_types=""
  if ((gpus > 0)); then
    gres_types="GresTypes=gpu"
    gres_node="Gres=gpu:$gpus"
    # slurmd drops GPUs without device files; placeholder files stand in for
    # /dev/nvidiaN (no cgroup device constraint here, so nothing opens them).
    mkdir -p "$dir/fake-dev"
    local g
    for ((g = 0; g < gpus; g++)); do : >"$dir/fake-dev/nvidia$g"; done
    echo "NodeName=$host Name=gpu File=$dir/fake-dev/nvidia[0-$((gpus - 1))]" >"$dir/gres.conf"
  else
    : >"$dir/gres.conf"
  fi
  cat >"$dir/slurm.conf" <<EOF
# Generated by scripts/slurm-local.sh for a private test cluster; do not edit.
ClusterName=llmtrain-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
MinJobAge=600
KillWait=10
$gres_types
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem $gres_node State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  cat >"$dir/env.sh" <<EOF
# source this to talk to the test cluster in $dir
export SLURM_CONF=$dir/slurm.conf
export PATH=\$PATH:/usr/sbin
EOF
  export SLURM_CONF="$dir/slurm.conf"

  slurmctld -c || { tail -20 "$dir/log/slurmctld.log" >&2 || true; die "slurmctld did not start"; }
  slurmd -N "$host" || { tail -20 "$dir/log/slurmd.log" >&2 || true; die "slurmd did not start"; }

  local i state=""
  for ((i = 0; i < 150; i++)); do
    state=$(sinfo -h -n "$host" -o '%T' 2>/dev/null || true)
    [[ "$state" == idle* ]] && break
    [[ "$state" == inval* || "$state" == drain* ]] && break
    sleep 0.2
  done
  if [[ "$state" != idle* ]]; then
    echo "--- slurmctld.log" >&2; tail -20 "$dir/log/slurmctld.log" >&2 || true
    echo "--- slurmd.log" >&2; tail -20 "$dir/log/slurmd.log" >&2 || true
    die "node $host did not become idle (state '$state')"
  fi
  echo "slurm-local: cluster up in $dir (node $host, $cpus CPUs, $gpus count-only GPUs, port $ctl_port); source $dir/env.sh"
}

case "$cmd" in
  start)
    # Half-started clusters must not leak daemons.
    trap 'rc=$?; if ((rc != 0)); then do_stop >&2; fi' EXIT
    do_start
    trap - EXIT ;;
  stop)
    do_stop
    if [[ -f "$dir/munge/sockdir.tmp" ]]; then rm -rf "$(cat "$dir/munge/sockdir.tmp")"; rm -f "$dir/munge/sockdir.tmp"; fi ;;
  status)
    export SLURM_CONF="$dir/slurm.conf"
    sinfo; squeue ;;
  *) usage ;;
esac
