#!/usr/bin/env bash
# Installs what llmtrain needs to build, test and run: the Debian 12 packages
# (MPI, parallel HDF5, Boost, ...), then the project's Python environment with the
# pinned torch wheel whose LibTorch (CPU + CUDA 13) the build links
# (scripts/python-env.sh; a venv outside the clone, ~/.cache/llmtrain/venv).
# The CUDA toolkit (nvcc) is not installed here: where /usr/local/cuda exists the
# build compiles and links the CUDA path, elsewhere it builds for CPU only.
# Idempotent: installs only what is missing. Needs root (or sudo) for apt.
# LLMTRAIN_DEPS=run (the quick start): only what building and running llmtrain
# needs (no test tools, no npm, no Slurm), and the Python environment's run profile.
set -euo pipefail
deps=${LLMTRAIN_DEPS:-all}
[[ "$deps" == all || "$deps" == run ]] || { echo "install-deps: LLMTRAIN_DEPS=$deps: expected all or run" >&2; exit 1; }

PKGS=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libopenmpi-dev openmpi-bin                  # MPI
  libhdf5-openmpi-dev                         # parallel HDF5 (MPI-IO)
  libboost-program-options-dev nlohmann-json3-dev   # fmt: LibTorch's own headers
  libpcre2-dev                                # tokenizer pre-split regex (Unicode properties)
  libicu-dev                                  # tokenizer NFC normalization (Qwen3)
  libzstd-dev zlib1g-dev liblzma-dev            # llmtrain-prepare: .jsonl.zst / .gz / .xz input
  python3 python3-venv                        # the venv (scripts/python-env.sh)
)
[[ "$deps" == run ]] || PKGS+=(
  libgtest-dev libgmock-dev libbenchmark-dev  # tests + microbenchmarks
  nodejs npm                                  # npm pack of the tokenizers, JS parity tests
  python3-yaml shellcheck                     # tests/slurm: spack.yaml parse, job-template lint
  zstd                                        # tests/data: writes the .jsonl.zst inputs
  chromium                                    # tests/report: the --html page in headless Chromium
)
if [[ "$deps" == all && "${LLMTRAIN_WITH_SLURM:-1}" == 1 ]]; then
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
profile=full; [[ "$deps" == all ]] || profile=run
[[ "${LLMTRAIN_SKIP_PYTHON_ENV:-0}" == 1 ]] || LLMTRAIN_PYTHON_PROFILE=$profile bash "$(dirname "$0")/python-env.sh"
echo "install-deps: done"
