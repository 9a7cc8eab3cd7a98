#!/usr/bin/env bash
# scripts/gpu-session.sh prepare|call PLAN — a lent GPU's 15 minutes as two prepared calls.
#
# A session is lent one GPU machine for about 15 minutes of device time in all, 10 a call, and a
# bare machine each call (docs/gpu.md). Nothing may be built there: this script prepares here
# what scripts/gpu-check.sh needs, and runs it there with the stages the plan names.
#
# Here, on the machine without a GPU, from the project root (about 3 minutes with a warm ccache
# and an existing CUDA build directory; about 40 without):
#   scripts/gpu-session.sh prepare [BUILD_DIR]
#     BUILD_DIR (default build-gpu): a CUDA build with tests and benchmarks, configured here if
#     absent; it is built, packed by scripts/pack-build.sh into .gpu/build.tar.xz, a byte corpus
#     of the project's docs is prepared into .gpu/data, ../shared/gpu-kit is copied to .gpu-kit.
#     .gpu and .gpu-kit are added to .git/info/exclude; the device tool carries them.
# There, through the device tool, with carry [".gpu", ".gpu-kit"]:
#   bash scripts/gpu-session.sh call A     # ~560 s: versions, facts, linkage, calibrate, kernels,
#                                          # profile (compile=True), compare, graphs, gpu-tests
#   cp <A's files>/device_profile.json .gpu/  # A's calibration, so that B need not calibrate
#   bash scripts/gpu-session.sh call B     # ~280 s: docmask, then every preset as shipped
# Call B right after A, while the machine is still warm (it is released after 30 s idle): one
# start (about 40 s) for both, 40 + 560 + 280 s of the 900.
#   bash scripts/gpu-session.sh call all   # everything gpu-check.sh has, for a longer loan
# Everything comes back under $OUT (summary.txt first). GPU_CHECK_BUDGET_S overrides a plan's
# budget; keep it 50 s under the call's timeout (the machine's start is not counted in it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

prepare() {
  local b=${1:-build-gpu}
  command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
  if [[ ! -f $b/CMakeCache.txt ]]; then
    cmake -S . -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLMTRAIN_BUILD_TESTS=ON \
      -DLLMTRAIN_BUILD_BENCHMARKS=ON -DLLMTRAIN_UNITY_BUILD=ON -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
      -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache
  fi
  grep -q '^CMAKE_CUDA_COMPILER:' "$b/CMakeCache.txt" ||
    { echo "gpu-session: $b is not a CUDA build (no CMAKE_CUDA_COMPILER in its cache): configure it with nvcc on PATH" >&2; exit 1; }
  cmake --build "$b" -j"${JOBS:-2}"
  mkdir -p .gpu
  bash scripts/pack-build.sh "$b" "$ROOT/.gpu/build.tar.xz"
  if [[ ! -f .gpu/data/index.json ]]; then
    local txt
    txt=$(mktemp -d)
    local k=0
    for _ in 1 2 3 4; do for f in docs/*.md README.md; do k=$((k + 1)); cp "$f" "$txt/doc$k.txt"; done; done
    "$b/bin/llmtrain-prepare" --out_dir .gpu/data --overwrite --tokenizer byte --ext .txt "$txt"
    rm -rf "$txt"
  fi
  [[ -d .gpu-kit ]] || cp -r ../shared/gpu-kit .gpu-kit
  for p in /.gpu/ /.gpu-kit/; do grep -qxF "$p" .git/info/exclude 2>/dev/null || echo "$p" >>.git/info/exclude; done
  echo "gpu-session: ready: .gpu/build.tar.xz ($(du -h .gpu/build.tar.xz | cut -f1)), .gpu/data, .gpu-kit"
  echo "gpu-session: device run with carry [\".gpu\", \".gpu-kit\"]: bash scripts/gpu-session.sh call A (timeout_s 600), then call B"
}

call() {
  local plan=${1:?usage: gpu-session.sh call A|B|all} budget skip
  case $plan in
    A) budget=540; skip="docmask suite refusal presets memory templates"
       export GPU_CHECK_PROFILE_COMPILE=${GPU_CHECK_PROFILE_COMPILE:-True} ;;
    B) budget=270; skip="linkage kernels profile compare graphs suite refusal memory templates gpu-tests"
       # Call A's calibration, when it came back and was carried in .gpu (else B calibrates).
       [[ -s .gpu/device_profile.json ]] && export GPU_CHECK_DEVICE_PROFILE=${GPU_CHECK_DEVICE_PROFILE:-.gpu/device_profile.json} ;;
    all) budget=540; skip="" ;;
    *) echo "gpu-session: plan '$plan': expected A, B or all" >&2; exit 2 ;;
  esac
  local out=${OUT:-/tmp/gpu-session}
  mkdir -p "$out"
  # The CPU-side libraries (Open MPI, HDF5, ...) of the GPU kit, unpacked into /tmp/r.
  bash .gpu-kit/gpu.sh >"$out/kit.log" 2>&1 || { echo "gpu-session: the GPU kit did not unpack:"; tail -5 "$out/kit.log"; exit 1; }
  export OPAL_PREFIX=/tmp/r/usr PATH=/tmp/r/usr/bin:$PATH
  export LD_LIBRARY_PATH=/tmp/r/usr/lib/x86_64-linux-gnu:/tmp/r/usr/lib/x86_64-linux-gnu/hdf5/openmpi:/tmp/r/usr/lib/x86_64-linux-gnu/openmpi/lib:/tmp/r/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OMPI_MCA_btl=self,vader PMIX_MCA_pcompress_base_silence_warning=1 PYTHONUNBUFFERED=1
  GPU_CHECK_BUDGET_S=${GPU_CHECK_BUDGET_S:-$budget} GPU_CHECK_SKIP=${GPU_CHECK_SKIP:-$skip} \
    bash scripts/gpu-check.sh .gpu/build.tar.xz .gpu/data "$out"
}

case ${1:-} in
  prepare) shift; prepare "$@" ;;
  call) shift; call "$@" ;;
  *) echo "usage: scripts/gpu-session.sh prepare [BUILD_DIR] | call A|B|all" >&2; exit 2 ;;
esac
