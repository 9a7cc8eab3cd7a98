// Bus bandwidth of llmtrain's collectives next to the raw MPI calls on the same
// buffers, 1 KiB - 256 MiB. Run under MPI, e.g.
//   mpiexec -n 2 build/bin/bench-collectives --benchmark_format=json > c.json
//   python3 benchmarks/collectives_table.py c.json
// busbw (nccl-tests convention): allreduce S/t * 2(W-1)/W; reduce-scatter and
// all-gather S/t * (W-1)/W, S = the full (world-sized) buffer in bytes.
// The reported time is ours; the counters carry all three bandwidths and the
// ratios. Every rank runs the same fixed iteration count (no adaptive iteration counts:
// ranks that disagreed would deadlock); the time of an iteration is the max over
// ranks.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include <torch/torch.h>

#include "llmtrain/distributed/collectives.hpp"  // defines: Collectives, make_collectives
#include "llmtrain/distributed/runtime.hpp"      // defines: Runtime (MPI init)
#include "mpi_bench.hpp"                 // defines: run_specified_benchmarks (rank 0 reports)

namespace {

llmtrain::Runtime* g_rt = nullptr;
std::unique_ptr<llmtrain::Collectives> g_comm;      // default: async forms on a communication thread
std::unique_ptr<llmtrain::Collectives> g_comm_nbc;  // async forms as MPI nonblocking collectives

enum Op { allreduce, reduce_scatter, all_gather };
enum Impl { raw_mpi, ours, ours_async, ours_nbc, kNumImpl };

int64_t iterations_for(int64_t bytes) {
  const int64_t mib = 1 << 20;
  return bytes <= mib ? 100 : std::max<int64_t>(5, 100 * mib / bytes);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One call of `impl`; seconds, the max over ranks.
double timed(Op op, Impl impl, torch::Tensor& full, torch::Tensor& part) {
  const int W = g_comm->world_size();
  const int64_t n = full.numel();
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  switch (op) {
    case allreduce:
      if (impl == ours) g_comm->allreduce_sum(full);
      else if (impl == ours_async) g_comm->allreduce_sum_async(full)->wait();
      else if (impl == ours_nbc) g_comm_nbc->allreduce_sum_async(full)->wait();
      else MPI_Allreduce(MPI_IN_PLACE, full.data_ptr(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case reduce_scatter:
      if (impl == ours) g_comm->reduce_scatter_sum(full, part);
      else if (impl == ours_async) g_comm->reduce_scatter_sum_async(full, part)->wait();
      else if (impl == ours_nbc) g_comm_nbc->reduce_scatter_sum_async(full, part)->wait();
      else MPI_Reduce_scatter_block(full.data_ptr(), part.data_ptr(), static_cast<int>(n / W), MPI_FLOAT, MPI_SUM,
                                    MPI_COMM_WORLD);
      break;
    case all_gather:
      if (impl == raw_mpi)
        MPI_Allgather(part.data_ptr(), static_cast<int>(n / W), MPI_FLOAT, full.data_ptr(), static_cast<int>(n / W),
                      MPI_FLOAT, MPI_COMM_WORLD);
      else if (impl == ours) g_comm->all_gather(part, full);
      else if (impl == ours_async) g_comm->all_gather_async(part, full)->wait();
      else g_comm_nbc->all_gather_async(part, full)->wait();
      break;
  }
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (op == allreduce) full.fill_(1.0f);  // repeated sums would overflow
  return dt;
}

// Each iteration runs raw MPI, ours, ours-async (communication thread) and
// ours-async as MPI nonblocking collectives back to back on the same buffers,
// so a machine whose load drifts (shared CI cores) affects all
// alike; bandwidths come from the median iteration of each.
void run(benchmark::State& state, Op op) {
  const int64_t bytes = state.range(0);
  const int W = g_comm->world_size();
  const int64_t n = bytes / 4 / W * W;  // float32 elements, divisible by W
  auto full = torch::ones({n});
  auto part = torch::ones({n / W});
  const int impls = kNumImpl;
  std::vector<std::vector<double>> times(kNumImpl);
  for (auto _ : state) {
    double ours_dt = 0;
    for (int k = 0; k < impls; ++k) {
      const double dt = timed(op, static_cast<Impl>(k), full, part);
      times[k].push_back(dt);
      if (k == ours) ours_dt = dt;
    }
    state.SetIterationTime(ours_dt);
  }
  const double factor = op == allreduce ? 2.0 * (W - 1) / W : 1.0 * (W - 1) / W;
  auto busbw = [&](int k) { return static_cast<double>(n * 4) * factor / median(times[k]) / 1e9; };
  state.counters["bytes"] = static_cast<double>(n * 4);
  state.counters["world"] = W;
  state.counters["busbw_raw_GBs"] = busbw(raw_mpi);
  state.counters["busbw_GBs"] = busbw(ours);
  state.counters["ratio"] = busbw(ours) / busbw(raw_mpi);
  if (impls == 4) {
    state.counters["busbw_async_GBs"] = busbw(ours_async);
    state.counters["ratio_async"] = busbw(ours_async) / busbw(raw_mpi);
    state.counters["busbw_nbc_GBs"] = busbw(ours_nbc);
    state.counters["ratio_nbc"] = busbw(ours_nbc) / busbw(raw_mpi);
  }
}

// MPI progress: a 24 MiB nonblocking allreduce started before ~N ms of matmuls
// (the backward it should hide behind). `poll` = MPI_Test between matmul chunks,
// as GradBuckets does from its hooks. wait_ms = time left to wait afterwards
// (the exposed part); Open MPI's nonblocking collectives advance only inside MPI
// calls, so without polling most of the transfer waits until wait().
// `comm`: which async implementation (the communication thread needs no polling).
void overlap(benchmark::State& state, llmtrain::Collectives* comm, bool poll) {
  const int64_t n = (int64_t{24} << 20) / 4;  // one DDP bucket (ddp_bucket_mb = 25)
  auto buf = torch::ones({n});
  auto a = torch::randn({256, 256}), b = torch::randn({256, 256});
  double wait_s = 0, total_s = 0;
  for (auto _ : state) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    auto work = comm->allreduce_sum_async(buf);
    for (int i = 0; i < 200; ++i) {
      a = torch::tanh(torch::mm(a, b) * 1e-2);
      if (poll) work->test();
    }
    const auto t1 = std::chrono::steady_clock::now();
    work->wait();
    const auto t2 = std::chrono::steady_clock::now();
    double dt = std::chrono::duration<double>(t2 - t0).count();
    double w = std::chrono::duration<double>(t2 - t1).count();
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &w, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    state.SetIterationTime(dt);
    wait_s += w;
    total_s += dt;
    buf.fill_(1.0f);
  }
  state.counters["wait_ms"] = wait_s / state.iterations() * 1e3;
  state.counters["exposed_share"] = wait_s / total_s;
}

void register_all() {
  struct Variant { const char* name; bool thread, poll; };
  for (auto v : {Variant{"overlap_24MiB/comm_thread", true, false}, Variant{"overlap_24MiB/nbc_no_poll", false, false},
                 Variant{"overlap_24MiB/nbc_poll_in_hooks", false, true}})
    benchmark::RegisterBenchmark(v.name, [v](benchmark::State& s) {
      overlap(s, v.thread ? g_comm.get() : g_comm_nbc.get(), v.poll);
    })
        ->Iterations(5)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  const char* op_names[] = {"allreduce", "reduce_scatter", "all_gather"};
  for (Op op : {allreduce, reduce_scatter, all_gather})
    for (int64_t bytes = 1 << 10; bytes <= (int64_t{256} << 20); bytes *= 4)
      benchmark::RegisterBenchmark(op_names[op], [op](benchmark::State& s) { run(s, op); })
          ->Arg(bytes)
          ->Iterations(iterations_for(bytes))
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
}

}  // namespace

int main(int argc, char** argv) {
  llmtrain::Runtime rt(argc, argv);
  g_rt = &rt;
  g_comm = llmtrain::make_collectives(rt, torch::kCPU, llmtrain::MpiAsync::comm_thread);
  g_comm_nbc = llmtrain::make_collectives(rt, torch::kCPU, llmtrain::MpiAsync::nonblocking);
  benchmark::Initialize(&argc, argv);
  register_all();
  llmtrain::bench::run_specified_benchmarks(rt.rank());
  benchmark::Shutdown();
  g_comm.reset();
  g_comm_nbc.reset();
  return 0;
}
