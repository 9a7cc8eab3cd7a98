// TokenLoader throughput: tokens/s of next() on every rank together, without and
// with prefetch workers, next to a plain sequential read of the same shard bytes
// (the ceiling). Run under mpiexec for several ranks (benchmarks/loader_table.sh).
//
// The reference consumption: one LLaMA-1.36B step at tier-3 settings on 8 B200
// consumes about 1M tokens/s per node; the loader target is >= 20x that.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <fmt/format.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/data/loader.hpp"
#include "llmtrain/data/prepare.hpp"
#include "llmtrain/distributed/runtime.hpp"
#include "mpi_bench.hpp"                 // defines: run_specified_benchmarks (rank 0 reports)

namespace fs = std::filesystem;
using namespace llmtrain;

namespace {

Runtime* g_rt = nullptr;
std::string g_dir;
std::map<std::string, double> g_rates;  // name -> tokens/s, all ranks together
constexpr int64_t kBatch = 8, kBlock = 1024, kBatchesPerRound = 32;

// ~64M random uint16 tokens (vocab 50257) imported as a data directory.
void make_data() {
  const fs::path base = fs::temp_directory_path() / "llmtrain-bench-loader";
  g_dir = (base / "data").string();
  if (g_rt->rank() == 0 && !fs::exists(base / "bin" / "val.bin")) {
    fs::create_directories(base / "bin");
    std::mt19937_64 rng(1);
    std::vector<uint16_t> v(64 << 20);
    for (auto& t : v) t = static_cast<uint16_t>(rng() % 50257);
    std::ofstream(base / "bin" / "train.bin", std::ios::binary).write(reinterpret_cast<char*>(v.data()), v.size() * 2);
    std::ofstream(base / "bin" / "val.bin", std::ios::binary).write(reinterpret_cast<char*>(v.data()), 1 << 20);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  PrepareOptions o;
  o.from_nanogpt = (base / "bin").string();
  o.vocab_size = 50257;
  o.tokenizer_name = "gpt2";
  o.out_dir = g_dir;
  o.overwrite = true;  // the directory of the last benchmark run
  o.shard_tokens = 16 << 20;
  o.progress = false;
  prepare_data(o, *g_rt);
}

// Times `round` on every rank between barriers; the round's time is the slowest rank's.
template <typename Fn>
void timed_rounds(benchmark::State& state, const std::string& name, int64_t tokens_per_rank_round, Fn&& round) {
  double total_s = 0;
  int64_t tokens = 0;
  for (auto _ : state) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    round();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), smax = 0;
    MPI_Allreduce(&s, &smax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    state.SetIterationTime(smax);
    total_s += smax;
    tokens += tokens_per_rank_round * g_rt->world_size();
  }
  const double rate = tokens / total_s;
  state.counters["tokens_per_s_all_ranks"] = rate;
  state.counters["ranks"] = g_rt->world_size();
  g_rates[name] = rate;
}

void BM_Loader(benchmark::State& state) {
  const int64_t workers = state.range(0);
  Config c;
  c.data_dir = g_dir;
  c.batch_size = kBatch;
  c.block_size = kBlock;
  c.use_dataloader = workers > 0;
  c.dataloader_num_workers = std::max<int64_t>(1, workers);
  c.dataloader_prefetch_factor = 4;
  TokenLoader loader(llmtrain::LoaderOptions::from_config(c), *g_rt, llmtrain::Split::train, torch::kCPU);
  const std::string name = workers == 0 ? "loader, no workers" : fmt::format("loader, {} workers", workers);
  timed_rounds(state, name, kBatch * kBlock * kBatchesPerRound, [&] {
    for (int i = 0; i < kBatchesPerRound; ++i) benchmark::DoNotOptimize(loader.next());
  });
}
BENCHMARK(BM_Loader)->Arg(0)->Arg(1)->Arg(2)->Arg(4)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);

// The ceiling: the same number of bytes read sequentially (page cache warm), each
// rank from its own offset of the shards.
void BM_SequentialRead(benchmark::State& state) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(g_dir))
    if (e.path().filename().string().rfind("train_", 0) == 0) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  const int64_t bytes_per_round = kBatch * (kBlock + 1) * kBatchesPerRound * 2;
  std::vector<char> buf(static_cast<size_t>(bytes_per_round));
  size_t fi = static_cast<size_t>(g_rt->rank()) % files.size();
  std::FILE* f = std::fopen(files[fi].c_str(), "rb");
  timed_rounds(state, "sequential read (ceiling)", bytes_per_round / 2, [&] {
    size_t got = std::fread(buf.data(), 1, buf.size(), f);
    if (got < buf.size()) {
      std::fclose(f);
      fi = (fi + 1) % files.size();
      f = std::fopen(files[fi].c_str(), "rb");
      got += std::fread(buf.data() + got, 1, buf.size() - got, f);
    }
    benchmark::DoNotOptimize(buf.data());
  });
  std::fclose(f);
}
BENCHMARK(BM_SequentialRead)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

int main(int argc, char** argv) {
  Runtime rt(argc, argv);
  g_rt = &rt;
  benchmark::Initialize(&argc, argv);
  make_data();
  bench::run_specified_benchmarks(rt.rank());
  if (rt.rank() == 0) {
    const double consume = 1.0e6;  // tokens/s one LLaMA-1.36B step uses on 8 B200 (tier 3)
    std::printf("\nTokenLoader, batch %ld x block %ld, uint16 shards, %d rank(s):\n", long(kBatch), long(kBlock),
                rt.world_size());
    std::printf("| %-28s | %14s | %22s |\n", "reader", "Mtokens/s", "x LLaMA-1.36B on 8xB200");
    std::printf("|------------------------------|----------------|------------------------|\n");
    for (const auto& [name, rate] : g_rates)
      std::printf("| %-28s | %14.1f | %22.1f |\n", name.c_str(), rate / 1e6, rate / consume);
    std::printf("target: >= 20x (20 Mtokens/s per node)\n");
  }
  benchmark::Shutdown();
  return 0;
}
