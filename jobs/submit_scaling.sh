#!/usr/bin/env bash
# jobs/submit_scaling.sh weak|strong [more sbatch options...]
# A scaling study: one jobs/<kind>_scaling.sbatch job per node count (a job
# array cannot change the node count per element), all writing into one
# STUDY_DIR, then a report job (jobs/scaling_report.sbatch) that runs after all
# of them, finished or failed, and tabulates `llmtrain-report --scaling`.
#   jobs/submit_scaling.sh weak
#   NODE_COUNTS="1 2 4 8 16" GPUS_PER_NODE=4 jobs/submit_scaling.sh strong --partition=gpu
#   SCALE_BY=tasks COUNTS="1 2 4 8" jobs/submit_scaling.sh weak   # within one node
# Variables (plus everything the templates read: MODEL ITERS BATCH_SIZE ...):
#   SCALE_BY       nodes (default) | tasks (ranks on a single node)
#   NODE_COUNTS    node counts for SCALE_BY=nodes                 ["1 2 4 8"]
#   COUNTS         rank counts for SCALE_BY=tasks                 ["1 2 4 8"]
#   GPUS_PER_NODE  GPUs (= ranks) per node for SCALE_BY=nodes; with SCALE_BY=tasks,
#                  0 means CPU ranks (no GPUs requested)          [8]
#   CPUS_PER_TASK  --cpus-per-task of every point                 [template default]
#   STUDY_DIR      where the points and the report go  [$OUT_ROOT/<kind>_scaling_<date-time>]
#   WAIT=1         wait for the report job; exit with its status (used by the tests)
# Prints the job ids and, at the end, where the report will be.
set -euo pipefail
kind=${1:?usage: jobs/submit_scaling.sh weak|strong [sbatch options...]}
shift
[[ "$kind" == weak || "$kind" == strong ]] || { echo "submit_scaling.sh: kind '$kind': expected weak or strong" >&2; exit 1; }
jobs_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${SCALE_BY:=nodes}"
: "${GPUS_PER_NODE:=8}"
: "${OUT_ROOT:=$PWD/out}"
: "${STUDY_DIR:=$OUT_ROOT/${kind}_scaling_$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$STUDY_DIR" logs
STUDY_DIR=$(cd "$STUDY_DIR" && pwd)
export STUDY_DIR LLMTRAIN_JOBS_DIR=$jobs_dir

case "$SCALE_BY" in
  nodes) counts=${NODE_COUNTS:-1 2 4 8} ;;
  tasks) counts=${COUNTS:-1 2 4 8} ;;
  *) echo "submit_scaling.sh: SCALE_BY='$SCALE_BY': expected nodes or tasks" >&2; exit 1 ;;
esac
ids=()
for n in $counts; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "submit_scaling.sh: count '$n' is not a positive integer" >&2; exit 1; }
  opts=(--parsable --job-name="${kind}_scaling_${SCALE_BY}${n}")
  if [[ "$SCALE_BY" == nodes ]]; then
    opts+=(--nodes="$n" --ntasks-per-node="$GPUS_PER_NODE" --gpus-per-node="$GPUS_PER_NODE")
  else
    opts+=(--nodes=1 --ntasks-per-node="$n")
    if ((GPUS_PER_NODE > 0)); then opts+=(--gpus-per-node="$n"); else opts+=(--gpus-per-node=0); fi
  fi
  [[ -n "${CPUS_PER_TASK:-}" ]] && opts+=(--cpus-per-task="$CPUS_PER_TASK")
  id=$(sbatch "${opts[@]}" "$@" "$jobs_dir/${kind}_scaling.sbatch")
  id=${id%%;*}
  echo "submit_scaling.sh: $SCALE_BY=$n -> job $id"
  ids+=("$id")
done
dep=$(IFS=:; echo "${ids[*]}")
ropts=(--parsable --dependency="afterany:$dep" --job-name="${kind}_scaling_report"
       --nodes=1 --ntasks=1 --cpus-per-task=1 --gpus-per-node=0)
# Pass through the sbatch options that pick where jobs may run (partition, account...).
for a in "$@"; do
  case "$a" in --partition=*|--account=*|--qos=*|--reservation=*|--clusters=*|-p*|-A*) ropts+=("$a") ;; esac
done
if [[ "${WAIT:-0}" == 1 ]]; then
  # Polled every second (sbatch --wait sleeps 2, 8, then 32 s between its looks):
  # done once the job is no longer pending, running or completing; its exit code
  # as sbatch --wait gives it (1 where a signal ended it).
  rid=$(sbatch "${ropts[@]}" "$jobs_dir/scaling_report.sbatch")
  rid=${rid%%;*}
  while :; do
    info=$(scontrol show job "$rid" 2>/dev/null || true)
    state=$(grep -oE '(^| )JobState=[A-Z_]+' <<<"$info" | head -n1 | cut -d= -f2 || true)
    case $state in
      "" | PENDING | CONFIGURING | RUNNING | COMPLETING | SUSPENDED | REQUEUE* | RESIZING | SIGNALING | STAGE_OUT) sleep 1 ;;
      *) break ;;
    esac
  done
  code=$(grep -oE '(^| )ExitCode=[0-9]+:[0-9]+' <<<"$info" | head -n1 | cut -d= -f2)
  if [[ ${code#*:} != 0 ]]; then rc=1; else rc=${code%%:*}; fi
  echo "submit_scaling.sh: report job $rid finished ($state) with exit code $rc: $STUDY_DIR/scaling_report.txt"
  exit "$rc"
fi
rid=$(sbatch "${ropts[@]}" "$jobs_dir/scaling_report.sbatch")
echo "submit_scaling.sh: report job ${rid%%;*} runs after ${ids[*]}; table: $STUDY_DIR/scaling_report.txt"
