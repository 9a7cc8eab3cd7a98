// One training iteration (forward + backward + optimizer) of a small LLaMA
// under each data-parallel strategy, with each MPI mode for the nonblocking
// collectives: DDP, ZeRO-1, FSDP with and without prefetching the next block's
// parameters. Run under MPI, e.g.
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 mpiexec -n 2 --bind-to core \
//     build/bin/bench-strategy --benchmark_format=json > s.json
// Arg = tokens per rank per iteration (batch 1 x block_size): few tokens make
// communication a large share of the step (the regime where overlap matters),
// more tokens make compute dominate.
// Counters: ms per iteration (max over ranks, median of the iterations),
// exposed_ms = the waits on communication (Collectives::waited_seconds over the
// iteration, what the trainer reports as communication_ms), tokens/s per rank.
// Every rank runs the same fixed iteration count (ranks that disagreed would
// deadlock). Table: python3 benchmarks/strategy_table.py s.json
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include <torch/torch.h>

#include "llmtrain/core/config.hpp"         // defines: Config
#include "llmtrain/distributed/collectives.hpp"    // defines: Collectives, make_collectives, MpiAsync
#include "llmtrain/distributed/runtime.hpp"        // defines: Runtime (MPI init)
#include "llmtrain/distributed/strategy.hpp"       // defines: make_strategy
#include "llmtrain/model/transformer.hpp"   // defines: Transformer, ModelConfig
#include "mpi_bench.hpp"                 // defines: run_specified_benchmarks (rank 0 reports)

namespace {

llmtrain::Runtime* g_rt = nullptr;

enum class Kind { ddp, zero1, fsdp_prefetch, fsdp_blocking };

llmtrain::ModelConfig model_config(int64_t tokens) {
  llmtrain::ModelConfig mc;  // LLaMA defaults: RMSNorm, RoPE, SwiGLU
  mc.vocab_size = mc.padded_vocab = 256;
  mc.block_size = tokens;
  mc.n_layer = 4, mc.n_head = 8, mc.n_kv_head = 8, mc.n_embd = 512, mc.head_dim = 64, mc.ffn_hidden = 1408;
  mc.attention_backend = llmtrain::AttentionBackend::manual;  // the strategy is measured, not the attention kernel
  return mc;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void run(benchmark::State& state, Kind kind, llmtrain::MpiAsync mode) {
  const int64_t T = state.range(0);
  auto comm = llmtrain::make_collectives(*g_rt, torch::kCPU, mode);
  const auto mc = model_config(T);
  llmtrain::Transformer model(mc);
  model->init_weights(1);
  llmtrain::Config cfg;
  cfg.use_zero1 = kind == Kind::zero1;
  cfg.use_fsdp = kind == Kind::fsdp_prefetch || kind == Kind::fsdp_blocking;
  cfg.fsdp_prefetch = kind == Kind::fsdp_prefetch;
  auto strategy = llmtrain::make_strategy(llmtrain::StrategyOptions::from_config(cfg), model, *comm);
  torch::manual_seed(10 + comm->rank());
  const auto tokens = torch::randint(0, mc.vocab_size, {1, T + 1}, torch::kLong);
  const auto x = tokens.narrow(1, 0, T), y = tokens.narrow(1, 1, T);
  std::vector<double> times, exposed;
  for (auto _ : state) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double waited0 = comm->waited_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    strategy->backward(model->loss(x, y), /*last_micro=*/true);
    strategy->finish_gradients();
    strategy->step(1e-4, std::min(1.0, 1.0 / (strategy->grad_norm() + 1e-6)));
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double ex = comm->waited_seconds() - waited0;
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &ex, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    state.SetIterationTime(dt);
    times.push_back(dt);
    exposed.push_back(ex);
  }
  const double ms = median(times) * 1e3;
  state.counters["ms_per_iter"] = ms;
  state.counters["exposed_ms"] = median(exposed) * 1e3;
  state.counters["tokens_per_s_per_rank"] = static_cast<double>(T) / (ms / 1e3);
  state.counters["block_params_M"] = static_cast<double>(4 * 512 * 512 + 3 * 512 * 1408 + 2 * 512) / 1e6;
}

void register_all() {
  struct K { const char* name; Kind kind; };
  struct M { const char* name; llmtrain::MpiAsync mode; };
  for (auto k : {K{"ddp", Kind::ddp}, K{"zero1", Kind::zero1}, K{"fsdp_prefetch", Kind::fsdp_prefetch},
                 K{"fsdp_blocking", Kind::fsdp_blocking}})
    for (auto m : {M{"nonblocking", llmtrain::MpiAsync::nonblocking}, M{"comm_thread", llmtrain::MpiAsync::comm_thread}})
      benchmark::RegisterBenchmark((std::string(k.name) + "/" + m.name).c_str(),
                                   [k, m](benchmark::State& s) { run(s, k.kind, m.mode); })
          ->Arg(32)
          ->Arg(256)
          ->Iterations(12)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  llmtrain::Runtime rt(argc, argv);
  g_rt = &rt;
  torch::set_num_threads(1);  // one core per rank: 2 ranks on this machine's 2 cores
  benchmark::Initialize(&argc, argv);
  register_all();
  llmtrain::bench::run_specified_benchmarks(rt.rank());
  benchmark::Shutdown();
  return 0;
}
