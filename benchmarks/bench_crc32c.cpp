// CRC32C throughput (core/crc32c.hpp: checkpoint tensors' checksums), next to
// memcpy of the same bytes as the memory-bandwidth ceiling, and the cost of
// combining slice checksums (one per rank and tensor). benchmarks/bench_crc32c.sh
// prints the table.
//   build/bin/bench-crc32c --benchmark_format=json
#include <cstring>
#include <vector>

#include <benchmark/benchmark.h>

#include "llmtrain/core/crc32c.hpp"

namespace {

void BM_crc32c(benchmark::State& state) {
  std::vector<uint8_t> buf(static_cast<size_t>(state.range(0)));
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 131 + 7);
  for (auto _ : state) benchmark::DoNotOptimize(llmtrain::crc32c(buf.data(), buf.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
  state.SetLabel(llmtrain::crc32c_hardware() ? "sse4.2" : "table");
}
BENCHMARK(BM_crc32c)->Arg(1 << 16)->Arg(1 << 20)->Arg(64 << 20);

void BM_memcpy(benchmark::State& state) {
  std::vector<uint8_t> a(static_cast<size_t>(state.range(0)), 1), b(a.size());
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), a.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_memcpy)->Arg(1 << 16)->Arg(1 << 20)->Arg(64 << 20);

void BM_crc32c_combine(benchmark::State& state) {
  uint32_t c = 0x12345678u;
  for (auto _ : state) benchmark::DoNotOptimize(c = llmtrain::crc32c_combine(c, 0x9abcdef0u, 64ull << 20));
}
BENCHMARK(BM_crc32c_combine);

}  // namespace

BENCHMARK_MAIN();
