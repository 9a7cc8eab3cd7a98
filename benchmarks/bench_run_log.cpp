// Cost of keeping the run log current: serializing one iteration record
// (add_iteration, every iteration) and rewriting the whole file atomically
// (flush, at most every 10 s) for logs of n records. Backs docs/run-log.md's
// choice of a time floor over a rewrite per iteration. With a TensorBoard
// follower (tensorboard_dir): the same add_iteration plus the event records of
// the record's scalars, the per-iteration cost tensorboard_dir adds to a step
// (docs/monitoring.md).
#include <benchmark/benchmark.h>

#include <filesystem>

#include "llmtrain/record/metrics.hpp"
#include "llmtrain/record/run_log.hpp"
#include "llmtrain/record/tensorboard.hpp"

namespace {

nlohmann::json sample_record(int64_t iter) {
  llmtrain::MetricsSetup s;
  s.flops_per_token = 8341291008.0;
  s.num_devices = 8;
  s.peak = llmtrain::resolve_peak("NVIDIA B200", llmtrain::ComputeDtype::bfloat16, 0.0);
  auto m = llmtrain::compute_iteration_metrics(s, iter, 1.048576, 1048576);
  m.loss = 3.21;
  m.lr = 6e-4;
  m.grad_norm = 0.9;
  m.phase_ms = {12.0, 900.0, 30.0, 50.0};
  m.other_ms = m.dt_ms - 992.0;
  return m.to_json();
}

std::string bench_dir() {
  auto d = std::filesystem::temp_directory_path() / "llmtrain-bench-run-log";
  std::filesystem::create_directories(d);
  return d.string();
}

void BM_RunLogAddIteration(benchmark::State& state) {
  llmtrain::RunLog log(bench_dir(), true);
  const auto rec = sample_record(1);
  for (auto _ : state) log.add_iteration(rec);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RunLogAddIteration);

void BM_RunLogAddIterationTensorBoard(benchmark::State& state) {
  llmtrain::RunLog log(bench_dir(), true);
  const auto tb = std::filesystem::path(bench_dir()) / "tensorboard";
  log.add_follower(llmtrain::make_tensorboard_follower(tb.string()));
  auto rec = sample_record(1);
  int64_t iter = 0;
  for (auto _ : state) {
    rec["iter"] = ++iter;
    log.add_iteration(rec);
  }
  log.flush(/*force=*/true);
  state.SetItemsProcessed(state.iterations());
  std::filesystem::remove_all(tb);
}
BENCHMARK(BM_RunLogAddIterationTensorBoard);

void BM_RunLogFlush(benchmark::State& state) {
  llmtrain::RunLog log(bench_dir(), true);
  log.set_startup_info({{"config", {{"batch_size", 16}}}});
  for (int64_t i = 0; i < state.range(0); ++i) log.add_iteration(sample_record(i));
  for (auto _ : state) log.flush(/*force=*/true);
  const auto bytes = std::filesystem::file_size(log.path());
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["file_MB"] = static_cast<double>(bytes) / 1e6;
  std::filesystem::remove(log.path());
}
BENCHMARK(BM_RunLogFlush)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
