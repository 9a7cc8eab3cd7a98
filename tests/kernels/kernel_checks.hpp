// The kernels' checks against the ATen ops they replace, shared by the CPU twin
// test (test_kernels_twin.cpp) and the GPU test (test_kernels_gpu.cpp): each
// check builds leaves of a stated shape and dtype on a device, runs the forced
// path and the ATen ops written out here (not the library's own reference
// functions), and compares outputs and the leaves' gradients
// (torch::autograd::grad under one fixed random weighting of the outputs).
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "llmtrain/kernels/kernels.hpp"  // defines: the ops, Impl

namespace llmtrain::kernels::testing {

// |got - want| <= atol * max|want| + rtol * |want|, elementwise.
struct Tol {
  double atol, rtol;
};
// fp32 twins: sums in another order than ATen's. bf16: both sides round once to
// bf16 from fp32 math: two units in its last place (2 x 2^-7 relative).
inline Tol tol_for(torch::ScalarType t) { return t == torch::kBFloat16 ? Tol{1.6e-2, 1.6e-2} : Tol{2e-5, 2e-5}; }

inline void expect_close(const torch::Tensor& got, const torch::Tensor& want, Tol tol, const std::string& what) {
  ASSERT_EQ(got.defined(), want.defined()) << what;
  if (!want.defined()) return;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_EQ(got.scalar_type(), want.scalar_type()) << what;
  const auto g = got.detach().to(torch::kCPU, torch::kDouble), w = want.detach().to(torch::kCPU, torch::kDouble);
  ASSERT_TRUE(g.isfinite().all().item<bool>()) << what << ": not finite";
  const double scale = w.abs().max().item<double>();
  const auto excess = (g - w).abs() - (tol.atol * scale + tol.rtol * w.abs());
  const auto worst = excess.flatten().argmax().item<int64_t>();
  EXPECT_LE(excess.flatten()[worst].item<double>(), 0.0)
      << what << ": element " << worst << " is " << g.flatten()[worst].item<double>() << ", ATen says "
      << w.flatten()[worst].item<double>() << " (max |ATen| " << scale << ")";
}

using Leaves = std::vector<torch::Tensor>;
using Fn = std::function<std::vector<torch::Tensor>(const Leaves&)>;

// Runs `fn` on fresh copies of `values` (those flagged require grad) and returns
// its outputs followed by the gradients of sum(out_i * r_i) for fixed random r_i.
inline std::vector<torch::Tensor> outputs_and_grads(const Leaves& values, const std::vector<bool>& diff, const Fn& fn) {
  Leaves leaves;
  std::vector<torch::Tensor> inputs;
  for (size_t i = 0; i < values.size(); ++i) {
    auto v = values[i].defined() ? values[i].detach().clone() : torch::Tensor();
    if (v.defined() && diff[i]) {
      v.requires_grad_(true);
      inputs.push_back(v);
    }
    leaves.push_back(v);
  }
  auto outs = fn(leaves);
  torch::manual_seed(99);
  torch::Tensor loss;
  for (const auto& o : outs) {
    if (!o.defined()) continue;
    auto r = torch::randn(o.sizes(), torch::kDouble).to(o.device(), torch::kFloat);
    auto term = (o.to(torch::kFloat) * r).sum();
    loss = loss.defined() ? loss + term : term;
  }
  auto grads = torch::autograd::grad({loss}, inputs, {}, false, false, /*allow_unused=*/true);
  outs.insert(outs.end(), grads.begin(), grads.end());
  return outs;
}

inline void compare(const std::string& what, const Leaves& values, const std::vector<bool>& diff, const Fn& kernel,
                    const Fn& aten, Tol tol) {
  const auto k = outputs_and_grads(values, diff, kernel);
  const auto a = outputs_and_grads(values, diff, aten);
  ASSERT_EQ(k.size(), a.size()) << what;
  for (size_t i = 0; i < k.size(); ++i) expect_close(k[i], a[i], tol, what + ", result " + std::to_string(i));
}

inline torch::Tensor rnd(std::vector<int64_t> shape, torch::Device dev, torch::ScalarType t, double scale = 1.0,
                         double shift = 0.0) {
  return (torch::randn(shape, torch::kDouble) * scale + shift).to(dev, t);
}

// ---- the checks ----

// x (B, T, C) residual in x_dtype, delta in d_dtype (or none), y in out_dtype.
inline void check_add_norm(torch::Device dev, Impl impl, bool layernorm, torch::ScalarType x_dtype,
                           torch::ScalarType d_dtype, bool with_delta, bool with_bias, torch::ScalarType out_dtype,
                           int64_t B, int64_t T, int64_t C, Tol tol) {
  torch::manual_seed(1);
  Leaves v = {rnd({B, T, C}, dev, x_dtype), with_delta ? rnd({B, T, C}, dev, d_dtype) : torch::Tensor(),
              rnd({C}, dev, torch::kFloat, 0.3, 1.0), with_bias ? rnd({C}, dev, torch::kFloat, 0.1) : torch::Tensor()};
  const double eps = 1e-5;
  auto kernel = [&](const Leaves& l) -> std::vector<torch::Tensor> {
    auto r = layernorm ? add_layernorm(l[0], l[1], l[2], l[3], eps, out_dtype, impl)
                       : add_rmsnorm(l[0], l[1], l[2], eps, out_dtype, impl);
    return {r.residual, r.normed};
  };
  auto aten = [&](const Leaves& l) -> std::vector<torch::Tensor> {
    torch::Tensor h = l[1].defined() ? l[0] + l[1] : l[0];
    auto y = layernorm ? at::layer_norm(h.to(torch::kFloat), {C}, l[2], l[3], eps)
                       : at::rms_norm(h.to(torch::kFloat), {C}, l[2], eps);
    return {l[1].defined() ? h : torch::Tensor(), y.to(out_dtype)};
  };
  compare(std::string(layernorm ? "add_layernorm" : "add_rmsnorm") + " " + to_string(impl), v,
          {true, true, true, true}, kernel, aten, tol);
}

// qkv (B, T, (H + 2K) D); tables shared (T, 1, D/2) or per token (B, T, 1, D/2).
inline void check_rope(torch::Device dev, Impl impl, torch::ScalarType dtype, int64_t B, int64_t T, int64_t H,
                       int64_t K, int64_t D, bool rope, bool qk_norm, bool per_token, Tol tol) {
  torch::manual_seed(2);
  const int64_t half = D / 2;
  auto pos = per_token ? torch::randint(T, {B, T}, torch::kLong).to(torch::kDouble).unsqueeze(-1)
                       : torch::arange(T, torch::kDouble).unsqueeze(-1);  // (B, T, 1) or (T, 1)
  auto angle = pos * torch::pow(10000.0, -2.0 * torch::arange(half, torch::kDouble) / static_cast<double>(D));
  auto cos = rope ? angle.cos().unsqueeze(-2).to(dev, torch::kFloat) : torch::Tensor();  // (.., T, 1, half)
  auto sin = rope ? angle.sin().unsqueeze(-2).to(dev, torch::kFloat) : torch::Tensor();
  Leaves v = {rnd({B, T, (H + 2 * K) * D}, dev, dtype), cos, sin,
              qk_norm ? rnd({D}, dev, torch::kFloat, 0.3, 1.0) : torch::Tensor(),
              qk_norm ? rnd({D}, dev, torch::kFloat, 0.3, 1.0) : torch::Tensor()};
  const double eps = 1e-6;
  auto kernel = [&](const Leaves& l) -> std::vector<torch::Tensor> {
    auto r = rope_qk_norm(l[0], H, K, l[1], l[2], l[3], l[4], eps, impl);
    // Attention's layout: (B, h, T, D) views of (B, T, h, D) storage.
    EXPECT_TRUE(r.q.transpose(1, 2).is_contiguous() && r.k.transpose(1, 2).is_contiguous() &&
                r.v.transpose(1, 2).is_contiguous());
    return {r.q, r.k, r.v};
  };
  // The model's ops (layers.cpp): narrow + view, per-head RMSNorm, rotate-half, transpose.
  auto aten = [&](const Leaves& l) -> std::vector<torch::Tensor> {
    auto q = l[0].narrow(-1, 0, H * D).view({B, T, H, D}).to(torch::kFloat);
    auto k = l[0].narrow(-1, H * D, K * D).view({B, T, K, D}).to(torch::kFloat);
    auto vv = l[0].narrow(-1, (H + K) * D, K * D).view({B, T, K, D});
    if (l[3].defined()) {
      q = at::rms_norm(q, {D}, l[3], eps);
      k = at::rms_norm(k, {D}, l[4], eps);
    }
    if (l[1].defined()) {
      auto rot = [&](const torch::Tensor& x) {
        auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
        return torch::cat({x1 * l[1] - x2 * l[2], x2 * l[1] + x1 * l[2]}, -1);
      };
      q = rot(q);
      k = rot(k);
    }
    return {q.to(dtype).transpose(1, 2).contiguous(), k.to(dtype).transpose(1, 2).contiguous(),
            vv.transpose(1, 2).contiguous()};
  };
  compare(std::string("rope_qk_norm ") + to_string(impl), v, {true, false, false, true, true}, kernel, aten, tol);
}

inline void check_swiglu(torch::Device dev, Impl impl, torch::ScalarType dtype, std::vector<int64_t> shape, Tol tol) {
  torch::manual_seed(3);
  Leaves v = {rnd(shape, dev, dtype, 2.0)};
  auto kernel = [&](const Leaves& l) -> std::vector<torch::Tensor> { return {swiglu(l[0], impl)}; };
  auto aten = [&](const Leaves& l) -> std::vector<torch::Tensor> {
    auto p = l[0].chunk(2, -1);
    return {(at::silu(p[0].to(torch::kFloat)) * p[1].to(torch::kFloat)).to(dtype)};
  };
  compare(std::string("swiglu ") + to_string(impl), v, {true}, kernel, aten, tol);
}

inline void check_gelu(torch::Device dev, Impl impl, torch::ScalarType dtype, std::vector<int64_t> shape, bool bias,
                       Tol tol) {
  torch::manual_seed(4);
  Leaves v = {rnd(shape, dev, dtype, 2.0), bias ? rnd({shape.back()}, dev, torch::kFloat, 0.5) : torch::Tensor()};
  auto kernel = [&](const Leaves& l) -> std::vector<torch::Tensor> { return {gelu_tanh(l[0], l[1], impl)}; };
  auto aten = [&](const Leaves& l) -> std::vector<torch::Tensor> {
    auto x = l[0].to(torch::kFloat);
    if (l[1].defined()) x = x + l[1];
    return {at::gelu(x, "tanh").to(dtype)};
  };
  compare(std::string("gelu_tanh ") + to_string(impl), v, {true, true}, kernel, aten, tol);
}

// hidden (N, C), weight (V, C) in dtype; every 5th target ignored when `ignore`.
inline void check_xent(torch::Device dev, Impl impl, torch::ScalarType dtype, int64_t N, int64_t C, int64_t V,
                       int64_t chunk_rows, bool ignore, Tol tol) {
  torch::manual_seed(5);
  auto targets = torch::randint(V, {N}, torch::kLong);
  if (ignore)
    for (int64_t i = 0; i < N; i += 5) targets[i] = -100;
  Leaves v = {rnd({N, C}, dev, dtype), rnd({V, C}, dev, dtype, 0.2), targets.to(dev)};
  auto kernel = [&](const Leaves& l) -> std::vector<torch::Tensor> {
    return {lm_head_cross_entropy(l[0], l[1], l[2], -100, chunk_rows, impl)};
  };
  auto aten = [&](const Leaves& l) -> std::vector<torch::Tensor> {
    return {at::cross_entropy_loss(at::linear(l[0], l[1]).to(torch::kFloat), l[2], {}, at::Reduction::Mean, -100)};
  };
  compare(std::string("lm_head_cross_entropy ") + to_string(impl), v, {true, true, false}, kernel, aten, tol);
}

}  // namespace llmtrain::kernels::testing
