#!/usr/bin/env bash
# jobs/submit.sh TEMPLATE [more sbatch options...]
# sbatch with the node/GPU layout taken from environment variables, for users
# who keep everything in variables (the #SBATCH lines in a template cannot read
# them). Unset variables leave the template's own #SBATCH values in force.
#   NODES=2 GPUS_PER_NODE=4 MODEL=inputs/full_qwen3_1.8b_optimal.cfg jobs/submit.sh jobs/tier2.sbatch
#   NODES           --nodes
#   GPUS_PER_NODE   --gpus-per-node and --ntasks-per-node (one rank per GPU; 0 = CPU only)
#   TASKS_PER_NODE  --ntasks-per-node when it should differ (CPU runs: GPUS_PER_NODE=0 TASKS_PER_NODE=2)
#   CPUS_PER_TASK   --cpus-per-task (threads per rank)
#   TIME PARTITION ACCOUNT QOS   --time --partition --account --qos
# Creates logs/ (sbatch does not create the directory of --output=logs/%x_%j.out).
# Prints sbatch's output; extra arguments (e.g. --wait, --parsable) go to sbatch.
set -euo pipefail
tpl=${1:?usage: jobs/submit.sh TEMPLATE [sbatch options...]}
shift
[[ -f "$tpl" ]] || { echo "submit.sh: no such template '$tpl'" >&2; exit 1; }
opts=()
[[ -n "${NODES:-}" ]] && opts+=("--nodes=$NODES")
if [[ -n "${GPUS_PER_NODE:-}" ]]; then
  opts+=("--gpus-per-node=$GPUS_PER_NODE")
  ((GPUS_PER_NODE > 0)) && [[ -z "${TASKS_PER_NODE:-}" ]] && opts+=("--ntasks-per-node=$GPUS_PER_NODE")
fi
[[ -n "${TASKS_PER_NODE:-}" ]] && opts+=("--ntasks-per-node=$TASKS_PER_NODE")
[[ -n "${CPUS_PER_TASK:-}" ]] && opts+=("--cpus-per-task=$CPUS_PER_TASK")
[[ -n "${TIME:-}" ]] && opts+=("--time=$TIME")
[[ -n "${PARTITION:-}" ]] && opts+=("--partition=$PARTITION")
[[ -n "${ACCOUNT:-}" ]] && opts+=("--account=$ACCOUNT")
[[ -n "${QOS:-}" ]] && opts+=("--qos=$QOS")
mkdir -p logs
exec sbatch "${opts[@]}" "$@" "$tpl"
