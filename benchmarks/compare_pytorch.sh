#!/usr/bin/env bash
# compare_pytorch.sh [options of compare_pytorch.py]
# llmtrain against PyTorch eager and torch.compile on the same torch wheel, side
# by side in one call (see benchmarks/compare_pytorch.py for the method).
#   benchmarks/compare_pytorch.sh
#   benchmarks/compare_pytorch.sh --configs gpt2_small,llama_small --rounds 3
#   benchmarks/compare_pytorch.sh --device cuda --configs llama_1.36b --rounds 1 --iters 10 --warmup 5 --deadline_s 240
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# The Python whose torch llmtrain links, found as CMake finds it.
py=${LLMTRAIN_PYTHON:-}
[[ -z "$py" && -n "${LLMTRAIN_VENV:-}" ]] && py=$LLMTRAIN_VENV/bin/python
[[ -z "$py" && -x "$HOME/.cache/llmtrain/venv/bin/python" ]] && py=$HOME/.cache/llmtrain/venv/bin/python
py=${py:-python3}
exec "$py" "$here/compare_pytorch.py" --python "$py" "$@"
