#!/usr/bin/env bash
# Weak scaling on this machine: tokens/s of a small model with 1 rank x 1 thread
# and 2 ranks x 1 thread, the same per-rank batch; prints efficiency
# (tokens/s at 2 ranks / (2 x tokens/s at 1 rank)) and the exposed-comm share
# (communication_ms / dt_ms of the run log's iterations).
#
# usage: benchmarks/weak_scaling.sh [BUILD_DIR] [ITERS] [PRESET] [extra --key=value ...]
#   BUILD_DIR  default build (needs bin/llmtrain)
#   ITERS      default 40 (the first 10 are warm-up and not counted)
#   PRESET     default inputs/tiny_llama.cfg
#   DATA_DIR   (env) token shards, default data/sotu_byte (made by llmtrain-prepare)
#   NPROCS     (env) rank counts to run, default "1 2"
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ITERS=${2:-40}
PRESET=${3:-inputs/tiny_llama.cfg}
shift $(( $# < 3 ? $# : 3 ))
DATA_DIR=${DATA_DIR:-data/sotu_byte}
NPROCS=${NPROCS:-"1 2"}
BIN=$BUILD/bin/llmtrain
[[ -x $BIN ]] || { echo "weak_scaling.sh: $BIN not found; build the llmtrain target first" >&2; exit 1; }
[[ -d $DATA_DIR ]] || { echo "weak_scaling.sh: no token shards in $DATA_DIR (DATA_DIR); make them with llmtrain-prepare" >&2; exit 1; }
OUT=$(mktemp -d /tmp/llmtrain-weak-XXXXXX)
# Other work on the same cores distorts every figure below: say how much there was.
CORES=$(getconf _NPROCESSORS_ONLN)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $CORES cores"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for np in $NPROCS; do
  mpiexec -n "$np" --bind-to core "$BIN" "$PRESET" --data_dir="$DATA_DIR" --out_dir="$OUT/np$np" \
    --num_threads=1 --max_iters="$ITERS" --eval_interval=1000000 --eval_iters=1 --log_interval=1000000 \
    --device=cpu "$@" > "$OUT/np$np.log" 2>&1 || { echo "run with $np ranks failed:"; tail -20 "$OUT/np$np.log"; exit 1; }
done
# The same number of independent 1-rank runs at the same time, no
# communication: what the cores deliver to that many processes (shared caches,
# memory bandwidth, other load). Efficiency against it isolates the cost of
# data parallelism itself.
MAXNP=$(echo $NPROCS | tr ' ' '\n' | sort -n | tail -1)
if (( MAXNP > 1 )); then
  pids=()
  for k in $(seq 1 "$MAXNP"); do
    mpiexec -n 1 --bind-to none "$BIN" "$PRESET" --data_dir="$DATA_DIR" --out_dir="$OUT/indep$k" \
      --num_threads=1 --max_iters="$ITERS" --eval_interval=1000000 --eval_iters=1 --log_interval=1000000 \
      --device=cpu "$@" > "$OUT/indep$k.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { echo "an independent run failed (see $OUT)"; exit 1; }; done
fi
python3 - "$OUT" $NPROCS <<'PY'
import glob, json, sys
out, nps = sys.argv[1], [int(x) for x in sys.argv[2:]]
warm = 10
rows = {}
for np in nps:
    log = json.load(open(sorted(glob.glob(f"{out}/np{np}/run_*.json"))[-1]))
    its = log["training_iterations"][warm:]
    dt = sum(r["dt_ms"] for r in its) / 1e3
    tok = sum(r["tokens"] for r in its)
    comm = sum(r.get("communication_ms", 0.0) for r in its) / 1e3
    fastest = min(r["dt_ms"] for r in its)  # least disturbed by other load on shared cores
    rows[np] = (tok / dt, tok / dt / np, comm / dt, len(its), dt / len(its) * 1e3, fastest)
base = rows[nps[0]][1]
indep = []
for path in sorted(glob.glob(f"{out}/indep*/run_*.json")):
    its = json.load(open(path))["training_iterations"][warm:]
    indep.append(sum(r["tokens"] for r in its) / (sum(r["dt_ms"] for r in its) / 1e3))
print(f"weak scaling, iterations {warm}.. of each run (1 thread per rank)")
print("| ranks | tokens/s | tokens/s per rank | ms/iter | efficiency | fastest ms/iter | efficiency (fastest) | exposed comm share |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for np in nps:
    tps, per, share, n, ms, fastest = rows[np]
    print(f"| {np} | {tps:.0f} | {per:.0f} | {ms:.1f} | {per / base:.3f} | {fastest:.1f} | "
          f"{rows[nps[0]][5] / fastest:.3f} | {share:.3%} |")
if indep:
    per = sum(indep) / len(indep)
    mine = rows[max(nps)][1]
    print()
    print(f"{len(indep)} independent 1-rank runs at once (no communication): {per:.0f} tokens/s each; "
          f"{max(nps)}-rank data parallel reaches {mine / per:.3f} of that per rank")
PY
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg) on $CORES cores"
echo "run logs: $OUT"
