#!/usr/bin/env python3
"""Table of bus bandwidth: llmtrain's collectives vs raw MPI on the same buffers.

usage: mpiexec -n 2 build/bin/bench-collectives --benchmark_format=json > c.json
       python3 benchmarks/collectives_table.py c.json
"""
import json
import sys


def main(path):
    runs = json.load(open(path))["benchmarks"]
    overlap = [r for r in runs if r["name"].startswith("overlap")]
    runs = [r for r in runs if not r["name"].startswith("overlap")]
    world = int(runs[0]["world"]) if runs else 0
    print(f"world size {world}; busbw in GB/s (nccl-tests convention) from the median iteration;")
    print("ratio = llmtrain / raw MPI, measured back to back in the same iterations")
    print()
    print("| op | size | raw MPI | llmtrain | ratio | async, comm thread (+wait) | ratio "
          "| async, MPI nonblocking (+wait) | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    worst = None
    for r in runs:
        op, size = r["name"].split("/")[:2]
        size = int(size)
        label = f"{size >> 20} MiB" if size >= (1 << 20) else f"{size >> 10} KiB"
        if size >= (1 << 20):
            worst = r["ratio"] if worst is None else min(worst, r["ratio"])
        a = f"{r['busbw_async_GBs']:.3f} | {r['ratio_async']:.2f}" if "ratio_async" in r else "- | -"
        a += f" | {r['busbw_nbc_GBs']:.3f} | {r['ratio_nbc']:.2f}" if "ratio_nbc" in r else " | - | -"
        print(f"| {op} | {label} | {r['busbw_raw_GBs']:.3f} | {r['busbw_GBs']:.3f} | {r['ratio']:.2f} | {a} |")
    print()
    if worst is not None:
        print(f"worst ratio of the collectives at >= 1 MiB (target >= 0.9): {worst:.2f}")
    if overlap:
        print()
        print("| 24 MiB async allreduce behind matmuls | iteration ms | wait ms (exposed) | exposed share |")
        print("|---|---:|---:|---:|")
        for r in overlap:
            print(f"| {r['name'].split('/')[1]} | {r['real_time']:.1f} | {r['wait_ms']:.1f} | {r['exposed_share']:.1%} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/dev/stdin")
