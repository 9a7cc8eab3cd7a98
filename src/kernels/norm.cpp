// Residual add + RMSNorm / LayerNorm + cast: the op, its CPU twin and its ATen
// reference. The CUDA kernels are in norm.cu; the per-element math in
// norm_math.hpp is what both compile.
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <fmt/format.h>
#include <torch/autograd.h>

#include "kernels/common.hpp"        // defines: resolve, dt, stream, maybe_corrupt, aten_add_norm
#include "kernels/norm_math.hpp"     // defines: inv_rms, norm_fwd, norm_bwd
#include "llmtrain/core/error.hpp"   // defines: LLMTRAIN_CHECK

namespace llmtrain::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- CPU twin: rows in fp32, each value rounded once where it is stored ----

// h (N, C) fp32 (already rounded to its dtype) -> y (N, C) fp32, mean, rstd (N).
void twin_fwd(const float* h, const float* w, const float* b, float* y, float* mean_out, float* rstd_out, int64_t N,
              int64_t C, float eps, bool layernorm) {
  at::parallel_for(0, N, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* hr = h + r * C;
      float mean = 0.0f;
      if (layernorm) {
        for (int64_t c = 0; c < C; ++c) mean += hr[c];
        mean /= static_cast<float>(C);
      }
      float sq = 0.0f;
      for (int64_t c = 0; c < C; ++c) sq += (hr[c] - mean) * (hr[c] - mean);
      const float rstd = math::inv_rms(sq / static_cast<float>(C), eps);
      mean_out[r] = mean;
      rstd_out[r] = rstd;
      for (int64_t c = 0; c < C; ++c) y[r * C + c] = math::norm_fwd(hr[c], mean, rstd, w[c], b ? b[c] : 0.0f);
    }
  });
}

// dx (N, C) fp32 = norm backward of dy (+ dh_out); dw, db (C) fp32.
void twin_bwd(const float* h, const float* dy, const float* dh_out, const float* w, const float* mean_in,
              const float* rstd_in, float* dx, float* dw, float* db, int64_t N, int64_t C, bool layernorm) {
  at::parallel_for(0, N, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float mean = mean_in[r], rstd = rstd_in[r];
      float sg = 0.0f, sgx = 0.0f;
      for (int64_t c = 0; c < C; ++c) {
        const float g = dy[r * C + c] * w[c], xhat = (h[r * C + c] - mean) * rstd;
        sg += g;
        sgx += g * xhat;
      }
      const float mg = layernorm ? sg / static_cast<float>(C) : 0.0f, mgx = sgx / static_cast<float>(C);
      for (int64_t c = 0; c < C; ++c) {
        const float xhat = (h[r * C + c] - mean) * rstd;
        float d = math::norm_bwd(dy[r * C + c] * w[c], xhat, rstd, mg, mgx);
        if (dh_out) d += dh_out[r * C + c];
        dx[r * C + c] = d;
      }
    }
  });
  // Weight and bias gradients: columns in parallel, rows in order (deterministic).
  at::parallel_for(0, C, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      float sw = 0.0f, sb = 0.0f;
      for (int64_t r = 0; r < N; ++r) {
        sw += dy[r * C + c] * (h[r * C + c] - mean_in[r]) * rstd_in[r];
        sb += dy[r * C + c];
      }
      dw[c] = sw;
      if (db) db[c] = sb;
    }
  });
}

torch::Tensor f32(const torch::Tensor& t) { return t.to(torch::kFloat).contiguous(); }
const float* ptr_or_null(const torch::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

struct AddNormFn : public torch::autograd::Function<AddNormFn> {
  // Returns {h, y} with delta, {y} without (h would be x itself).
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const std::optional<torch::Tensor>& delta_o,
                               const torch::Tensor& weight, const std::optional<torch::Tensor>& bias_o, double eps,
                               bool layernorm, int64_t out_dtype_i, int64_t impl_i) {
    const torch::Tensor delta = detail::val(delta_o), bias = detail::val(bias_o);
    const auto out_dtype = static_cast<torch::ScalarType>(out_dtype_i);
    const auto impl = static_cast<Impl>(impl_i);
    const Op op = layernorm ? Op::add_layernorm : Op::add_rmsnorm;
    const int64_t C = x.size(-1), N = C > 0 ? x.numel() / C : 0;
    const bool has_delta = delta.defined();
    const auto hdt = has_delta ? at::promote_types(x.scalar_type(), delta.scalar_type()) : x.scalar_type();
    const auto xc = x.to(hdt).contiguous();
    const auto dc = has_delta ? delta.contiguous() : torch::Tensor();
    const auto w = f32(weight);
    const auto b = bias.defined() ? f32(bias) : torch::Tensor();
    const auto fopt = x.options().dtype(torch::kFloat);
    auto mean = torch::empty({N}, fopt), rstd = torch::empty({N}, fopt);
    torch::Tensor h, y;
    if (impl == Impl::cuda) {
      h = has_delta ? torch::empty_like(xc) : xc;
      y = torch::empty(x.sizes(), x.options().dtype(out_dtype));
      cuda::norm_fwd(detail::dt(hdt), has_delta ? detail::dt(dc.scalar_type()) : cuda::DT::f32, detail::dt(out_dtype),
                     xc.data_ptr(), has_delta ? dc.data_ptr() : nullptr, w.data_ptr<float>(), ptr_or_null(b),
                     has_delta ? h.data_ptr() : nullptr, y.data_ptr(), layernorm ? mean.data_ptr<float>() : nullptr,
                     rstd.data_ptr<float>(), N, C, static_cast<float>(eps), layernorm, detail::stream());
      if (!layernorm) mean.zero_();
    } else {
      auto hf = f32(xc);
      if (has_delta) {
        hf = hf.clone();
        const auto df = f32(dc);
        float* hp = hf.data_ptr<float>();
        const float* dp = df.data_ptr<float>();
        at::parallel_for(0, hf.numel(), 4096, [&](int64_t e0, int64_t e1) {
          for (int64_t e = e0; e < e1; ++e) hp[e] = detail::round_to(hdt, hp[e] + dp[e]);
        });
      }
      auto yf = torch::empty({N, C}, fopt);
      twin_fwd(hf.data_ptr<float>(), w.data_ptr<float>(), ptr_or_null(b), yf.data_ptr<float>(),
               mean.data_ptr<float>(), rstd.data_ptr<float>(), N, C, static_cast<float>(eps), layernorm);
      h = has_delta ? hf.to(hdt).view(x.sizes()) : xc;
      y = yf.to(out_dtype).view(x.sizes());
      detail::maybe_corrupt(op, y);
    }
    ctx->save_for_backward({h, weight, bias, mean, rstd});
    ctx->saved_data["layernorm"] = layernorm;
    ctx->saved_data["impl"] = impl_i;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["out_dtype"] = out_dtype_i;
    ctx->saved_data["delta_dtype"] = has_delta ? static_cast<int64_t>(delta.scalar_type()) : int64_t{-1};
    if (has_delta) return {h, y};
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const bool layernorm = ctx->saved_data["layernorm"].toBool();
    RECORD_FUNCTION(layernorm ? "llmtrain::add_layernorm_backward" : "llmtrain::add_rmsnorm_backward",
                    std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const auto &h = saved[0], &weight = saved[1], &bias = saved[2], &mean = saved[3], &rstd = saved[4];
    const auto impl = static_cast<Impl>(ctx->saved_data["impl"].toInt());
    const auto x_dtype = static_cast<torch::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const int64_t delta_i = ctx->saved_data["delta_dtype"].toInt();
    const bool has_delta = delta_i >= 0;
    torch::Tensor dh_out = has_delta ? grads[0] : torch::Tensor();
    torch::Tensor dy = has_delta ? grads[1] : grads[0];
    const int64_t C = h.size(-1), N = C > 0 ? h.numel() / C : 0;
    const auto hdt = h.scalar_type();
    const auto out_dtype = static_cast<torch::ScalarType>(ctx->saved_data["out_dtype"].toInt());
    dy = dy.defined() ? dy.to(out_dtype).contiguous() : torch::zeros(h.sizes(), h.options().dtype(out_dtype));
    if (dh_out.defined()) dh_out = dh_out.to(hdt).contiguous();
    const auto w = f32(weight);
    const auto fopt = h.options().dtype(torch::kFloat);
    torch::Tensor dx, ddelta, dw, db;
    if (impl == Impl::cuda) {
      const auto delta_dt = has_delta ? static_cast<torch::ScalarType>(delta_i) : hdt;
      dx = torch::empty(h.sizes(), h.options());
      const bool own_ddelta = has_delta && delta_dt != hdt;
      if (own_ddelta) ddelta = torch::empty(h.sizes(), h.options().dtype(delta_dt));
      const int64_t G = cuda::norm_bwd_blocks(N);
      auto dw_part = torch::empty({G, C}, fopt);
      auto db_part = bias.defined() ? torch::empty({G, C}, fopt) : torch::Tensor();
      cuda::norm_bwd(detail::dt(hdt), detail::dt(delta_dt), detail::dt(dy.scalar_type()), h.data_ptr(), dy.data_ptr(),
                     dh_out.defined() ? dh_out.data_ptr() : nullptr, w.data_ptr<float>(),
                     layernorm ? mean.data_ptr<float>() : nullptr, rstd.data_ptr<float>(), dx.data_ptr(),
                     own_ddelta ? ddelta.data_ptr() : nullptr, dw_part.data_ptr<float>(),
                     db_part.defined() ? db_part.data_ptr<float>() : nullptr, N, C,
                     layernorm, detail::stream());
      if (has_delta && !own_ddelta) ddelta = dx;
      dw = dw_part.sum(0);
      if (bias.defined()) db = db_part.sum(0);
    } else {
      const auto hf = f32(h), dyf = f32(dy);
      const auto dhf = dh_out.defined() ? f32(dh_out) : torch::Tensor();
      auto dxf = torch::empty({N, C}, fopt);
      dw = torch::empty({C}, fopt);
      if (bias.defined()) db = torch::empty({C}, fopt);
      twin_bwd(hf.data_ptr<float>(), dyf.data_ptr<float>(), ptr_or_null(dhf), w.data_ptr<float>(),
               mean.data_ptr<float>(), rstd.data_ptr<float>(), dxf.data_ptr<float>(), dw.data_ptr<float>(),
               db.defined() ? db.data_ptr<float>() : nullptr, N, C, layernorm);
      dxf = dxf.view(h.sizes());
      dx = dxf.to(hdt);
      if (has_delta) ddelta = dxf.to(static_cast<torch::ScalarType>(delta_i));
    }
    // x was read as hdt; its gradient goes back in x's own dtype.
    if (dx.scalar_type() != x_dtype) dx = dx.to(x_dtype);
    return {dx,
            ddelta,
            dw.to(weight.scalar_type()),
            bias.defined() ? db.to(bias.scalar_type()) : torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

NormOut add_norm(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& weight,
                 const torch::Tensor& bias, double eps, torch::ScalarType out_dtype, std::optional<Impl> forced,
                 bool layernorm) {
  const Op op = layernorm ? Op::add_layernorm : Op::add_rmsnorm;
  LLMTRAIN_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1),
                 "llmtrain::{}: x (..., C) and weight (C) expected, got {} and {}", name(op), c10::str(x.sizes()),
                 c10::str(weight.sizes()));
  LLMTRAIN_CHECK(!delta.defined() || delta.sizes() == x.sizes(), "llmtrain::{}: delta {} must match x {}", name(op),
                 c10::str(delta.sizes()), c10::str(x.sizes()));
  LLMTRAIN_CHECK(!bias.defined() || bias.sizes() == weight.sizes(), "llmtrain::{}: bias {} must match weight {}",
                 name(op), c10::str(bias.sizes()), c10::str(weight.sizes()));
  const bool dtypes_ok = (!delta.defined() || detail::kernel_dtype(delta.scalar_type())) &&
                         detail::kernel_dtype(out_dtype) &&
                         (!delta.defined() || detail::kernel_dtype(at::promote_types(x.scalar_type(),
                                                                                     delta.scalar_type())));
  const bool shape_ok = dtypes_ok && x.size(-1) <= cuda::kNormMaxCols && (!delta.defined() || delta.device() == x.device());
  const Impl impl = detail::resolve(op, x, shape_ok, forced, "C above 8192 or a dtype other than fp32/bf16");
  if (impl == Impl::aten) return detail::aten_add_norm(x, delta, weight, bias, eps, out_dtype, layernorm);
  RECORD_FUNCTION(layernorm ? "llmtrain::add_layernorm" : "llmtrain::add_rmsnorm", std::vector<c10::IValue>());
  auto outs = AddNormFn::apply(x, detail::opt(delta), weight, detail::opt(bias), eps, layernorm, static_cast<int64_t>(out_dtype),
                               static_cast<int64_t>(impl));
  if (delta.defined()) return {outs[0], outs[1]};
  return {torch::Tensor(), outs[0]};
}

}  // namespace

NormOut add_rmsnorm(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& weight, double eps,
                    torch::ScalarType out_dtype, std::optional<Impl> impl) {
  return add_norm(x, delta, weight, torch::Tensor(), eps, out_dtype, impl, /*layernorm=*/false);
}

NormOut add_layernorm(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& weight,
                      const torch::Tensor& bias, double eps, torch::ScalarType out_dtype, std::optional<Impl> impl) {
  return add_norm(x, delta, weight, bias, eps, out_dtype, impl, /*layernorm=*/true);
}

namespace detail {

NormOut aten_add_norm(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& weight,
                      const torch::Tensor& bias, double eps, torch::ScalarType out_dtype, bool layernorm) {
  NormOut out;
  torch::Tensor h = x;
  if (delta.defined()) h = out.residual = x + delta;
  const auto hf = h.to(torch::kFloat);
  const int64_t C = x.size(-1);
  auto y = layernorm ? at::layer_norm(hf, {C}, weight.to(torch::kFloat),
                                      bias.defined() ? bias.to(torch::kFloat) : torch::Tensor(), eps)
                     : at::rms_norm(hf, {C}, weight.to(torch::kFloat), eps);
  out.normed = y.to(out_dtype);
  return out;
}

}  // namespace detail
}  // namespace llmtrain::kernels
