#!/usr/bin/env bash
# bench_crc32c.sh [BUILD_DIR]: CRC32C throughput next to memcpy's on this
# machine, and what the checksums add to a checkpoint save: the LLaMA-2 1.36B
# state (15.5 GB: fp32 weights + both AdamW moments) checksummed on one core,
# against the save time at the disk bandwidth given (DISK_GBPS, default 1.0).
set -euo pipefail
BUILD=${1:-build}
BENCH=$BUILD/bin/bench-crc32c
[[ -x "$BENCH" ]] || { echo "bench_crc32c: $BENCH not built (cmake --build $BUILD --target bench-crc32c)" >&2; exit 1; }
"$BENCH" --benchmark_format=json --benchmark_min_time=0.2 2>/dev/null | python3 -c '
import json, os, sys
r = json.load(sys.stdin)["benchmarks"]
disk = float(os.environ.get("DISK_GBPS", "1.0"))
print(f"| what | bytes | GB/s | label |")
print(f"|---|---|---|---|")
for b in r:
    gbps = b.get("bytes_per_second", 0) / 1e9
    n = b["name"].split("/")
    size = n[1] if len(n) > 1 else "-"
    extra = f"{b[\"real_time\"]:.0f} {b[\"time_unit\"]} per call" if not gbps else f"{gbps:.2f}"
    print(f"| {n[0][3:]} | {size} | {extra} | {b.get(\"label\", \"\")} |")
crc = max(b["bytes_per_second"] for b in r if b["name"].startswith("BM_crc32c/"))
state = 15.5e9
print()
print(f"1.36B state (15.5 GB): checksums {state / crc:.2f} s on one core; the save itself at {disk} GB/s "
      f"{state / disk / 1e9:.1f} s: +{100 * state / crc / (state / disk / 1e9):.1f}% (per rank: each checksums its own slices)")
'
