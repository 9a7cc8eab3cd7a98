#!/usr/bin/env bash
# build_cpu_table.sh [NINJA_TARGET...]: a whole build's wall and CPU time with
# LLMTRAIN_UNITY_BUILD off and on, each in a fresh build directory (Release,
# tests and benchmarks on, Ninja) with ccache disabled (CCACHE_DISABLE=1), and
# the shared libraries `llmtrain` needs in both (they must be the same: a
# unity batch holding llmtrain-prepare's readers would link Arrow into it).
# The default is every target (about 40 minutes on 2 cores); name targets
# (e.g. llmtrain-bin) for a part. The load average is printed beside each row:
# the figures mean something only on an otherwise idle machine.
# Env: JOBS (nproc), MODES ("OFF ON"), WORK_DIR (a new temporary directory;
#      removed at the end unless KEEP=1), DRY_RUN=1 (print the commands only).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
JOBS=${JOBS:-$(nproc)}
MODES=${MODES:-OFF ON}
targets=("$@")
command -v ninja >/dev/null || { echo "build_cpu_table: needs ninja (apt-get install ninja-build)" >&2; exit 1; }
if [[ -n "${WORK_DIR:-}" ]]; then mkdir -p "$WORK_DIR"; work=$WORK_DIR; else work=$(mktemp -d); fi
[[ "${KEEP:-0}" == 1 || -n "${WORK_DIR:-}" ]] || trap 'rm -rf "$work"' EXIT
export CCACHE_DISABLE=1

# timed LOG CMD...: runs CMD with its output in LOG; prints "<exit status> <wall s>
# <CPU s of CMD and everything it waited for, user + system>".
timed() {
  python3 -c '
import resource, subprocess, sys, time
t = time.monotonic()
with open(sys.argv[1], "w") as log:
    rc = subprocess.call(sys.argv[2:], stdout=log, stderr=subprocess.STDOUT)
wall = time.monotonic() - t
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(rc, f"{wall:.1f}", f"{r.ru_utime + r.ru_stime:.1f}")' "$@"
}

rows=()
for mode in $MODES; do
  dir=$work/build-unity-$mode
  configure=(cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLMTRAIN_UNITY_BUILD="$mode"
             -DLLMTRAIN_BUILD_TESTS=ON -DLLMTRAIN_BUILD_BENCHMARKS=ON)
  build=(ninja -C "$dir" -j "$JOBS" "${targets[@]+"${targets[@]}"}")
  if [[ "${DRY_RUN:-0}" == 1 ]]; then
    echo "rm -rf $dir && ${configure[*]} && CCACHE_DISABLE=1 ${build[*]}"
    continue
  fi
  rm -rf "$dir"
  "${configure[@]}" >"$work/configure-$mode.log" 2>&1 ||
    { echo "build_cpu_table: configure failed (LLMTRAIN_UNITY_BUILD=$mode), see $work/configure-$mode.log" >&2; exit 1; }
  # Every compile to an object file the targets need (ninja -n stops at CMake's glob check).
  compiles=$(ninja -C "$dir" -t commands "${targets[@]+"${targets[@]}"}" | grep -cE -- '-o [^ ]+\.o -c ' || true)
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  read -r rc wall cpu < <(timed "$work/build-$mode.log" "${build[@]}")
  [[ "$rc" == 0 ]] || { echo "build_cpu_table: build failed (LLMTRAIN_UNITY_BUILD=$mode), see $work/build-$mode.log" >&2; exit 1; }
  needed=-
  [[ -x "$dir/bin/llmtrain" ]] && needed=$(readelf -d "$dir/bin/llmtrain" | grep NEEDED | sed 's/.*\[\(.*\)\]/\1/' | sort | tr '\n' ' ')
  rows+=("$mode|$compiles|$wall|$cpu|$load|$needed")
done
[[ "${DRY_RUN:-0}" == 1 ]] && exit 0

echo "targets: ${targets[*]:-all}; $JOBS jobs; $(nproc) cores; $(date -u +%FT%TZ)"
echo "| LLMTRAIN_UNITY_BUILD | compiles | wall s | CPU s (user+sys) | load average before |"
echo "|---|---|---|---|---|"
for r in "${rows[@]}"; do IFS='|' read -r mode compiles wall cpu load _ <<<"$r"; echo "| $mode | $compiles | $wall | $cpu | $load |"; done
status=0
if (( ${#rows[@]} == 2 )); then
  IFS='|' read -r _ _ w0 c0 _ n0 <<<"${rows[0]}"
  IFS='|' read -r _ _ w1 c1 _ n1 <<<"${rows[1]}"
  python3 -c 'import sys; w0, c0, w1, c1 = map(float, sys.argv[1:]); print(f"second row / first: wall {w1 / w0:.2f}, CPU {c1 / c0:.2f}")' \
    "$w0" "$c0" "$w1" "$c1"
  if [[ "$n0" != - && "$n1" != - ]]; then
    if [[ "$n0" == "$n1" ]]; then
      echo "bin/llmtrain NEEDED, the same in both: $n0"
    else
      echo "bin/llmtrain NEEDED differ: $n0 against $n1" >&2
      status=1
    fi
  fi
fi
[[ -z "${WORK_DIR:-}" && "${KEEP:-0}" == 1 ]] && echo "build directories kept in $work"
exit $status
