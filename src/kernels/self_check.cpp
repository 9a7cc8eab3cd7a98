// The start-up self-check: each op once, forward and backward, on a small
// input of odd sizes, against its ATen reference; an op that disagrees is
// turned off (it runs ATen from then on) with one log line naming it.
#include <algorithm>
#include <functional>

#include <fmt/format.h>

#include "kernels/common.hpp"     // defines: the ATen references, kernel_dtype
#include "llmtrain/core/log.hpp"  // defines: log::warn

namespace llmtrain::kernels {
namespace {

using Leaves = std::vector<torch::Tensor>;
using Outputs = std::vector<torch::Tensor>;
// Runs the op on the leaves: with an Impl forced, or (nullopt) its ATen reference.
using Run = std::function<Outputs(const Leaves&, std::optional<Impl>)>;

struct Case {
  Leaves values;  // the leaves' values; fresh leaves that require grad are made from them per run
  std::vector<bool> differentiable;
  Run run;
};

// Tolerances: |kernel - aten| <= atol * max|aten| + rtol * |aten|, per element.
// bf16: both sides round once to bf16 (8 significant bits), from sums taken in
// a different order: 2 units in the last place; fp32: float sums in another order.
struct Tol {
  double atol, rtol;
};
Tol tol_for(torch::ScalarType t) { return t == torch::kBFloat16 ? Tol{1.6e-2, 1.6e-2} : Tol{1e-4, 1e-4}; }

// The worst error of a against b in units of the tolerance (<= 1 passes).
double error_units(const torch::Tensor& a, const torch::Tensor& b, Tol tol) {
  if (!a.defined() && !b.defined()) return 0.0;
  if (!a.defined() || !b.defined()) return 1e9;
  if (a.sizes() != b.sizes()) return 1e9;
  const auto af = a.detach().to(torch::kCPU, torch::kDouble), bf = b.detach().to(torch::kCPU, torch::kDouble);
  if (!af.isfinite().all().item<bool>() || !bf.isfinite().all().item<bool>()) return 1e9;
  const double scale = bf.abs().max().item<double>();
  const auto bound = tol.atol * scale + tol.rtol * bf.abs() + 1e-30;
  return ((af - bf).abs() / bound).max().item<double>();
}

// Outputs and the leaves' gradients (under a fixed random weighting of the outputs).
std::pair<Outputs, Outputs> run_with_grads(const Case& c, std::optional<Impl> impl) {
  Leaves leaves;
  std::vector<torch::Tensor> diff;
  for (size_t i = 0; i < c.values.size(); ++i) {
    auto v = c.values[i].defined() ? c.values[i].detach().clone() : torch::Tensor();
    if (v.defined() && c.differentiable[i]) {
      v.requires_grad_(true);
      diff.push_back(v);
    }
    leaves.push_back(v);
  }
  torch::AutoGradMode grad_on(true);
  Outputs outs = c.run(leaves, impl);
  torch::Tensor loss;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1234);
  for (const auto& o : outs) {
    if (!o.defined()) continue;
    auto wgt = at::randn(o.sizes(), gen, torch::kDouble).to(o.device(), torch::kFloat);
    auto term = (o.to(torch::kFloat) * wgt).sum();
    loss = loss.defined() ? loss + term : term;
  }
  Outputs grads = torch::autograd::grad({loss}, diff, {}, /*retain_graph=*/false, /*create_graph=*/false,
                                        /*allow_unused=*/true);
  return {outs, grads};
}

Case make_case(Op op, torch::Device dev, torch::ScalarType dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(47);
  auto rnd = [&](std::vector<int64_t> shape, torch::ScalarType t, double scale = 1.0) {
    return (at::randn(shape, gen, torch::kDouble) * scale).to(dev, t);
  };
  const int64_t B = 3, T = 7, C = 72;
  const auto out_dtype = dtype;
  switch (op) {
    case Op::add_rmsnorm:
      return {{rnd({B, T, C}, dtype), rnd({B, T, C}, dtype), rnd({C}, torch::kFloat, 0.3) + 1.0},
              {true, true, true},
              [=](const Leaves& l, std::optional<Impl> impl) -> Outputs {
                auto r = impl ? add_rmsnorm(l[0], l[1], l[2], 1e-5, out_dtype, impl)
                              : detail::aten_add_norm(l[0], l[1], l[2], {}, 1e-5, out_dtype, false);
                return {r.residual, r.normed};
              }};
    case Op::add_layernorm:
      return {{rnd({B, T, C}, dtype), rnd({B, T, C}, dtype), rnd({C}, torch::kFloat, 0.3) + 1.0,
               rnd({C}, torch::kFloat, 0.1)},
              {true, true, true, true},
              [=](const Leaves& l, std::optional<Impl> impl) -> Outputs {
                auto r = impl ? add_layernorm(l[0], l[1], l[2], l[3], 1e-5, out_dtype, impl)
                              : detail::aten_add_norm(l[0], l[1], l[2], l[3], 1e-5, out_dtype, true);
                return {r.residual, r.normed};
              }};
    case Op::rope_qk_norm: {
      const int64_t H = 3, K = 1, D = 12;
      auto angle = at::arange(T, torch::kDouble).unsqueeze(1) *
                   at::pow(10000.0, -2.0 * at::arange(D / 2, torch::kDouble) / static_cast<double>(D));
      return {{rnd({B, T, (H + 2 * K) * D}, dtype), angle.cos().to(dev, torch::kFloat).unsqueeze(1),
               angle.sin().to(dev, torch::kFloat).unsqueeze(1), rnd({D}, torch::kFloat, 0.3) + 1.0,
               rnd({D}, torch::kFloat, 0.3) + 1.0},
              {true, false, false, true, true},
              [=](const Leaves& l, std::optional<Impl> impl) -> Outputs {
                auto r = impl ? rope_qk_norm(l[0], H, K, l[1], l[2], l[3], l[4], 1e-6, impl)
                              : detail::aten_rope_qk_norm(l[0], H, K, l[1], l[2], l[3], l[4], 1e-6);
                return {r.q, r.k, r.v};
              }};
    }
    case Op::swiglu:
      return {{rnd({B, T, 2 * C}, dtype, 2.0)},
              {true},
              [=](const Leaves& l, std::optional<Impl> impl) -> Outputs {
                return {impl ? swiglu(l[0], impl) : detail::aten_swiglu(l[0])};
              }};
    case Op::gelu_tanh:
      return {{rnd({B, T, C}, dtype, 2.0), rnd({C}, torch::kFloat, 0.5)},
              {true, true},
              [=](const Leaves& l, std::optional<Impl> impl) -> Outputs {
                return {impl ? gelu_tanh(l[0], l[1], impl) : detail::aten_gelu_tanh(l[0], l[1])};
              }};
    case Op::lm_head_cross_entropy: {
      const int64_t N = B * T, V = 67;
      auto targets = at::randint(V, {N}, gen, torch::kLong);
      targets[5] = -1;  // one ignored row
      return {{rnd({N, C}, dtype), rnd({V, C}, dtype, 0.2), targets.to(dev)},
              {true, true, false},
              [=](const Leaves& l, std::optional<Impl> impl) -> Outputs {
                return {impl ? lm_head_cross_entropy(l[0], l[1], l[2], -1, /*chunk_rows=*/8, impl)
                             : detail::aten_lm_head_cross_entropy(l[0], l[1], l[2], -1)};
              }};
    }
  }
  return {};
}

CheckResult check_one(Op op, torch::Device dev, torch::ScalarType dtype, Impl impl) {
  CheckResult r;
  r.op = op;
  r.impl = impl;
  const Case c = make_case(op, dev, dtype);
  const Tol tol = tol_for(dtype);
  try {
    const auto [k_out, k_grad] = run_with_grads(c, impl);
    const auto [a_out, a_grad] = run_with_grads(c, std::nullopt);
    auto look = [&](const Outputs& a, const Outputs& b, const char* what) {
      for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        const double e = error_units(a[i], b[i], tol);
        if (e > r.max_error) r.max_error = e;
        if (e > 1.0 && r.passed) {
          r.passed = false;
          r.detail = fmt::format("{} {} off by {:.3g} x the tolerance", what, i, e);
        }
      }
    };
    look(k_out, a_out, "output");
    look(k_grad, a_grad, "gradient");
  } catch (const c10::Error& e) {  // its what() carries a backtrace: the message alone keeps the line one line
    r.passed = false;
    r.detail = fmt::format("threw: {}", e.what_without_backtrace());
  } catch (const std::exception& e) {
    r.passed = false;
    r.detail = fmt::format("threw: {}", e.what());
  }
  std::replace(r.detail.begin(), r.detail.end(), '\n', ' ');
  return r;
}

}  // namespace

std::vector<CheckResult> self_check(torch::Device device) {
  std::vector<CheckResult> results;
  const Impl impl = device.is_cuda() ? Impl::cuda : Impl::twin;
  if (impl == Impl::cuda && !cuda_built()) return results;  // nothing but ATen to run
  for (const Op op : all_ops()) {
    CheckResult worst;
    worst.op = op;
    worst.impl = impl;
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      CheckResult r = check_one(op, device, dtype, impl);
      if (!r.passed && worst.passed) {
        worst = r;
        worst.detail = fmt::format("{} ({})", r.detail, c10::toString(dtype));
      }
      if (r.max_error > worst.max_error) worst.max_error = r.max_error;
    }
    if (!worst.passed) {
      set_enabled(op, false);
      log::warn("fused kernel llmtrain::{} ({} on {}) disagrees with ATen: {}; it runs ATen from now on", name(op),
                to_string(impl), device.str(), worst.detail);
    }
    results.push_back(worst);
  }
  return results;
}

}  // namespace llmtrain::kernels
