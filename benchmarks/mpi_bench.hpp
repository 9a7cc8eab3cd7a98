// Google Benchmark under MPI: every rank runs every benchmark (the collectives
// inside need all of them); only rank 0 reports.
#pragma once
#include <vector>

#include <benchmark/benchmark.h>

namespace llmtrain::bench {

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

inline void run_specified_benchmarks(int rank) {
  if (rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
}

}  // namespace llmtrain::bench
