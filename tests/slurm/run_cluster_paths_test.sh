#!/usr/bin/env bash
# The multi-node test cluster works wherever the checkout lives: each host of
# scripts/slurm-cluster.sh has a /tmp of its own, and a cluster directory or a
# shared directory under /tmp must stay visible on every host. A 2-host cluster
# with its state under /tmp runs a 2-node job that reads a file from a shared
# directory under /tmp and writes one per node beside it; each host still has
# a private /tmp (a file one host writes there is not seen by the other).
# Exit: 0 pass, 1 fail, 77 skip (not root, no network namespaces or Slurm).
set -uo pipefail
src=${LLMTRAIN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
S=$src/scripts/slurm-cluster.sh
fail() { echo "FAIL: $*" >&2; exit 1; }
top=$(mktemp -d /tmp/llmtrain-cluster-paths.XXXXXX) && chmod 755 "$top"
cluster=$top/cluster share=$top/checkout
mkdir -p "$share"
echo "visible" >"$share/input.txt"
cleanup() { "$S" stop "$cluster" >/dev/null 2>&1; rm -rf "$top"; }
"$S" start "$cluster" --nodes 2 --cpus 1 --share "$share"
rc=$?
((rc == 77)) && { rm -rf "$top"; exit 77; }
trap cleanup EXIT
((rc == 0)) || fail "the cluster did not start with its directory under /tmp (exit $rc)"
cat >"$share/job.sh" <<'JOB'
#!/bin/bash
cd "$1" && srun --ntasks-per-node=1 bash -c 'cat input.txt >"seen_$(hostname)"; touch /tmp/private_$(hostname); ls /tmp >"tmp_$(hostname)"'
JOB
"$S" exec "$cluster" sbatch --wait --nodes=2 --ntasks-per-node=1 --chdir="$share" -o "$share/job.out" \
  "$share/job.sh" "$share" >/dev/null || { cat "$share/job.out" 2>/dev/null; fail "the 2-node job failed"; }
for n in node1 node2; do
  [[ "$(cat "$share/seen_$n" 2>/dev/null)" == visible ]] || { cat "$share/job.out"; fail "$n did not read $share/input.txt"; }
done
grep -q private_node2 "$share/tmp_node1" && fail "node1's /tmp shows node2's files: /tmp is not private"
grep -q private_node1 "$share/tmp_node1" || fail "node1's /tmp lacks its own file"
echo "PASS: a cluster and a shared directory under /tmp are visible on node1 and node2; each /tmp stays private"
