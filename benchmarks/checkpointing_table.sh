#!/usr/bin/env bash
# Step time and peak memory of activation_checkpointing none / full / selective
# (bench-checkpointing) for the tiny presets and the small CPU-benchmark
# presets, e.g.
#   benchmarks/checkpointing_table.sh build/bin/bench-checkpointing [--rounds=N]
set -euo pipefail
BENCH=${1:-build/bin/bench-checkpointing}
shift || true
HERE=$(cd "$(dirname "$0")/.." && pwd)
"$BENCH" "$@" "$HERE"/inputs/tiny_gpt2.cfg "$HERE"/inputs/tiny_llama.cfg "$HERE"/inputs/tiny_llama3.cfg \
  "$HERE"/inputs/tiny_qwen3.cfg "$HERE"/inputs/bench_gpt2_small.cfg "$HERE"/inputs/bench_llama_small.cfg
