#!/usr/bin/env python3
"""Table of bench-strategy's JSON output (see benchmarks/bench_strategy.cpp).

usage: python3 benchmarks/strategy_table.py s.json
"""
import json
import sys

runs = json.load(open(sys.argv[1]))["benchmarks"]
print("| strategy | MPI async mode | tokens/rank/iter | ms/iter | exposed comm ms | exposed share | tokens/s per rank |")
print("|---|---|---:|---:|---:|---:|---:|")
for r in runs:
    strategy, mode, tokens = r["name"].split("/")[:3]
    ms, ex = r["ms_per_iter"], r["exposed_ms"]
    print(f"| {strategy} | {mode} | {tokens} | {ms:.1f} | {ex:.1f} | {ex / ms:.1%} | {r['tokens_per_s_per_rank']:.0f} |")
