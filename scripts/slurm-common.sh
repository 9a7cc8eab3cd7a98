# shellcheck shell=bash
# shellcheck disable=SC2154  # dir comes from the sourcing script
# Sourced by scripts/slurm-local.sh and scripts/slurm-cluster.sh: the parts of a
# private test Slurm that both build the same way. Expects `dir` (the state
# directory), `skip` and `die`.

# slurm_start_munge: a munged of this cluster's own, with a private key and
# socket under $dir; sets `sock` to the socket's path. munged wants the key dir
# private and the socket dir world-traversable; a unix socket path must stay
# under ~100 bytes, so a long $dir gets its socket dir under /run (not /tmp:
# the multi-node cluster gives every host a /tmp of its own).
slurm_start_munge() {
  mkdir -p "$dir/munge" "$dir/log"
  chmod 700 "$dir/munge"
  local sockdir="$dir/munge-sock"
  if ((${#sockdir} > 80)); then
    sockdir=$(mktemp -d /run/llmtrain-slurm-munge.XXXXXX)
    echo "$sockdir" >"$dir/munge/sockdir.tmp"
  fi
  mkdir -p "$sockdir"; chmod 755 "$sockdir"
  sock="$sockdir/munge.socket"
  if [[ ! -f "$dir/munge/munge.key" ]]; then
    head -c 1024 /dev/urandom >"$dir/munge/munge.key"
    chmod 400 "$dir/munge/munge.key"
  fi
  munged --socket="$sock" --key-file="$dir/munge/munge.key" --log-file="$dir/log/munged.log" \
         --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed" ||
    { cat "$dir/log/munged.log" >&2 || true; skip "munged did not start (log above)"; }
  munge -S "$sock" -n | unmunge -S "$sock" >/dev/null || die "munge credential round trip failed"
}

# slurm_remove_munge_sockdir: what slurm_start_munge made outside $dir.
slurm_remove_munge_sockdir() {
  if [[ -f "$dir/munge/sockdir.tmp" ]]; then rm -rf "$(cat "$dir/munge/sockdir.tmp")"; rm -f "$dir/munge/sockdir.tmp"; fi
}

# slurm_conf_plugins: the slurm.conf lines both clusters share (root daemons,
# munge on $sock, no cgroups, no accounting, consumable cores).
slurm_conf_plugins() {
  cat <<CONF
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$dir/state
SlurmctldLogFile=$dir/log/slurmctld.log
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
MinJobAge=600
CONF
}
