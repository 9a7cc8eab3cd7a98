#!/usr/bin/env bash
# slurm-cluster.sh start|stop|status|exec|on|shape|kill-node STATE_DIR ...
#
# A private multi-node Slurm cluster on this one machine, for the tests of jobs
# that span nodes. Each node is a host of its own: a network namespace with
# its own address, its own hostname (UTS namespace), /etc/hosts and /tmp
# (mount namespace: PMIx and Open MPI keep per-node files in /tmp), running
# its own slurmd. The controller is one more namespace
# ("login"), holding a bridge that joins the nodes' veth links; slurmctld runs
# there, and so do the client commands (sbatch, squeue, ...). Nothing listens
# on or sends to an address outside these namespaces. Files (config, state,
# spools, logs, pid files, munge key) all live under STATE_DIR.
#
#   start STATE_DIR [--nodes N] [--cpus C] [--slurmd-timeout S] [--share PATH]...
#         N hosts node1..nodeN (default 3) with C CPUs each (default 2), on
#         10.77.0.11.. behind the login host 10.77.0.1; waits until every node
#         is idle. A node that stops answering is DOWN after S seconds
#         (SlurmdTimeout, default 10; Slurm's own default is 300). Each host
#         has a /tmp of its own; STATE_DIR and every --share PATH (the
#         checkout, the build, the jobs' working directories) stay visible on
#         every host even where they lie under /tmp.
#   stop STATE_DIR          stops every process of the cluster's namespaces and
#                           deletes the namespaces.
#   status STATE_DIR        sinfo + squeue.
#   exec STATE_DIR CMD...   runs CMD on the login host with SLURM_CONF set
#                           (sbatch, squeue, scontrol, or a test script).
#   on STATE_DIR NODE CMD...  runs CMD on compute host NODE.
#   shape STATE_DIR "QDISC ARGS" | clear
#         puts a tc qdisc on every node's link (each host's egress, so both
#         directions), e.g. shape DIR "netem rate 1gbit delay 0.5ms" or, where
#         the kernel has no netem, shape DIR "tbf rate 1gbit burst 128kb
#         latency 50ms"; 'clear' removes it.
#   kill-node STATE_DIR NODE
#         the node dies as a machine does when it loses power: its link goes
#         down first (no TCP reset reaches its peers), then every process in
#         its namespace (slurmd, slurmstepd, job ranks) gets SIGKILL.
#
# Exit codes: 0 ok, 1 error, 77 cannot run here (not root, no network
# namespaces, Slurm/munge/iproute2 missing): the harness skips on 77.
set -euo pipefail

usage() {
  sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 1
}
cmd=${1:-}; dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || usage
shift 2
export PATH=$PATH:/usr/sbin:/sbin
skip() { echo "slurm-cluster: SKIP: $*" >&2; exit 77; }
die() { echo "slurm-cluster: ERROR: $*" >&2; exit 1; }
# shellcheck source=scripts/slurm-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm-common.sh"

SUBNET=10.77.0
[[ "$cmd" == start ]] && mkdir -p "$dir"
[[ -d "$dir" ]] || die "no cluster directory '$dir'"
dir=$(cd "$dir" && pwd)
# Namespace names are unique per STATE_DIR, so two clusters can coexist.
tag=$(printf '%s' "$dir" | md5sum | cut -c1-6)
ns_login=llmt$tag-login
ns_node() { echo "llmt$tag-$1"; }

nodes() { [[ -f "$dir/nodes" ]] && cat "$dir/nodes"; }

# in_host NS HOSTNAME CMD... : CMD inside network namespace NS with its own
# hostname, /etc/hosts and /tmp (private UTS + mount namespaces). The host's
# /tmp is its directory under $dir/tmp, except for the shared paths (tmp_shares)
# that lie under the machine's /tmp: the cluster's own directory and every
# `start --share PATH`, bound into the host's /tmp first so that a checkout or
# build under /tmp stays visible on every host.
in_host() {
  local ns=$1 name=$2 rels; shift 2
  mapfile -t rels < <(tmp_shares)
  # nsenter, not `ip netns exec`: the latter remounts /sys, hiding the cgroup
  # file system that slurmd reads.
  # shellcheck disable=SC2016  # $1.. belong to the inner shell
  nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation private \
    /bin/bash -c 'set -e; hostname "$1"; mount --bind "$2" /etc/hosts; tmp=$3; n=$4; shift 4
      for rel in "${@:1:n}"; do mkdir -p "$tmp$rel"; mount --bind "/tmp$rel" "$tmp$rel"; done
      shift "$n"; mount --rbind "$tmp" /tmp; exec "$@"' \
    _ "$name" "$dir/hosts" "$dir/tmp/$name" "${#rels[@]}" "${rels[@]}" "$@"
}

# tmp_shares: the shared paths under /tmp, as /REL (relative to /tmp), outermost
# only, read from $dir/shares (written by start) plus $dir itself.
tmp_shares() {
  { echo "$dir"; [[ -f "$dir/shares" ]] && cat "$dir/shares"; } | LC_ALL=C sort -u |
    awk '/^\/tmp\// { p = substr($0, 5); for (s in kept) if (index(p "/", s "/") == 1) next; kept[p]; print p }'
}

login_env() { export SLURM_CONF=$dir/slurm.conf; }

kill_ns() {  # SIGKILL everything in a network namespace, wait until gone
  local ns=$1 i pids
  for ((i = 0; i < 50; i++)); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -z "$pids" ]] && return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  echo "slurm-cluster: processes left in $ns: $pids" >&2
}

do_stop() {
  local n
  for n in $(nodes); do
    kill_ns "$(ns_node "$n")"
    ip netns del "$(ns_node "$n")" 2>/dev/null || true
  done
  kill_ns "$ns_login"
  ip netns del "$ns_login" 2>/dev/null || true
  rm -f "$dir/nodes"
  if [[ -f "$dir/munge/munged.pid" ]]; then
    local pid; pid=$(tr -dc '0-9' <"$dir/munge/munged.pid")
    [[ -n "$pid" && "$(cat "/proc/$pid/comm" 2>/dev/null)" == munged* ]] && kill -TERM "$pid" 2>/dev/null
    rm -f "$dir/munge/munged.pid"
  fi
  slurm_remove_munge_sockdir
  echo "slurm-cluster: stopped $dir"
}

do_start() {
  local nnodes=3 cpus=2 slurmd_timeout=10
  rm -f "$dir/shares"
  while (($#)); do
    case "$1" in
      --nodes) nnodes=${2:?--nodes needs a number}; shift 2 ;;
      --cpus) cpus=${2:?--cpus needs a number}; shift 2 ;;
      --slurmd-timeout) slurmd_timeout=${2:?--slurmd-timeout needs seconds}; shift 2 ;;
      --share) [[ -d "${2:?--share needs a directory}" ]] || die "--share $2: no such directory"
               (cd "$2" && pwd -P) >>"$dir/shares"; shift 2 ;;
      *) die "unknown option '$1'" ;;
    esac
  done
  ((nnodes >= 1 && nnodes <= 50)) || die "--nodes $nnodes: expected 1..50"
  [[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces, slurmd) - you are $(id -un)"
  local b
  for b in ip tc unshare nsenter slurmctld slurmd munged munge sbatch sinfo scontrol python3; do
    command -v "$b" >/dev/null 2>&1 || skip "'$b' not found (Debian: apt-get install iproute2 util-linux slurm-wlm munge)"
  done
  ip netns add "$ns_login" 2>/dev/null || skip "cannot create network namespaces here (ip netns add failed)"

  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log" "$dir/run" "$dir/tmp/login"
  local i n names=()
  for ((i = 1; i <= nnodes; i++)); do names+=("node$i"); mkdir -p "$dir/tmp/node$i"; done
  chmod 1777 "$dir"/tmp/*
  printf '%s\n' "${names[@]}" >"$dir/nodes"

  # --- network: a bridge in the login namespace, one veth pair per node.
  {
    echo "127.0.0.1 localhost"
    echo "$SUBNET.1 login"
    for ((i = 1; i <= nnodes; i++)); do echo "$SUBNET.$((10 + i)) node$i"; done
  } >"$dir/hosts"
  ip -n "$ns_login" link set lo up
  ip -n "$ns_login" link add br0 type bridge
  ip -n "$ns_login" addr add "$SUBNET.1/24" dev br0
  ip -n "$ns_login" link set br0 up
  for ((i = 1; i <= nnodes; i++)); do
    n=node$i
    local ns; ns=$(ns_node "$n")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$ns" link add eth0 type veth peer name "v$n" netns "$ns_login"
    ip -n "$ns" addr add "$SUBNET.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns_login" link set "v$n" master br0
    ip -n "$ns_login" link set "v$n" up
  done

  # --- munge: a private key and socket (a unix socket reaches every namespace).
  local sock
  slurm_start_munge

  local mem
  mem=$(awk -v n="$nnodes" '/MemTotal/ {printf "%d", $2 / 1024 * 0.8 / n}' /proc/meminfo)
  {
    cat <<EOF
# Generated by scripts/slurm-cluster.sh for a private multi-node test cluster.
ClusterName=llmtrain-multi
SlurmctldHost=login($SUBNET.1)
$(slurm_conf_plugins)
SlurmdSpoolDir=$dir/spool/%n
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
# A node that stops answering is declared DOWN after SlurmdTimeout; its jobs
# then end with NODE_FAIL (and are requeued when they asked for --requeue).
SlurmdTimeout=$slurmd_timeout
MessageTimeout=5
KillWait=5
EOF
    for ((i = 1; i <= nnodes; i++)); do
      echo "NodeName=node$i NodeAddr=$SUBNET.$((10 + i)) NodeHostname=node$i CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=node[1-$nnodes] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
  } >"$dir/slurm.conf"
  cat >"$dir/env.sh" <<EOF
# Client commands must run on the login host: scripts/slurm-cluster.sh exec $dir CMD...
export SLURM_CONF=$dir/slurm.conf
export PATH=\$PATH:/usr/sbin
EOF
  login_env

  in_host "$ns_login" login slurmctld -c ||
    { tail -20 "$dir/log/slurmctld.log" >&2 || true; die "slurmctld did not start"; }
  for n in "${names[@]}"; do
    mkdir -p "$dir/spool/$n"
    in_host "$(ns_node "$n")" "$n" slurmd -N "$n" ||
      { tail -20 "$dir/log/slurmd-$n.log" >&2 || true; die "slurmd on $n did not start"; }
  done

  local state=""
  for ((i = 0; i < 300; i++)); do
    state=$(ip netns exec "$ns_login" sinfo -h -o '%T %D' 2>/dev/null | tr '\n' ' ' || true)
    [[ "$state" == "idle $nnodes " ]] && break
    sleep 0.2
  done
  if [[ "$state" != "idle $nnodes " ]]; then
    tail -n 20 "$dir/log/slurmctld.log" >&2 || true
    die "the nodes did not all become idle (sinfo: '$state')"
  fi
  echo "slurm-cluster: $nnodes nodes up ($SUBNET.11-$((10 + nnodes)), $cpus CPUs each), controller on login ($SUBNET.1); run commands with: $0 exec $dir CMD..."
}

case "$cmd" in
  start)
    [[ ! -f "$dir/nodes" ]] || die "$dir already holds a cluster (slurm-cluster.sh stop $dir first)"
    trap 'rc=$?; if ((rc != 0)); then do_stop >&2; fi' EXIT
    do_start "$@"
    trap - EXIT ;;
  stop) do_stop ;;
  status)
    login_env
    ip netns exec "$ns_login" sinfo
    ip netns exec "$ns_login" squeue ;;
  exec)
    (($#)) || die "exec: no command"
    login_env
    in_host "$ns_login" login "$@" ;;
  on)
    node=${1:?on: which node}; shift
    grep -qx "$node" <(nodes) || die "no node '$node' in $dir (nodes: $(nodes | tr '\n' ' '))"
    (($#)) || die "on: no command"
    login_env
    in_host "$(ns_node "$node")" "$node" "$@" ;;
  shape)
    spec=${1:?shape: give a qdisc such as \"netem rate 1gbit delay 0.5ms\" or \"tbf rate 1gbit burst 128kb latency 50ms\", or clear}
    for n in $(nodes); do
      tc -n "$(ns_node "$n")" qdisc del dev eth0 root 2>/dev/null || true
      if [[ "$spec" != clear ]]; then
        # shellcheck disable=SC2086
        tc -n "$(ns_node "$n")" qdisc add dev eth0 root $spec ||
          die "tc qdisc add dev eth0 root $spec failed on $n (is the qdisc in this kernel? netem needs CONFIG_NET_SCH_NETEM)"
      fi
    done
    echo "slurm-cluster: every node's link (egress): ${spec}" ;;
  kill-node)
    node=${1:?kill-node: which node}
    grep -qx "$node" <(nodes) || die "no node '$node' in $dir"
    ip -n "$ns_login" link set "v$node" down
    kill_ns "$(ns_node "$node")"
    echo "slurm-cluster: $node is dead (link down, every process killed) at $(date +%s.%N)" ;;
  *) usage ;;
esac
