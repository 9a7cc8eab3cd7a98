#!/usr/bin/env bash
# Step time and peak memory of activation_checkpointing none / full / selective
# (bench-checkpointing; fp32, or the forward under autocast with --dtype) for
# the tiny presets and the small CPU-benchmark presets, side by side per
# preset; run it on an idle machine for the step times (docs/memory.md), e.g.
#   benchmarks/checkpointing_table.sh build/bin/bench-checkpointing [--rounds=N] [--dtype=bfloat16]
set -euo pipefail
BENCH=${1:-build/bin/bench-checkpointing}
shift || true
HERE=$(cd "$(dirname "$0")/.." && pwd)
"$BENCH" "$@" "$HERE"/inputs/tiny_gpt2.cfg "$HERE"/inputs/tiny_llama.cfg "$HERE"/inputs/tiny_llama3.cfg \
  "$HERE"/inputs/tiny_qwen3.cfg "$HERE"/inputs/bench_gpt2_small.cfg "$HERE"/inputs/bench_llama_small.cfg
