#!/usr/bin/env bash
# bench_crc32c.sh [BUILD_DIR]: CRC32C throughput next to memcpy's on this
# machine, the cost of combining two slice checksums, and what the checksums
# add to a checkpoint save: the LLaMA-2 1.36B state (15.5 GB: fp32 weights +
# both AdamW moments) checksummed on one core, against its save at the disk
# bandwidth DISK_GBPS (default 1.0 GB/s).
set -euo pipefail
BUILD=${1:-build}
BENCH=$BUILD/bin/bench-crc32c
[[ -x "$BENCH" ]] || { echo "bench_crc32c: $BENCH not built (cmake --build $BUILD --target bench-crc32c)" >&2; exit 1; }
out=$(mktemp); trap 'rm -f "$out"' EXIT
"$BENCH" --benchmark_format=json --benchmark_min_time=0.2 >"$out" 2>/dev/null
python3 - "$out" "${DISK_GBPS:-1.0}" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["benchmarks"]
disk = float(sys.argv[2])
print("| benchmark | bytes | GB/s or time per call | path |")
print("|---|---|---|---|")
for b in rows:
    name = b["name"].split("/")
    gbps = b.get("bytes_per_second", 0) / 1e9
    what = f"{gbps:.2f} GB/s" if gbps else f"{b['real_time']:.0f} {b['time_unit']}"
    print(f"| {name[0][3:]} | {name[1] if len(name) > 1 else '-'} | {what} | {b.get('label', '')} |")
crc = max(b["bytes_per_second"] for b in rows if b["name"].startswith("BM_crc32c/"))
state, save = 15.5e9, 15.5e9 / (disk * 1e9)
print(f"\n1.36B training state, 15.5 GB: checksums {state / crc:.2f} s on one core, against {save:.1f} s of writing "
      f"at {disk} GB/s: +{100 * state / crc / save:.1f}% (split over the writing ranks: each checksums its own slices)")
PY
