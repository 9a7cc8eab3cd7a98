#include "llmtrain/prediction/calibrate.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>

#include <ATen/core/Generator.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>
#include <mpi.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "llmtrain/core/atomic_file.hpp"
#include "llmtrain/core/config.hpp"
#include "llmtrain/core/log.hpp"
#include "llmtrain/data/loader.hpp"
#include "llmtrain/distributed/collectives.hpp"
#include "llmtrain/distributed/runtime.hpp"
#include "llmtrain/model/transformer.hpp"
#include "llmtrain/prediction/cost_model.hpp"
#include "llmtrain/model/precision.hpp"  // defines: AutocastGuard, compute_dtype

namespace llmtrain {
namespace {

using Clock = std::chrono::steady_clock;

// Median of 5 timed repetitions (after one warm-up) of `f`, each repetition
// running f `reps` times; seconds per call. The slowest rank's median.
// `sample_s` > 0: reps instead from the warm-up's time, so that a repetition
// takes about sample_s (at most 20 calls; the same count on every rank).
double time_call(const std::function<void()>& f, int reps, const torch::Device& device, double sample_s = 0.0) {
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize();
  };
  const auto warm = Clock::now();
  f();
  sync();
  if (sample_s > 0) {
    const double once = std::chrono::duration<double>(Clock::now() - warm).count();
    double n = std::clamp(sample_s / std::max(once, 1e-6), 1.0, 20.0);
    MPI_Allreduce(MPI_IN_PLACE, &n, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    reps = static_cast<int>(n);
  }
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    for (int r = 0; r < reps; ++r) f();
    sync();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count() / reps);
  }
  std::sort(t.begin(), t.end());
  double med = t[2], slowest = 0;
  MPI_Allreduce(&med, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

// Repetitions so that one timed repetition takes about `rep_s` (50 ms; a
// step-scope calibration 10 ms).
int reps_for(double flops_or_bytes, double rate_per_s, double rep_s = 0.05) {
  return static_cast<int>(std::clamp(rep_s * rate_per_s / std::max(1.0, flops_or_bytes), 1.0, 200.0));
}

// GEMMs of forward_gemms() in the layouts the model runs them (nn::Linear: x W^T;
// backward: dY W and dY^T X), each kept at its shape. Returns the large-GEMM
// rate at which the profile's shape terms give their total time
// (large_gemm_tflops): until 2026-11-27 it was their FLOP-weighted rate, which
// already holds their shapes' efficiency, and a model of other shapes took its
// own efficiency on top of it (the H100's presets at batch 2-4 predicted 19-27%
// slow; docs/performance-model.md).
double measure_gemms(const ModelConfig& m, int64_t batch, bool sixteen, const torch::Device& dev, DeviceProfile& p,
                     double rep_s) {
  const auto opt = torch::TensorOptions().device(dev).dtype(sixteen ? torch::kBFloat16 : torch::kFloat);
  std::vector<GemmTiming> timed;
  torch::NoGradGuard no_grad;
  for (const auto& g : forward_gemms(m, batch)) {
    auto x = torch::randn({g.m, g.k}, opt), w = torch::randn({g.n, g.k}, opt), dy = torch::randn({g.m, g.n}, opt);
    const double flops = 2.0 * g.m * g.n * g.k;
    const int reps = reps_for(flops, sixteen ? 2e10 : 5e10, rep_s);
    struct Product {
      int64_t m, n, k;
      std::function<void()> run;
    };
    const std::vector<Product> products = {
        {g.m, g.n, g.k, [&] { (void)torch::matmul(x, w.t()); }},   // forward
        {g.m, g.k, g.n, [&] { (void)torch::matmul(dy, w); }},      // input gradient
        {g.n, g.k, g.m, [&] { (void)torch::matmul(dy.t(), x); }},  // weight gradient
    };
    for (const auto& pr : products) {
      const double s = time_call(pr.run, reps, dev);
      p.gemm_tflops[gemm_key(pr.m, pr.n, pr.k, sixteen)] = flops / s / 1e12;
      timed.push_back({pr.m, pr.n, pr.k, static_cast<double>(g.count), s});
    }
  }
  return large_gemm_tflops(p, timed);
}

// Causal SDPA forward + backward at the model's heads and head dimension and
// sequence length `seq`; FLOPs counted as the cost model counts them (the causal
// half, backward 2.5x forward).
double measure_attention(const ModelConfig& m, int64_t batch, int64_t seq, bool sixteen, const torch::Device& dev,
                         double rep_s) {
  const auto opt =
      torch::TensorOptions().device(dev).dtype(sixteen ? torch::kBFloat16 : torch::kFloat).requires_grad(true);
  auto q = torch::randn({batch, m.n_head, seq, m.head_dim}, opt);
  auto k = torch::randn({batch, m.n_kv_head, seq, m.head_dim}, opt);
  auto v = torch::randn({batch, m.n_kv_head, seq, m.head_dim}, opt);
  const double fwd = 4.0 * batch * m.n_head * seq * seq * m.head_dim / 2.0;
  const double s = time_call(
      [&] {
        auto o = at::scaled_dot_product_attention(q, k, v, {}, 0.0, true, std::nullopt, m.n_kv_head != m.n_head);
        o.sum().backward();
      },
      reps_for(fwd * 3.5, 1e10, rep_s), dev);
  return fwd * 3.5 / s / 1e12;
}

// Element-wise bandwidth on tensors of the model's activation size: c = a + b
// reads 2 and writes 1.
double measure_memory(int64_t numel, const torch::Device& dev) {
  numel = std::max<int64_t>(numel, 1 << 20);
  auto a = torch::randn({numel}, torch::TensorOptions().device(dev)), b = torch::randn_like(a), c = torch::empty_like(a);
  const double bytes = 12.0 * numel;
  const double s = time_call([&] { at::add_out(c, a, b); }, reps_for(bytes, 5e9), dev);
  return bytes / s / 1e9;
}

// Fused AdamW's streaming rate: one at::_fused_adamw_ call (the kernel every
// strategy steps through, distributed/fused_adamw.hpp) over tensors of the
// bucket's size holding `numel` fp32 elements in all, then the gradients'
// norm (clipping): 28 + 4 bytes per element, as the cost model counts them.
double measure_optimizer_gbps(int64_t numel, int64_t piece, const torch::Device& dev) {
  piece = std::max<int64_t>(1, std::min(piece, numel));
  const auto opt = torch::TensorOptions().device(dev).dtype(torch::kFloat);
  std::vector<torch::Tensor> params, grads, m, v;
  for (int64_t done = 0; done < numel; done += piece) {
    const int64_t n = std::min(piece, numel - done);
    params.push_back(torch::randn({n}, opt));
    grads.push_back(torch::randn({n}, opt) * 1e-3);
    m.push_back(torch::zeros({n}, opt));
    v.push_back(torch::zeros({n}, opt));
  }
  const std::vector<torch::Tensor> steps(params.size(), torch::ones({}, opt));
  torch::NoGradGuard no_grad;
  const double bytes = 32.0 * static_cast<double>(numel);
  const double s = time_call(
      [&] {
        (void)at::_foreach_norm(grads, 2);
        at::_fused_adamw_(params, grads, m, v, /*max_exp_avg_sqs=*/{}, steps, 1e-4, 0.9, 0.95, 0.1, 1e-8,
                          /*amsgrad=*/false, /*maximize=*/false, std::nullopt, std::nullopt);
      },
      reps_for(bytes, dev.is_cuda() ? 2e12 : 5e9), dev);
  return bytes / s / 1e9;
}

// One operator's fixed cost, forward and backward: a chain of 50 multiplies on
// a tensor of `numel` elements (the model's activations) and its backward, per
// operator, less the time to stream its bytes (each multiply and its backward
// read and write the tensor once) at `memory_gbps`. At the model's size the
// fixed cost holds what a 1-element chain misses: the intra-op thread pool's
// fork and join (CPU), the allocator, the autograd node. Never below the
// 1-element chain's cost.
double measure_launch_us(const torch::Device& dev, int64_t numel, double memory_gbps) {
  auto chain_s = [&](int64_t n) {
    auto x = torch::ones({n}, torch::TensorOptions().device(dev).requires_grad(true));
    return time_call(
               [&] {
                 auto y = x;
                 for (int i = 0; i < 50; ++i) y = y * 1.0001;
                 y.sum().backward();
               },
               n > 1 ? 5 : 20, dev) /
           101.0;
  };
  const double tiny = chain_s(1);
  const double sized = chain_s(numel) - 8.0 * static_cast<double>(numel) / (memory_gbps * 1e9);
  return std::max(tiny, sized) * 1e6;
}

// The per-operator cost fitted from the model itself: one forward + backward
// of a fresh copy of the model (the run's config and dtype, random tokens, the
// run's micro-batch) is timed, and launch_us is what makes the cost model's
// forward + backward of that micro-batch equal it, given every other rate of
// the profile. The chain measurement stays its floor: the fit can only add
// what the chain of multiplies did not see (the model's own operators, their
// allocations and autograd nodes, the thread pool at the model's sizes).
double fit_launch_us(const Config& c, const ModelConfig& m, const torch::Device& dev, const DeviceProfile& p,
                     double floor_us, double* measured_ms, double sample_s) {
  torch::manual_seed(c.seed);
  Transformer probe(m);
  probe->to(dev);
  const auto dtype = compute_dtype(c.dtype, dev);
  probe->plan_attention(dev, dtype);
  const auto tokens = torch::TensorOptions().device(dev).dtype(torch::kLong);
  const auto x = torch::randint(0, m.vocab_size, {c.batch_size, m.block_size}, tokens);
  const auto y = torch::randint(0, m.vocab_size, {c.batch_size, m.block_size}, tokens);
  auto step = [&] {
    torch::Tensor loss;
    {
      AutocastGuard autocast(dev, dtype);
      loss = probe->loss(x, y);
    }
    loss.backward();
    for (auto& t : probe->parameters()) t.mutable_grad() = torch::Tensor();  // as zero_grad(set_to_none)
  };
  // Each of the 5 timed repetitions runs the step often enough to take about
  // 0.25 s: for a small model, 5 single steps span a fraction of a second,
  // which one burst of other work on the machine can fill, and the median is
  // then that burst (docs/performance-model.md, the CPU tables).
  const double s = time_call(step, 1, dev, sample_s);
  if (measured_ms) *measured_ms = s * 1e3;
  // On a GPU the host's dispatch runs ahead of the kernels and shows only where
  // it is the slower (cost_model.cpp): a fit would book whatever the kernel
  // rates miss as launches, and carry it to every other shape. The chain's
  // figure stays; the model's time is reported beside the prediction.
  if (p.asynchronous()) return floor_us;
  // The prediction of one micro-batch is linear in launch_us: fb(l) = fb0 + l * per_us.
  RunShape r = RunShape::from_config(c, m);
  r.grad_accum = 1;
  DeviceProfile q = p;
  q.launch_us = 0.0;
  const double fb0 = predict_step(r, {1, 1}, q).forward_backward_s();
  q.launch_us = 1.0;
  const double per_us = predict_step(r, {1, 1}, q).forward_backward_s() - fb0;
  if (per_us <= 0) return floor_us;
  return std::max(floor_us, (s - fb0) / per_us);
}

struct CommFigures {
  double busbw_gbps = 0, latency_us = 0, overlap = 1.0;
};

CommFigures measure_collectives(Collectives& comm, double bytes, const torch::Device& dev, int64_t gemm_n) {
  CommFigures f;
  const double W = comm.world_size();
  auto small = torch::ones({1}, torch::TensorOptions().device(dev));
  f.latency_us = time_call([&] { comm.allreduce_sum(small); }, 50, dev) * 1e6;
  const int64_t n = std::max<int64_t>(static_cast<int64_t>(bytes / 4.0) / comm.world_size() * comm.world_size(),
                                      comm.world_size());
  auto buf = torch::ones({n}, torch::TensorOptions().device(dev));
  auto shard = torch::empty({n / comm.world_size()}, buf.options());
  const double ar = time_call([&] { comm.allreduce_sum(buf); }, 3, dev);
  const double rs = time_call([&] { comm.reduce_scatter_sum(buf, shard); }, 3, dev);
  const double ag = time_call([&] { comm.all_gather(shard, buf); }, 3, dev);
  const double moved = 4.0 * n;
  // Bus bandwidth of each (nccl-tests' convention), the mean of the three.
  auto bw = [&](double factor, double s) { return factor * moved / std::max(1e-9, s - f.latency_us * 1e-6) / 1e9; };
  f.busbw_gbps = (bw(2 * (W - 1) / W, ar) + bw((W - 1) / W, rs) + bw((W - 1) / W, ag)) / 3.0;
  // Overlap: an allreduce started before a stretch of GEMMs as long as itself,
  // polled between them as the gradient hooks do.
  auto a = torch::randn({gemm_n, gemm_n}, torch::TensorOptions().device(dev));
  const double one = time_call([&] { (void)torch::matmul(a, a); }, 3, dev);
  const int count = static_cast<int>(std::clamp(ar / one, 1.0, 1000.0));
  auto compute = [&] {
    for (int i = 0; i < count; ++i) (void)torch::matmul(a, a);
  };
  const double tc = time_call(compute, 1, dev);
  const double to = time_call(
      [&] {
        auto work = comm.allreduce_sum_async(buf);
        for (int i = 0; i < count; ++i) {
          (void)torch::matmul(a, a);
          work->test();
        }
        work->wait();
      },
      1, dev);
  f.overlap = std::clamp((tc + ar - to) / std::min(tc, ar), 0.0, 1.0);
  return f;
}

// Checkpoint writes: 64 MiB written and fsynced by every rank at once, in
// out_dir (where the checkpoints go).
double measure_storage_gbps(const std::string& dir, int rank) {
  std::filesystem::create_directories(dir);
  const std::string path = fmt::format("{}/.calibrate_{}.tmp", dir, rank);
  std::vector<char> block(64 << 20, 1);
  const double s = time_call(
      [&] {
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) throw Error(fmt::format("calibrate: cannot write {}", path));
        for (size_t off = 0; off < block.size();) {
          const ssize_t w = ::write(fd, block.data() + off, block.size() - off);
          if (w <= 0) break;
          off += static_cast<size_t>(w);
        }
        ::fsync(fd);
        ::close(fd);
      },
      1, torch::Device(torch::kCPU));
  std::filesystem::remove(path);
  return static_cast<double>(block.size()) / s / 1e9;
}

// An asynchronous save's snapshot: 256 MiB of float32 copied into a buffer
// kept from the previous snapshot, from host memory (a CPU run) or from the
// device into pinned host memory (CUDA), as CheckpointOps::host_copy does.
double measure_snapshot_copy_gbps(const torch::Device& dev) {
  const int64_t n = int64_t{64} << 20;
  const torch::Tensor src = torch::ones({n}, torch::TensorOptions().device(dev).dtype(torch::kFloat));
  torch::Tensor dst = torch::empty({n}, torch::TensorOptions().dtype(torch::kFloat).pinned_memory(dev.is_cuda()));
  const double s = time_call([&] { dst.copy_(src, /*non_blocking=*/dev.is_cuda()); }, 1, dev);
  return static_cast<double>(n) * sizeof(float) / s / 1e9;
}

// The calibration draws random tensors; a run that calibrates before its first
// step (device_profile=calibrate) gets its random streams back as they were
// (dropout, and a resumed run's restored state).
class KeepRandomState {
 public:
  explicit KeepRandomState(const torch::Device& dev) {
    keep(at::detail::getDefaultCPUGenerator());
    if (dev.is_cuda()) keep(at::detail::getCUDAHooks().getDefaultGenerator(dev.index()));
  }
  ~KeepRandomState() {
    for (auto& [gen, state] : kept_) {
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(state);
    }
  }
  KeepRandomState(const KeepRandomState&) = delete;
  KeepRandomState& operator=(const KeepRandomState&) = delete;

 private:
  void keep(at::Generator gen) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    auto state = gen.get_state();
    kept_.emplace_back(std::move(gen), std::move(state));
  }
  std::vector<std::pair<at::Generator, at::Tensor>> kept_;
};

}  // namespace

std::string calibrate_device_profile(const Config& c, Runtime& rt, DeviceProfile* measured, CalibrationScope scope) {
  const bool full = scope == CalibrationScope::full;
  const double rep_s = full ? 0.05 : 0.01;
  const bool run16 = c.dtype != ComputeDtype::float32;
  const torch::Device dev = rt.setup_device(c.device, c.num_threads);
  const KeepRandomState keep_random(dev);
  const DataInfo data = read_data_info(c.data_dir);
  const ModelConfig m = ModelConfig::from_config(c, data.vocab_size);
  const DeviceProfile* base = builtin_profile_for_device(rt.device_name());
  DeviceProfile p = base ? *base : builtin_device_profiles().back();
  p.name = fmt::format("calibrated: {} x {} on {}", rt.world_size(), rt.device_name(), rt.hostname());
  p.model = device_peak_model(rt.device_name());
  p.gemm_tflops.clear();
  log::info("calibrating {} ({} ranks, {} threads per rank) at the shapes of {}{}", rt.device_name(), rt.world_size(),
            rt.num_threads(), m.arch_string(), full ? "" : ": the step's rates only, briefly");
  // A step-scope calibration keeps the base's rate for the dtype the run does
  // not use, scaled by what the measured one found against the base.
  const std::vector<bool> dtypes = full ? std::vector<bool>{false, true} : std::vector<bool>{run16};
  const double base_gemm16 = p.matmul_tflops_16bit, base_gemm32 = p.matmul_tflops_fp32;
  for (const bool sixteen : dtypes)
    (sixteen ? p.matmul_tflops_16bit : p.matmul_tflops_fp32) = measure_gemms(m, c.batch_size, sixteen, dev, p, rep_s);
  if (!full) {
    if (run16) p.matmul_tflops_fp32 = base_gemm32 * p.matmul_tflops_16bit / base_gemm16;
    else p.matmul_tflops_16bit = base_gemm16 * p.matmul_tflops_fp32 / base_gemm32;
  }
  // Attention at the model's sequence length and, on a GPU, at a quarter, half
  // and twice it with the same tokens per batch (long sequences are not free:
  // docs/performance-model.md), each kept at its (T, head dim). The profile's
  // general rate is the model's length's divided by its shape efficiency, so
  // that lengths not measured scale from it (cost_model.hpp).
  p.attention_by_shape_tflops.clear();
  const int64_t T = m.block_size, tokens = c.batch_size * T;
  std::vector<int64_t> lengths = {T};
  if (dev.is_cuda())
    for (int64_t t : {T / 4, T / 2, 2 * T})
      if (t >= 128 && t <= 16384 && tokens / t >= 1) lengths.push_back(t);
  for (const bool sixteen : dtypes)
    for (const int64_t t : lengths) {
      const int64_t b = std::max<int64_t>(1, tokens / t);
      const double rate = measure_attention(m, b, t, sixteen, dev, rep_s);
      p.attention_by_shape_tflops[attention_key(t, m.head_dim, sixteen)] = rate;
      if (t == T)
        (sixteen ? p.attention_tflops_16bit : p.attention_tflops_fp32) =
            rate / attention_shape_efficiency(p, b, m.n_head, t);
    }
  const double base_memory_gbps = p.memory_gbps;
  p.memory_gbps = measure_memory(c.batch_size * m.block_size * std::max(m.n_embd, m.ffn_hidden), dev);
  // Fused kernels (published runs' frameworks; not this program's count) keep
  // their share of what was measured.
  if (p.fused_elementwise_gbps > 0 && base_memory_gbps > 0)
    p.fused_elementwise_gbps *= p.memory_gbps / base_memory_gbps;
  // AdamW over the bucket-sized pieces it steps: the streaming rate, not the
  // model's whole state, is wanted (at most 64 Mi elements on a GPU, 16 Mi on a
  // CPU), and at least 4 Mi, so that a small model's rate is not its per-call
  // cost (the launches are counted apart).
  p.optimizer_gbps = measure_optimizer_gbps(std::clamp<int64_t>(m.num_params(), int64_t{4} << 20,
                                                                int64_t{dev.is_cuda() ? 64 : 16} << 20),
                                            static_cast<int64_t>(c.ddp_bucket_mb * 1024.0 * 1024.0 / 4.0), dev);
  const double chain_us = measure_launch_us(dev, c.batch_size * m.block_size * m.n_embd, p.memory_gbps);
  double model_ms = 0;
  p.launch_us = fit_launch_us(c, m, dev, p, chain_us, &model_ms, full ? 0.25 : 0.1);
  log::info("per-operator cost: {:.1f} us (a chain of multiplies: {:.1f} us; one forward + backward of the model "
            "in {}: {:.1f} ms)",
            p.launch_us, chain_us, to_string(c.dtype), model_ms);
  if (rt.world_size() > 1) {
    auto comm = make_collectives(rt, dev);
    const double bucket = std::min(c.ddp_bucket_mb * 1024.0 * 1024.0, 4.0 * m.num_params());
    const CommFigures f = measure_collectives(*comm, bucket, dev, std::min<int64_t>(m.n_embd, 512));
    // Between nodes the ring leaves each node through all its links at once;
    // the profile keeps each rank's share, which the cost model multiplies
    // back by the ranks per node of the run it predicts.
    if (rt.num_nodes() > 1)
      p.inter_node_busbw_gbps = f.busbw_gbps / static_cast<double>(std::max(1, rt.local_size()));
    else
      p.intra_node_busbw_gbps = f.busbw_gbps;
    p.collective_latency_us = f.latency_us;
    p.comm_overlap = f.overlap;
  }
  if (full) {
    p.storage_gbps = measure_storage_gbps(c.out_dir, rt.rank());
    p.host_copy_gbps = measure_snapshot_copy_gbps(torch::Device(torch::kCPU));
    p.d2h_gbps = dev.is_cuda() ? measure_snapshot_copy_gbps(dev) : 0.0;
    TokenLoader loader(LoaderOptions::from_config(c), rt, Split::train, dev, /*stream=*/0);
    p.data_batch_us = time_call([&] { (void)loader.next(); }, 10, dev) * 1e6;
  }
  if (measured) *measured = p;
  if (!rt.is_root()) return "";
  const std::string path = (std::filesystem::path(c.out_dir) / "device_profile.json").string();
  write_file_atomic(path, device_profile_json(p).dump(2) + "\n");
  return path;
}

}  // namespace llmtrain
