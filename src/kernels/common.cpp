#include "kernels/common.hpp"

#include <atomic>

#include <c10/util/BFloat16.h>
#include <fmt/format.h>

#include "llmtrain/core/error.hpp"  // defines: LLMTRAIN_CHECK, NotBuiltError
#include "llmtrain/core/fault.hpp"  // defines: Point::kernel_wrong_output

#ifdef LLMTRAIN_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace llmtrain::kernels {

namespace {
// Ops the self-check turned off (zero-initialized: every op on).
std::atomic<bool> g_disabled[kNumOps];
}  // namespace

const std::vector<Op>& all_ops() {
  static const std::vector<Op> ops = {Op::add_rmsnorm, Op::add_layernorm,  Op::rope_qk_norm,
                                      Op::swiglu,      Op::gelu_tanh,      Op::lm_head_cross_entropy};
  return ops;
}

const char* name(Op op) {
  switch (op) {
    case Op::add_rmsnorm: return "add_rmsnorm";
    case Op::add_layernorm: return "add_layernorm";
    case Op::rope_qk_norm: return "rope_qk_norm";
    case Op::swiglu: return "swiglu";
    case Op::gelu_tanh: return "gelu_tanh";
    case Op::lm_head_cross_entropy: return "lm_head_cross_entropy";
  }
  return "?";
}

const char* to_string(Impl impl) {
  switch (impl) {
    case Impl::cuda: return "cuda";
    case Impl::twin: return "twin";
    case Impl::aten: return "aten";
  }
  return "?";
}

bool cuda_built() {
#ifdef LLMTRAIN_WITH_CUDA
  return true;
#else
  return false;
#endif
}

void set_enabled(Op op, bool on) { g_disabled[static_cast<int>(op)] = !on; }
bool enabled(Op op) { return !g_disabled[static_cast<int>(op)]; }

std::string unsupported(Op op, int64_t width, torch::ScalarType dtype) {
  if (!detail::kernel_dtype(dtype))
    return fmt::format("it computes in float32 or bfloat16, the model in {}", c10::toString(dtype));
  switch (op) {
    case Op::add_rmsnorm:
    case Op::add_layernorm:
      if (width > cuda::kNormMaxCols)
        return fmt::format("n_embd = {} is above its {} columns per row", width, cuda::kNormMaxCols);
      break;
    case Op::rope_qk_norm:
      if (width % 2 != 0 || width > cuda::kRopeMaxHeadDim)
        return fmt::format("head_dim = {} is odd or above {}", width, cuda::kRopeMaxHeadDim);
      break;
    default: break;
  }
  return {};
}

Impl choose(Op op, const torch::Tensor& x, bool shape_ok) {
  if (!enabled(op) || !shape_ok || !detail::kernel_dtype(x.scalar_type())) return Impl::aten;
  if (x.is_cuda() && cuda_built()) return Impl::cuda;
  if (x.is_cpu()) return Impl::twin;
  return Impl::aten;
}

namespace detail {

bool kernel_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16; }

cuda::DT dt(at::ScalarType t) {
  LLMTRAIN_CHECK(kernel_dtype(t), "fused kernels take float32 or bfloat16, got {}", c10::toString(t));
  return t == at::kFloat ? cuda::DT::f32 : cuda::DT::bf16;
}

cuda::Stream stream() {
#ifdef LLMTRAIN_WITH_CUDA
  return static_cast<cuda::Stream>(c10::cuda::getCurrentCUDAStream().stream());
#else
  throw NotBuiltError("the fused CUDA kernels are not in this build (LLMTRAIN_WITH_CUDA is off)");
#endif
}

Impl resolve(Op op, const torch::Tensor& x, bool shape_ok, std::optional<Impl> forced, const char* why) {
  if (!forced) return choose(op, x, shape_ok);
  const Impl f = *forced;
  if (f == Impl::aten) return f;
  LLMTRAIN_CHECK(kernel_dtype(x.scalar_type()), "llmtrain::{}: the {} path takes float32 or bfloat16, got {}",
                 name(op), to_string(f), c10::toString(x.scalar_type()));
  LLMTRAIN_CHECK(shape_ok, "llmtrain::{}: the {} path cannot take this input: {}", name(op), to_string(f), why);
  if (f == Impl::cuda) {
    if (!cuda_built())
      throw NotBuiltError(fmt::format("llmtrain::{}: the CUDA kernel is not in this build (LLMTRAIN_WITH_CUDA off)",
                                      name(op)));
    LLMTRAIN_CHECK(x.is_cuda(), "llmtrain::{}: the CUDA kernel needs CUDA tensors, got {}", name(op),
                   x.device().str());
  } else {
    LLMTRAIN_CHECK(x.is_cpu(), "llmtrain::{}: the CPU twin needs CPU tensors, got {}", name(op), x.device().str());
  }
  return f;
}

void maybe_corrupt(Op op, torch::Tensor& out) {
  if (!fault::hit(fault::Point::kernel_wrong_output, /*rank=*/0, /*iteration=*/0)) return;
  if (fault::value(fault::Point::kernel_wrong_output) != static_cast<int64_t>(op) || out.numel() == 0) return;
  torch::NoGradGuard no_grad;
  out.view(-1)[0].add_(1.0);
}

float round_to(at::ScalarType t, float v) {
  return t == at::kBFloat16 ? static_cast<float>(c10::BFloat16(v)) : v;
}

}  // namespace detail
}  // namespace llmtrain::kernels
