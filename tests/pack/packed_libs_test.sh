#!/usr/bin/env bash
# packed_libs_test.sh BUILD_DIR PYTHON: see CMakeLists.txt.
set -euo pipefail
B=$1 PY=$2
SRC=$(cd "$(dirname "$0")/../.." && pwd)
S=$B/test-scratch/packed_libs
rm -rf "$S"; mkdir -p "$S/llmtrain-build/build/bin" "$S/llmtrain-build/lib"
P=$S/llmtrain-build
site=$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
kit=(); k=$SRC/../shared/gpu-kit/deps.tar.xz; [[ -f $k ]] && kit=(--kit "$k")
tool() { "$PY" "$SRC/scripts/packed-libs.py" "$@" --site "$site" "${kit[@]+"${kit[@]}"}"; }
# The programs (hard links where the file system allows: check reads files, not links).
progs=()
for p in llmtrain llmtrain-prepare bench-kernels bench-crc32c; do
  [[ -x $B/bin/$p ]] || continue
  ln "$B/bin/$p" "$P/build/bin/$p" 2>/dev/null || cp "$B/bin/$p" "$P/build/bin/$p"
  progs+=("$B/bin/$p")
done
((${#progs[@]})) || { echo "no programs built"; exit 77; }
# 1. lib/ empty: whatever plan would pack is named unresolved.
plan=$(tool plan "${progs[@]}")
echo "plan:"; echo "${plan//$'\n'/$'\n'  }"
if out=$(tool check "$P" 2>&1); then
  [[ -z "$plan" ]] || { echo "FAIL: check passed with lib/ empty although plan packs:"; echo "$plan"; exit 1; }
else
  echo "$out"
  # Each library plan packs is named, or is the need of one that is named (check does not
  # walk into a library that is not there: without the GPU kit, plan packs HDF5 and its
  # own needs, e.g. libaec, and check names HDF5).
  declare -A path_of=() covered=()
  while read -r name path; do [[ -z $name ]] || path_of[$name]=$path; done <<<"$plan"
  for name in "${!path_of[@]}"; do grep -q ": $name is not in lib/" <<<"$out" && covered[$name]=1; done
  for _ in 1 2 3 4 5 6; do   # the needs of what is covered, to a fixed point
    for name in "${!covered[@]}"; do
      for need in $(readelf -d "${path_of[$name]}" 2>/dev/null | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p'); do
        [[ -n ${path_of[$need]:-} ]] && covered[$need]=1
      done
    done
  done
  for name in "${!path_of[@]}"; do
    [[ -n ${covered[$name]:-} ]] || { echo "FAIL: check did not name $name (nor a library that needs it)"; exit 1; }
  done
fi
# What the issue saw on the GPU image: bench-kernels without libbenchmark.
if [[ -x $B/bin/bench-kernels ]]; then
  grep -q '^libbenchmark\.so' <<<"$plan" || { echo "FAIL: plan leaves out Google Benchmark's library"; exit 1; }
fi
# 2. lib/ as plan says: check passes.
while read -r name path; do [[ -z $name ]] || ln -s "$path" "$P/lib/$name"; done <<<"$plan"
tool check "$P" || { echo "FAIL: check fails on what plan packed"; exit 1; }
# 3. A packed library whose own need is left out (libparquet without libarrow).
arrow=$(grep -m1 -o '^libarrow\.so[^ ]*' <<<"$plan" || true)
if [[ -n $arrow ]] && grep -q '^libparquet\.so' <<<"$plan"; then
  rm "$P/lib/$arrow"
  if out=$(tool check "$P" 2>&1); then echo "FAIL: check passed without $arrow"; exit 1; fi
  grep -q "$arrow is not in lib/.*via libparquet" <<<"$out" || { echo "FAIL: not named via libparquet: $out"; exit 1; }
  echo "ok: $arrow left out is named via libparquet"
fi
rm -rf "$S"
echo "packed_libs: passed"
