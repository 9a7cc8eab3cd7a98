#!/usr/bin/env bash
# Loader throughput table for 1 and 2 ranks (bench-loader), e.g.
#   benchmarks/loader_table.sh build/bin/bench-loader
set -euo pipefail
BENCH=${1:-build/bin/bench-loader}
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for np in 1 2; do
  mpiexec -n "$np" "$BENCH" --benchmark_min_time=1 2>/dev/null | sed -n '/^TokenLoader/,$p'
  echo
done
