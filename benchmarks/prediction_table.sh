#!/usr/bin/env bash
# prediction_table.sh [options of prediction_table.py]
# Predicted against measured step time on this machine: each run calibrates itself
# (device_profile=calibrate), trains, compares
# (docs/performance-model.md). Example:
#   benchmarks/prediction_table.sh --build build --iters 30
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=${LLMTRAIN_PYTHON:-}
[[ -z "$py" && -x "$HOME/.cache/llmtrain/venv/bin/python" ]] && py=$HOME/.cache/llmtrain/venv/bin/python
py=${py:-python3}
exec "$py" "$here/prediction_table.py" --python "$py" "$@"
