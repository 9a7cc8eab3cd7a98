// SwiGLU and GELU-tanh (+ bias): the ops, their CPU twins and their ATen
// references. The CUDA kernels are in act.cu; act_math.hpp is what both compile.
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <fmt/format.h>
#include <torch/autograd.h>

#include "kernels/act_math.hpp"     // defines: swiglu_fwd/bwd, gelu_tanh_fwd/bwd
#include "kernels/common.hpp"       // defines: resolve, dt, stream, maybe_corrupt, aten_swiglu, aten_gelu_tanh
#include "llmtrain/core/error.hpp"  // defines: LLMTRAIN_CHECK

namespace llmtrain::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;


std::vector<int64_t> with_last(const torch::Tensor& t, int64_t last) {
  auto s = t.sizes().vec();
  s.back() = last;
  return s;
}

// The SwiGLU twin over rows of h (rows, 2F) in T (float or BFloat16): each
// element read as fp32, computed in fp32 (act_math.hpp) and rounded once to T
// where it is written, as the CUDA kernel does; no fp32 copy of h, dy or dh
// (those made the CPU's backward peak 4 x (rows, 2F) fp32 above the GPU's).
template <typename T>
void twin_swiglu_fwd(const T* hp, T* yp, int64_t rows, int64_t F) {
  at::parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < F; ++c)
        yp[r * F + c] = static_cast<T>(
            math::swiglu_fwd(static_cast<float>(hp[r * 2 * F + c]), static_cast<float>(hp[r * 2 * F + F + c])));
  });
}
template <typename T>
void twin_swiglu_bwd(const T* hp, const T* dp, T* op, int64_t rows, int64_t F) {
  at::parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < F; ++c) {
        float dg = 0.0f, du = 0.0f;
        math::swiglu_bwd(static_cast<float>(hp[r * 2 * F + c]), static_cast<float>(hp[r * 2 * F + F + c]),
                         static_cast<float>(dp[r * F + c]), dg, du);
        op[r * 2 * F + c] = static_cast<T>(dg);
        op[r * 2 * F + F + c] = static_cast<T>(du);
      }
  });
}

struct SwigluFn : public torch::autograd::Function<SwigluFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& h_in, int64_t impl_i) {
    const auto h = h_in.contiguous();
    const int64_t F = h.size(-1) / 2, rows = F > 0 ? h.numel() / (2 * F) : 0;
    torch::Tensor y;
    if (static_cast<Impl>(impl_i) == Impl::cuda) {
      y = torch::empty(with_last(h, F), h.options());
      cuda::swiglu_fwd(detail::dt(h.scalar_type()), h.data_ptr(), y.data_ptr(), rows, F, detail::stream());
    } else {
      y = torch::empty(with_last(h, F), h.options());
      if (h.scalar_type() == torch::kFloat)
        twin_swiglu_fwd(h.data_ptr<float>(), y.data_ptr<float>(), rows, F);
      else
        twin_swiglu_fwd(h.data_ptr<c10::BFloat16>(), y.data_ptr<c10::BFloat16>(), rows, F);
      detail::maybe_corrupt(Op::swiglu, y);
    }
    ctx->save_for_backward({h});  // the GEMM output only: silu(gate) is recomputed in backward
    ctx->saved_data["impl"] = impl_i;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("llmtrain::swiglu_backward", std::vector<c10::IValue>());
    const auto h = ctx->get_saved_variables()[0];
    const int64_t F = h.size(-1) / 2, rows = F > 0 ? h.numel() / (2 * F) : 0;
    torch::Tensor dh;
    if (static_cast<Impl>(ctx->saved_data["impl"].toInt()) == Impl::cuda) {
      const auto dy = grads[0].to(h.scalar_type()).contiguous();
      dh = torch::empty_like(h);
      cuda::swiglu_bwd(detail::dt(h.scalar_type()), h.data_ptr(), dy.data_ptr(), dh.data_ptr(), rows, F,
                       detail::stream());
    } else {
      const auto dy = grads[0].to(h.scalar_type()).contiguous();
      dh = torch::empty_like(h);
      if (h.scalar_type() == torch::kFloat)
        twin_swiglu_bwd(h.data_ptr<float>(), dy.data_ptr<float>(), dh.data_ptr<float>(), rows, F);
      else
        twin_swiglu_bwd(h.data_ptr<c10::BFloat16>(), dy.data_ptr<c10::BFloat16>(), dh.data_ptr<c10::BFloat16>(),
                        rows, F);
    }
    return {dh, torch::Tensor()};
  }
};

struct GeluFn : public torch::autograd::Function<GeluFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& h_in,
                               const std::optional<torch::Tensor>& bias_o, int64_t impl_i) {
    const torch::Tensor bias = detail::val(bias_o);
    const auto h = h_in.contiguous();
    const int64_t F = h.size(-1), rows = F > 0 ? h.numel() / F : 0;
    const auto b = bias.defined() ? f32(bias) : torch::Tensor();
    torch::Tensor y;
    if (static_cast<Impl>(impl_i) == Impl::cuda) {
      y = torch::empty_like(h);
      cuda::gelu_fwd(detail::dt(h.scalar_type()), h.data_ptr(), ptr_or_null(b), y.data_ptr(), rows, F,
                     detail::stream());
    } else {
      const auto hf = f32(h);
      auto yf = torch::empty_like(hf);
      const float *hp = hf.data_ptr<float>(), *bp = ptr_or_null(b);
      float* yp = yf.data_ptr<float>();
      at::parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = 0; c < F; ++c) yp[r * F + c] = math::gelu_tanh_fwd(hp[r * F + c] + (bp ? bp[c] : 0.0f));
      });
      y = yf.to(h.scalar_type());
      detail::maybe_corrupt(Op::gelu_tanh, y);
    }
    ctx->save_for_backward({h, bias});
    ctx->saved_data["impl"] = impl_i;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("llmtrain::gelu_tanh_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const auto &h = saved[0], &bias = saved[1];
    const int64_t F = h.size(-1), rows = F > 0 ? h.numel() / F : 0;
    const auto b = bias.defined() ? f32(bias) : torch::Tensor();
    torch::Tensor dpre;
    if (static_cast<Impl>(ctx->saved_data["impl"].toInt()) == Impl::cuda) {
      const auto dy = grads[0].to(h.scalar_type()).contiguous();
      dpre = torch::empty_like(h);
      cuda::gelu_bwd(detail::dt(h.scalar_type()), h.data_ptr(), ptr_or_null(b), dy.data_ptr(), dpre.data_ptr(), rows,
                     F, detail::stream());
    } else {
      const auto hf = f32(h), dyf = f32(grads[0]);
      auto df = torch::empty_like(hf);
      const float *hp = hf.data_ptr<float>(), *dp = dyf.data_ptr<float>(), *bp = ptr_or_null(b);
      float* op = df.data_ptr<float>();
      at::parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = 0; c < F; ++c)
            op[r * F + c] = math::gelu_tanh_bwd(hp[r * F + c] + (bp ? bp[c] : 0.0f), dp[r * F + c]);
      });
      dpre = df.to(h.scalar_type());
    }
    // The bias gradient sums the pre-activation gradient over the rows, in fp32.
    torch::Tensor db;
    if (bias.defined()) db = dpre.reshape({-1, F}).sum(0, false, torch::kFloat).to(bias.scalar_type());
    return {dpre, db, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor swiglu(const torch::Tensor& h, std::optional<Impl> forced) {
  LLMTRAIN_CHECK(h.dim() >= 1 && h.size(-1) % 2 == 0, "llmtrain::swiglu: h (..., 2F) gate | up expected, got {}",
                 c10::str(h.sizes()));
  const Impl impl = detail::resolve(Op::swiglu, h, true, forced, "");
  if (impl == Impl::aten) return detail::aten_swiglu(h);
  RECORD_FUNCTION("llmtrain::swiglu", std::vector<c10::IValue>());
  return SwigluFn::apply(h, static_cast<int64_t>(impl));
}

torch::Tensor gelu_tanh(const torch::Tensor& h, const torch::Tensor& bias, std::optional<Impl> forced) {
  LLMTRAIN_CHECK(h.dim() >= 1 && (!bias.defined() || (bias.dim() == 1 && bias.size(0) == h.size(-1))),
                 "llmtrain::gelu_tanh: h (..., F) and bias (F) expected, got {} and {}", c10::str(h.sizes()),
                 bias.defined() ? c10::str(bias.sizes()) : std::string("none"));
  const bool shape_ok = !bias.defined() || bias.device() == h.device();
  const Impl impl = detail::resolve(Op::gelu_tanh, h, shape_ok, forced, "bias on another device");
  if (impl == Impl::aten) return detail::aten_gelu_tanh(h, bias);
  RECORD_FUNCTION("llmtrain::gelu_tanh", std::vector<c10::IValue>());
  return GeluFn::apply(h, detail::opt(bias), static_cast<int64_t>(impl));
}

namespace detail {

torch::Tensor aten_swiglu(const torch::Tensor& h) {
  auto parts = h.chunk(2, -1);
  return (at::silu(parts[0].to(torch::kFloat)) * parts[1].to(torch::kFloat)).to(h.scalar_type());
}

torch::Tensor aten_gelu_tanh(const torch::Tensor& h, const torch::Tensor& bias) {
  auto x = h.to(torch::kFloat);
  if (bias.defined()) x = x + bias.to(torch::kFloat);
  return at::gelu(x, "tanh").to(h.scalar_type());
}

}  // namespace detail
}  // namespace llmtrain::kernels
