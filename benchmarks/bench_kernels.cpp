// The fused kernels (src/kernels/) against the ATen ops they replace, forward +
// backward per iteration:
//   - cpu_*: the CPU twin against ATen on CPU, at a small model's width (rows
//     2048, hidden 768, ffn 2048, 12 heads of 64, vocab 8192), fp32 and bf16;
//   - gpu_*: the CUDA kernel against ATen on a GPU at LLaMA-2 1.36B's step
//     (8 x 2048 tokens, hidden 2304, 18 heads of 128, ffn 6144, vocab 32000;
//     GPT-2's GELU at 4 x 2304), bf16 under the model's dtypes; skipped
//     without a CUDA device.
//   build/bin/bench-kernels --benchmark_counters_tabular=true
//   build/bin/bench-kernels --benchmark_filter=gpu_   (on a GPU node)
// Counter: tokens/s (rows of the op per second, forward + backward).
#include <benchmark/benchmark.h>

#include <functional>
#include <optional>

#include <torch/torch.h>

#include "llmtrain/kernels/kernels.hpp"  // defines: the ops, Impl
#include "model/layers.hpp"              // defines: model_detail::apply_rope (compile=False's RoPE)

namespace {

using llmtrain::kernels::Impl;
namespace k = llmtrain::kernels;

struct Shape {
  int64_t rows, C, F, H, K, D, V;
};
const Shape kCpuShape{2048, 768, 2048, 12, 12, 64, 8192};
const Shape kGpuShape{8 * 2048, 2304, 6144, 18, 18, 128, 32000};

// A step of one op: built once (inputs), run per iteration (forward + backward).
using Step = std::function<void()>;
using Make = std::function<Step(const Shape&, torch::Device, torch::ScalarType, std::optional<Impl>)>;

void run(benchmark::State& state, const Make& make, bool gpu, std::optional<Impl> impl, torch::ScalarType dtype) {
  if (gpu && !(k::cuda_built() && torch::cuda::is_available())) {
    state.SkipWithError("no CUDA device (or a build without the CUDA path)");
    return;
  }
  const Shape s = gpu ? kGpuShape : kCpuShape;
  const torch::Device dev = gpu ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  torch::manual_seed(0);
  Step step = make(s, dev, dtype, impl);
  step();  // warm-up (allocator, cuBLAS handles)
  if (gpu) torch::cuda::synchronize();
  for (auto _ : state) {
    step();
    if (gpu) torch::cuda::synchronize();
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(s.rows), benchmark::Counter::kIsIterationInvariantRate);
}

torch::Tensor leaf(std::vector<int64_t> shape, torch::Device dev, torch::ScalarType t) {
  return torch::randn(shape, torch::TensorOptions().device(dev).dtype(t)).requires_grad_(true);
}

void zero_grads(std::initializer_list<torch::Tensor*> ts) {
  for (auto* t : ts) t->mutable_grad().reset();
}

// Residual stream fp32, branch output and GEMM input in dtype (the model's autocast layout).
Step make_add_rmsnorm(const Shape& s, torch::Device dev, torch::ScalarType dt, std::optional<Impl> impl) {
  auto x = leaf({s.rows, s.C}, dev, torch::kFloat), d = leaf({s.rows, s.C}, dev, dt);
  auto w = leaf({s.C}, dev, torch::kFloat);
  auto gy = torch::randn({s.rows, s.C}, x.options().dtype(dt));
  return [=]() mutable {
    k::NormOut r;
    if (impl) {
      r = k::add_rmsnorm(x, d, w, 1e-5, dt, impl);
    } else {  // the model's ATen ops today: add, then RMSNorm in fp32, then the autocast cast
      r.residual = x + d;
      r.normed = at::rms_norm(r.residual, {s.C}, w, 1e-5).to(dt);
    }
    torch::autograd::backward({r.normed, r.residual}, {gy, torch::zeros_like(r.residual)});
    zero_grads({&x, &d, &w});
  };
}

Step make_add_layernorm(const Shape& s, torch::Device dev, torch::ScalarType dt, std::optional<Impl> impl) {
  auto x = leaf({s.rows, s.C}, dev, torch::kFloat), d = leaf({s.rows, s.C}, dev, dt);
  auto w = leaf({s.C}, dev, torch::kFloat), b = leaf({s.C}, dev, torch::kFloat);
  auto gy = torch::randn({s.rows, s.C}, x.options().dtype(dt));
  return [=]() mutable {
    k::NormOut r;
    if (impl) {
      r = k::add_layernorm(x, d, w, b, 1e-5, dt, impl);
    } else {
      r.residual = x + d;
      r.normed = at::layer_norm(r.residual, {s.C}, w, b, 1e-5).to(dt);
    }
    torch::autograd::backward({r.normed, r.residual}, {gy, torch::zeros_like(r.residual)});
    zero_grads({&x, &d, &w, &b});
  };
}

Step make_rope(const Shape& s, torch::Device dev, torch::ScalarType dt, std::optional<Impl> impl) {
  const int64_t T = 2048, B = s.rows / T, NH = s.H + 2 * s.K, half = s.D / 2;
  auto qkv = leaf({B, T, NH * s.D}, dev, dt);
  auto angle = torch::arange(T, torch::kDouble).unsqueeze(1) *
               torch::pow(10000.0, -2.0 * torch::arange(half, torch::kDouble) / static_cast<double>(s.D));
  auto cos = angle.cos().to(dev, torch::kFloat).unsqueeze(1), sin = angle.sin().to(dev, torch::kFloat).unsqueeze(1);
  auto gq = torch::randn({B, s.H, T, s.D}, qkv.options().requires_grad(false));
  auto gk = torch::randn({B, s.K, T, s.D}, gq.options());
  return [=]() mutable {
    torch::Tensor q, kk, v;
    if (impl) {
      auto r = k::rope_qk_norm(qkv, s.H, s.K, cos, sin, {}, {}, 1e-6, impl);
      q = r.q, kk = r.k, v = r.v;
    } else {  // layers.cpp today: narrow + view, rotate-half in the GEMM's dtype, transpose + contiguous
      auto c = cos.to(dt), sn = sin.to(dt);
      auto rot = [&](const torch::Tensor& x) {
        auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
        return torch::cat({x1 * c - x2 * sn, x2 * c + x1 * sn}, -1);
      };
      q = rot(qkv.narrow(-1, 0, s.H * s.D).view({B, T, s.H, s.D})).transpose(1, 2).contiguous();
      kk = rot(qkv.narrow(-1, s.H * s.D, s.K * s.D).view({B, T, s.K, s.D})).transpose(1, 2).contiguous();
      v = qkv.narrow(-1, (s.H + s.K) * s.D, s.K * s.D).view({B, T, s.K, s.D}).transpose(1, 2).contiguous();
    }
    torch::autograd::backward({q, kk, v}, {gq, gk, gk});
    zero_grads({&qkv});
  };
}

// compile=False's RoPE of q and k (model/layers.cpp apply_rope, one autograd
// node: a multiply and a fused multiply-add per half, each way) against the
// composition it replaced (x1*c - x2*s, x2*c + x1*s, cat: 7 kernels forward and
// autograd's backward), both on (B, T, h, D) views of c_attn's output, as the
// model passes them. `impl` set: apply_rope; unset: the composition.
Step make_rope_model(const Shape& s, torch::Device dev, torch::ScalarType dt, std::optional<Impl> impl) {
  const int64_t T = 2048, B = s.rows / T, NH = s.H + 2 * s.K, half = s.D / 2;
  auto qkv = leaf({B, T, NH * s.D}, dev, dt);
  auto angle = torch::arange(T, torch::kDouble).unsqueeze(1) *
               torch::pow(10000.0, -2.0 * torch::arange(half, torch::kDouble) / static_cast<double>(s.D));
  auto c = angle.cos().to(dev, dt).unsqueeze(1), sn = angle.sin().to(dev, dt).unsqueeze(1);  // cast once per forward
  auto gq = torch::randn({B, T, s.H, s.D}, qkv.options().requires_grad(false));
  auto gk = torch::randn({B, T, s.K, s.D}, gq.options());
  const bool rotate = impl.has_value();
  return [=]() mutable {
    auto rot = [&](const torch::Tensor& x) {
      if (rotate) return llmtrain::model_detail::apply_rope(x, c, sn);
      auto halves = x.chunk(2, -1);
      return torch::cat({halves[0] * c - halves[1] * sn, halves[1] * c + halves[0] * sn}, -1);
    };
    auto parts = qkv.split_with_sizes({s.H * s.D, s.K * s.D, s.K * s.D}, -1);
    auto q = rot(parts[0].view({B, T, s.H, s.D}));
    auto kk = rot(parts[1].view({B, T, s.K, s.D}));
    torch::autograd::backward({q, kk}, {gq, gk});
    zero_grads({&qkv});
  };
}

Step make_swiglu(const Shape& s, torch::Device dev, torch::ScalarType dt, std::optional<Impl> impl) {
  auto h = leaf({s.rows, 2 * s.F}, dev, dt);
  auto gy = torch::randn({s.rows, s.F}, h.options().requires_grad(false));
  return [=]() mutable {
    torch::Tensor y;
    if (impl) {
      y = k::swiglu(h, impl);
    } else {
      auto p = h.chunk(2, -1);
      y = at::silu(p[0]) * p[1];
    }
    y.backward(gy);
    zero_grads({&h});
  };
}

Step make_gelu(const Shape& s, torch::Device dev, torch::ScalarType dt, std::optional<Impl> impl) {
  const int64_t F = 4 * s.C;
  auto h = leaf({s.rows, F}, dev, dt);
  auto b = leaf({F}, dev, torch::kFloat);
  auto gy = torch::randn({s.rows, F}, h.options().requires_grad(false));
  return [=]() mutable {
    auto y = impl ? k::gelu_tanh(h, b, impl) : at::gelu(h + b.to(dt), "tanh");
    y.backward(gy);
    zero_grads({&h, &b});
  };
}

Step make_xent(const Shape& s, torch::Device dev, torch::ScalarType dt, std::optional<Impl> impl) {
  auto x = leaf({s.rows, s.C}, dev, dt);
  auto w = torch::randn({s.V, s.C}, x.options().requires_grad(false)).mul_(0.02).requires_grad_(true);
  auto y = torch::randint(s.V, {s.rows}, torch::TensorOptions().device(dev).dtype(torch::kLong));
  return [=]() mutable {
    auto loss = impl ? k::lm_head_cross_entropy(x, w, y, -1, 0, impl)
                     : at::cross_entropy_loss(at::linear(x, w).to(torch::kFloat), y, {}, at::Reduction::Mean, -1);
    loss.backward();
    zero_grads({&x, &w});
  };
}

#define KERNEL_BENCH(op, maker)                                                                                     \
  BENCHMARK_CAPTURE(run, cpu_##op##_twin_fp32, maker, false, Impl::twin, torch::kFloat)->Unit(benchmark::kMillisecond); \
  BENCHMARK_CAPTURE(run, cpu_##op##_aten_fp32, maker, false, std::nullopt, torch::kFloat)                           \
      ->Unit(benchmark::kMillisecond);                                                                              \
  BENCHMARK_CAPTURE(run, cpu_##op##_twin_bf16, maker, false, Impl::twin, torch::kBFloat16)                          \
      ->Unit(benchmark::kMillisecond);                                                                              \
  BENCHMARK_CAPTURE(run, cpu_##op##_aten_bf16, maker, false, std::nullopt, torch::kBFloat16)                        \
      ->Unit(benchmark::kMillisecond);                                                                              \
  BENCHMARK_CAPTURE(run, gpu_##op##_cuda_bf16, maker, true, Impl::cuda, torch::kBFloat16)                           \
      ->Unit(benchmark::kMillisecond)->UseRealTime();                                                               \
  BENCHMARK_CAPTURE(run, gpu_##op##_aten_bf16, maker, true, std::nullopt, torch::kBFloat16)                         \
      ->Unit(benchmark::kMillisecond)->UseRealTime()

KERNEL_BENCH(add_rmsnorm, make_add_rmsnorm);
KERNEL_BENCH(add_layernorm, make_add_layernorm);
KERNEL_BENCH(rope, make_rope);
KERNEL_BENCH(swiglu, make_swiglu);
// compile=False's RoPE: *_rotate = apply_rope today, *_composed = before 2026-11-28.
BENCHMARK_CAPTURE(run, cpu_rope_model_rotate_bf16, make_rope_model, false, Impl::twin, torch::kBFloat16)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run, cpu_rope_model_composed_bf16, make_rope_model, false, std::nullopt, torch::kBFloat16)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run, cpu_rope_model_rotate_fp32, make_rope_model, false, Impl::twin, torch::kFloat)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run, cpu_rope_model_composed_fp32, make_rope_model, false, std::nullopt, torch::kFloat)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run, gpu_rope_model_rotate_bf16, make_rope_model, true, Impl::cuda, torch::kBFloat16)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(run, gpu_rope_model_composed_bf16, make_rope_model, true, std::nullopt, torch::kBFloat16)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
KERNEL_BENCH(gelu_tanh, make_gelu);
KERNEL_BENCH(lm_head_cross_entropy, make_xent);

}  // namespace

BENCHMARK_MAIN();
