// RoPE + QK-norm from the qkv GEMM's output into attention's layout ((B, T, h, D)
// storage, returned as (B, h, T, D) views: what SDPA's kernels read): the op,
// its CPU twin and its ATen reference. The CUDA kernels are in rope.cu; the
// per-element math (rope_math.hpp, norm_math.hpp) is what both compile.
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <fmt/format.h>
#include <torch/autograd.h>

#include "kernels/common.hpp"       // defines: resolve, dt, stream, maybe_corrupt, aten_rope_qk_norm
#include "kernels/norm_math.hpp"    // defines: inv_rms, norm_fwd, norm_bwd
#include "kernels/rope_math.hpp"    // defines: rope_fwd, rope_bwd
#include "llmtrain/core/error.hpp"  // defines: LLMTRAIN_CHECK

namespace llmtrain::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Geom {
  int64_t B, T, H, K, D;
  int64_t NH() const { return H + 2 * K; }
  int64_t items() const { return B * T * NH(); }
};


// The row of the (B, T, h, D) output a (token, head) item goes to, and which
// tensor: 0 q, 1 k, 2 v.
struct Dest {
  int which;
  int64_t row;
};
Dest dest(const Geom& g, int64_t it) {
  const int64_t head = it % g.NH(), tok = it / g.NH();
  if (head < g.H) return {0, tok * g.H + head};
  if (head < g.H + g.K) return {1, tok * g.K + head - g.H};
  return {2, tok * g.K + head - g.H - g.K};
}

// ---- CPU twin (fp32 buffers) ----

void twin_fwd(const Geom& g, const float* qkv, const float* cos, const float* sin, int64_t cbs, const float* qw,
              const float* kw, float* out[3], float eps) {
  const int64_t half = g.D / 2;
  at::parallel_for(0, g.items(), 64, [&](int64_t i0, int64_t i1) {
    for (int64_t it = i0; it < i1; ++it) {
      const Dest d = dest(g, it);
      const int64_t tok = it / g.NH(), t = tok % g.T, b = tok / g.T;
      const float* src = qkv + it * g.D;
      float* dst = out[d.which] + d.row * g.D;
      const float* nw = d.which == 0 ? qw : d.which == 1 ? kw : nullptr;
      const bool rotate = cos && d.which < 2;
      float rstd = 1.0f;
      if (nw) {
        float sq = 0.0f;
        for (int64_t i = 0; i < g.D; ++i) sq += src[i] * src[i];
        rstd = math::inv_rms(sq / static_cast<float>(g.D), eps);
      }
      for (int64_t i = 0; i < half; ++i) {
        float a = src[i], c = src[i + half];
        if (nw) {
          a = math::norm_fwd(a, 0.0f, rstd, nw[i], 0.0f);
          c = math::norm_fwd(c, 0.0f, rstd, nw[i + half], 0.0f);
        }
        float y1 = a, y2 = c;
        if (rotate) math::rope_fwd(a, c, cos[b * cbs + t * half + i], sin[b * cbs + t * half + i], y1, y2);
        dst[i] = y1;
        dst[i + half] = y2;
      }
    }
  });
}

// dqkv (items, D); wprod (items, D): d(normed) * xhat per element, summed by the
// caller over the q and the k rows into the norm weights' gradients.
void twin_bwd(const Geom& g, const float* qkv, const float* dout[3], const float* cos, const float* sin, int64_t cbs,
              const float* qw, const float* kw, float* dqkv, float* wprod, float eps) {
  const int64_t half = g.D / 2;
  at::parallel_for(0, g.items(), 64, [&](int64_t i0, int64_t i1) {
    std::vector<float> d(static_cast<size_t>(g.D));
    for (int64_t it = i0; it < i1; ++it) {
      const Dest dd = dest(g, it);
      const int64_t tok = it / g.NH(), t = tok % g.T, b = tok / g.T;
      const float* src = qkv ? qkv + it * g.D : nullptr;  // null without QK-norm
      const float* dy = dout[dd.which] ? dout[dd.which] + dd.row * g.D : nullptr;
      const float* nw = dd.which == 0 ? qw : dd.which == 1 ? kw : nullptr;
      const bool rotate = cos && dd.which < 2;
      for (int64_t i = 0; i < half; ++i) {
        float d1 = dy ? dy[i] : 0.0f, d2 = dy ? dy[i + half] : 0.0f;
        if (rotate && dy)
          math::rope_bwd(dy[i], dy[i + half], cos[b * cbs + t * half + i], sin[b * cbs + t * half + i], d1, d2);
        d[static_cast<size_t>(i)] = d1;
        d[static_cast<size_t>(i + half)] = d2;
      }
      float* out = dqkv + it * g.D;
      if (!nw) {
        for (int64_t i = 0; i < g.D; ++i) out[i] = d[static_cast<size_t>(i)];
        continue;
      }
      float sq = 0.0f;
      for (int64_t i = 0; i < g.D; ++i) sq += src[i] * src[i];
      const float rstd = math::inv_rms(sq / static_cast<float>(g.D), eps);
      float sgx = 0.0f;
      for (int64_t i = 0; i < g.D; ++i) {
        const float xhat = src[i] * rstd, di = d[static_cast<size_t>(i)];
        sgx += di * nw[i] * xhat;
        wprod[it * g.D + i] = di * xhat;
      }
      const float mgx = sgx / static_cast<float>(g.D);
      for (int64_t i = 0; i < g.D; ++i)
        out[i] = math::norm_bwd(d[static_cast<size_t>(i)] * nw[i], src[i] * rstd, rstd, 0.0f, mgx);
    }
  });
}

struct RopeFn : public torch::autograd::Function<RopeFn> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& qkv, const std::optional<torch::Tensor>& cos_o,
                               const std::optional<torch::Tensor>& sin_o, const std::optional<torch::Tensor>& q_norm_o,
                               const std::optional<torch::Tensor>& k_norm_o, int64_t H, int64_t K, double eps,
                               int64_t impl_i) {
    const torch::Tensor cos = detail::val(cos_o), sin = detail::val(sin_o), q_norm_w = detail::val(q_norm_o),
                        k_norm_w = detail::val(k_norm_o);
    const auto impl = static_cast<Impl>(impl_i);
    const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / (H + 2 * K);
    const Geom g{B, T, H, K, D};
    const auto x = qkv.contiguous();
    const auto c = cos.defined() ? f32(cos) : torch::Tensor(), s = sin.defined() ? f32(sin) : torch::Tensor();
    const int64_t cbs = c.defined() && c.numel() != T * D / 2 ? T * D / 2 : 0;
    const auto qw = q_norm_w.defined() ? f32(q_norm_w) : torch::Tensor();
    const auto kw = k_norm_w.defined() ? f32(k_norm_w) : torch::Tensor();
    torch::Tensor q, k, v;
    // (B, T, h, D) storage, handed out as (B, h, T, D) views (the transposes below).
    if (impl == Impl::cuda) {
      q = torch::empty({B, T, H, D}, x.options());
      k = torch::empty({B, T, K, D}, x.options());
      v = torch::empty({B, T, K, D}, x.options());
      cuda::rope_fwd(detail::dt(x.scalar_type()), x.data_ptr(), ptr_or_null(c), ptr_or_null(s), cbs, ptr_or_null(qw),
                     ptr_or_null(kw), q.data_ptr(), k.data_ptr(), v.data_ptr(), B, T, H, K, D,
                     static_cast<float>(eps), detail::stream());
    } else {
      const auto fopt = x.options().dtype(torch::kFloat);
      auto qf = torch::empty({B, T, H, D}, fopt), kf = torch::empty({B, T, K, D}, fopt),
           vf = torch::empty({B, T, K, D}, fopt);
      float* outs[3] = {qf.data_ptr<float>(), kf.data_ptr<float>(), vf.data_ptr<float>()};
      const auto xf = f32(x);
      twin_fwd(g, xf.data_ptr<float>(), ptr_or_null(c), ptr_or_null(s), cbs, ptr_or_null(qw), ptr_or_null(kw), outs,
               static_cast<float>(eps));
      q = qf.to(x.scalar_type());
      k = kf.to(x.scalar_type());
      v = vf.to(x.scalar_type());
      detail::maybe_corrupt(Op::rope_qk_norm, q);
    }
    // Backward reads qkv only to recompute QK-norm's rstd: without QK-norm the
    // rotation is linear and the GEMM output need not stay alive (q, k, v are
    // what attention saves; keeping qkv too would double them).
    const bool norm = q_norm_w.defined() || k_norm_w.defined();
    ctx->save_for_backward({norm ? x : torch::Tensor(), c, s, q_norm_w, k_norm_w});
    ctx->saved_data["B"] = B;
    ctx->saved_data["T"] = T;
    ctx->saved_data["D"] = D;
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["H"] = H;
    ctx->saved_data["K"] = K;
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["impl"] = impl_i;
    return {q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("llmtrain::rope_qk_norm_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &c = saved[1], &s = saved[2], &q_norm_w = saved[3], &k_norm_w = saved[4];
    const int64_t H = ctx->saved_data["H"].toInt(), K = ctx->saved_data["K"].toInt();
    const double eps = ctx->saved_data["eps"].toDouble();
    const auto impl = static_cast<Impl>(ctx->saved_data["impl"].toInt());
    const int64_t B = ctx->saved_data["B"].toInt(), T = ctx->saved_data["T"].toInt(), D = ctx->saved_data["D"].toInt();
    const auto xdt = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const Geom g{B, T, H, K, D};
    const auto xopt = grads[0].defined() ? grads[0].options().dtype(xdt)
                      : grads[1].defined() ? grads[1].options().dtype(xdt) : grads[2].options().dtype(xdt);
    const int64_t cbs = c.defined() && c.numel() != T * D / 2 ? T * D / 2 : 0;
    const auto qw = q_norm_w.defined() ? f32(q_norm_w) : torch::Tensor();
    const auto kw = k_norm_w.defined() ? f32(k_norm_w) : torch::Tensor();
    const bool norm = qw.defined() || kw.defined();
    torch::Tensor dqkv, dqw, dkw;
    const auto fopt = xopt.dtype(torch::kFloat);
    if (impl == Impl::cuda) {
      torch::Tensor d[3];
      for (int i = 0; i < 3; ++i)
        if (grads[static_cast<size_t>(i)].defined())  // (B, T, h, D) storage: a view where attention's came so
          d[i] = grads[static_cast<size_t>(i)].transpose(1, 2).to(xdt).contiguous();
      dqkv = torch::empty({B, T, g.NH() * D}, xopt);
      torch::Tensor part;
      if (norm) part = torch::empty({cuda::rope_bwd_warps(g.items()), 2, D}, fopt);
      cuda::rope_bwd(detail::dt(xdt), x.defined() ? x.data_ptr() : nullptr, d[0].defined() ? d[0].data_ptr() : nullptr,
                     d[1].defined() ? d[1].data_ptr() : nullptr, d[2].defined() ? d[2].data_ptr() : nullptr,
                     ptr_or_null(c), ptr_or_null(s), cbs, ptr_or_null(qw), ptr_or_null(kw), dqkv.data_ptr(),
                     part.defined() ? part.data_ptr<float>() : nullptr, B, T, H, K, D, static_cast<float>(eps),
                     detail::stream());
      if (qw.defined()) dqw = part.select(1, 0).sum(0);
      if (kw.defined()) dkw = part.select(1, 1).sum(0);
    } else {
      torch::Tensor d[3];
      const float* dp[3] = {nullptr, nullptr, nullptr};
      for (int i = 0; i < 3; ++i)
        if (grads[static_cast<size_t>(i)].defined()) {
          d[i] = f32(grads[static_cast<size_t>(i)].transpose(1, 2));  // (B, T, h, D)
          dp[i] = d[i].data_ptr<float>();
        }
      // Without QK-norm the twin reads no qkv row (qkv was not saved).
      const auto xf = x.defined() ? f32(x) : torch::Tensor();
      auto df = torch::empty({B, T, g.NH(), D}, fopt);
      auto wprod = norm ? torch::zeros({B, T, g.NH(), D}, fopt) : torch::Tensor();
      twin_bwd(g, ptr_or_null(xf), dp, ptr_or_null(c), ptr_or_null(s), cbs, ptr_or_null(qw), ptr_or_null(kw),
               df.data_ptr<float>(), norm ? wprod.data_ptr<float>() : nullptr, static_cast<float>(eps));
      if (qw.defined()) dqw = wprod.narrow(2, 0, H).sum({0, 1, 2});
      if (kw.defined()) dkw = wprod.narrow(2, H, K).sum({0, 1, 2});
      dqkv = df.view({B, T, g.NH() * D}).to(xdt);
    }
    return {dqkv,
            torch::Tensor(),
            torch::Tensor(),
            q_norm_w.defined() ? dqw.to(q_norm_w.scalar_type()) : torch::Tensor(),
            k_norm_w.defined() ? dkw.to(k_norm_w.scalar_type()) : torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

Qkv rope_qk_norm(const torch::Tensor& qkv, int64_t n_head, int64_t n_kv_head, const torch::Tensor& cos,
                 const torch::Tensor& sin, const torch::Tensor& q_norm_w, const torch::Tensor& k_norm_w, double eps,
                 std::optional<Impl> forced) {
  const int64_t H = n_head, K = n_kv_head, NH = H + 2 * K;
  LLMTRAIN_CHECK(qkv.dim() == 3 && H > 0 && K > 0 && qkv.size(2) % NH == 0,
                 "llmtrain::rope_qk_norm: qkv (B, T, (H + 2K) * D) expected with H {} and K {}, got {}", H, K,
                 c10::str(qkv.sizes()));
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / NH;
  LLMTRAIN_CHECK(cos.defined() == sin.defined(), "llmtrain::rope_qk_norm: cos and sin come together");
  if (cos.defined())
    LLMTRAIN_CHECK(D % 2 == 0 && cos.sizes() == sin.sizes() && (cos.numel() == T * D / 2 || cos.numel() == B * T * D / 2),
                   "llmtrain::rope_qk_norm: RoPE tables of T * D/2 = {} or B * T * D/2 values expected (T {}, D {}), "
                   "got cos {} and sin {}",
                   T * D / 2, T, D, c10::str(cos.sizes()), c10::str(sin.sizes()));
  for (const auto* w : {&q_norm_w, &k_norm_w})
    LLMTRAIN_CHECK(!w->defined() || (w->dim() == 1 && w->size(0) == D),
                   "llmtrain::rope_qk_norm: QK-norm weight ({}) expected, got {}", D, c10::str(w->sizes()));
  const bool shape_ok = D % 2 == 0 && D <= cuda::kRopeMaxHeadDim && (!cos.defined() || cos.device() == qkv.device());
  const Impl impl = detail::resolve(Op::rope_qk_norm, qkv, shape_ok, forced, "head_dim odd or above 256");
  if (impl == Impl::aten) return detail::aten_rope_qk_norm(qkv, H, K, cos, sin, q_norm_w, k_norm_w, eps);
  RECORD_FUNCTION("llmtrain::rope_qk_norm", std::vector<c10::IValue>());
  auto outs = RopeFn::apply(qkv, detail::opt(cos), detail::opt(sin), detail::opt(q_norm_w), detail::opt(k_norm_w), H, K, eps, static_cast<int64_t>(impl));
  return {outs[0], outs[1], outs[2]};
}

namespace detail {

Qkv aten_rope_qk_norm(const torch::Tensor& qkv, int64_t H, int64_t K, const torch::Tensor& cos,
                      const torch::Tensor& sin, const torch::Tensor& q_norm_w, const torch::Tensor& k_norm_w,
                      double eps) {
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / (H + 2 * K), half = D / 2;
  auto q = qkv.narrow(-1, 0, H * D).view({B, T, H, D}).to(torch::kFloat);
  auto k = qkv.narrow(-1, H * D, K * D).view({B, T, K, D}).to(torch::kFloat);
  auto v = qkv.narrow(-1, (H + K) * D, K * D).view({B, T, K, D});
  if (q_norm_w.defined()) q = at::rms_norm(q, {D}, q_norm_w.to(torch::kFloat), eps);
  if (k_norm_w.defined()) k = at::rms_norm(k, {D}, k_norm_w.to(torch::kFloat), eps);
  if (cos.defined()) {
    // (T, 1, half) or (B, T, 1, half): broadcast over heads.
    const bool per_token = cos.numel() != T * half;
    const auto shape = per_token ? std::vector<int64_t>{B, T, 1, half} : std::vector<int64_t>{T, 1, half};
    const auto c = cos.to(torch::kFloat).reshape(shape), s = sin.to(torch::kFloat).reshape(shape);
    auto rope = [&](const torch::Tensor& x) {
      auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
      return torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
    };
    q = rope(q);
    k = rope(k);
  }
  // The kernel's layout: (B, T, h, D) storage, (B, h, T, D) views; v copied
  // out of qkv (a view would keep all of qkv alive for attention's backward).
  const auto dtype = qkv.scalar_type();
  return {q.to(dtype).contiguous().transpose(1, 2), k.to(dtype).contiguous().transpose(1, 2),
          v.contiguous().transpose(1, 2)};
}

}  // namespace detail
}  // namespace llmtrain::kernels
