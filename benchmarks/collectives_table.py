#!/usr/bin/env python3
"""Table of bus bandwidth: llmtrain's collectives vs raw MPI on the same buffers.

usage: mpiexec -n 2 build/bin/bench-collectives --benchmark_format=json > c.json
       python3 benchmarks/collectives_table.py c.json
"""
import json
import sys


def main(path):
    runs = json.load(open(path))["benchmarks"]
    by = {}
    overlap = [r for r in runs if r["name"].startswith("overlap")]
    runs = [r for r in runs if not r["name"].startswith("overlap")]
    for r in runs:
        op, impl, size = r["name"].split("/")[:3]
        by[(op, int(size), impl)] = r["busbw_GBs"]
    world = int(runs[0]["world"]) if runs else 0
    print(f"world size {world}; busbw in GB/s (nccl-tests convention); ratio = llmtrain / raw MPI")
    print()
    print("| op | size | raw MPI | llmtrain | ratio | llmtrain async | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    worst = None
    for op in ("allreduce", "reduce_scatter", "all_gather"):
        for size in sorted({s for (o, s, _) in by if o == op}):
            raw = by.get((op, size, "raw_mpi"))
            ours = by.get((op, size, "llmtrain"))
            asy = by.get((op, size, "llmtrain_async"))
            r1 = ours / raw if raw else float("nan")
            r2 = asy / raw if (raw and asy) else None
            if size >= (1 << 20):
                worst = r1 if worst is None else min(worst, r1)
                if r2 is not None:
                    worst = min(worst, r2)
            label = f"{size >> 20} MiB" if size >= (1 << 20) else f"{size >> 10} KiB"
            a = f"{asy:.3f} | {r2:.2f}" if r2 is not None else "- | -"
            print(f"| {op} | {label} | {raw:.3f} | {ours:.3f} | {r1:.2f} | {a} |")
    print()
    print(f"worst ratio at >= 1 MiB: {worst:.2f}")
    if overlap:
        print()
        print("| 64 MiB Iallreduce behind matmuls | iteration ms | wait ms (exposed) | exposed share |")
        print("|---|---:|---:|---:|")
        for r in overlap:
            print(f"| {r['name'].split('/')[1]} | {r['real_time']:.1f} | {r['wait_ms']:.1f} | {r['exposed_share']:.1%} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/dev/stdin")
