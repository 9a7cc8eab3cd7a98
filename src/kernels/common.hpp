// What the ops' wrappers share (private to src/kernels/): the path choice, the
// dtype and stream handed to the launchers, the fault point, and the ATen
// references — the ops each kernel replaces, which are the aten path, the
// tests' oracle and the self-check's.
#pragma once
#include <optional>

#include <torch/torch.h>

#include "kernels/launch.hpp"              // defines: cuda::DT, the launchers
#include "llmtrain/kernels/kernels.hpp"  // defines: Op, Impl, NormOut, Qkv

namespace llmtrain::kernels::detail {

// fp32 and bf16: the dtypes the kernels and twins take.
bool kernel_dtype(at::ScalarType t);
cuda::DT dt(at::ScalarType t);
// The current CUDA stream of the current device (a cudaStream_t); throws in a
// build without CUDA.
cuda::Stream stream();

// The path `op` runs: `forced` if given (throwing, with the op's name and
// `why`, where it cannot run), else choose(op, x, shape_ok).
Impl resolve(Op op, const torch::Tensor& x, bool shape_ok, std::optional<Impl> forced, const char* why);

// The fault point kernel_wrong_output: where it is armed for `op`, adds 1 to
// out's first element (a twin's output; the self-check's fallback test).
void maybe_corrupt(Op op, torch::Tensor& out);

// An optional tensor argument of an autograd Function (whose apply takes no
// undefined tensor): nullopt for an undefined one.
inline std::optional<torch::Tensor> opt(const torch::Tensor& t) {
  return t.defined() ? std::optional<torch::Tensor>(t) : std::nullopt;
}
inline torch::Tensor val(const std::optional<torch::Tensor>& t) { return t.value_or(torch::Tensor()); }

// round(v) to `t`'s precision and back (the rounding a store in t makes).
float round_to(at::ScalarType t, float v);

// ---- the ATen references ----
NormOut aten_add_norm(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& weight,
                      const torch::Tensor& bias, double eps, torch::ScalarType out_dtype, bool layernorm);
Qkv aten_rope_qk_norm(const torch::Tensor& qkv, int64_t n_head, int64_t n_kv_head, const torch::Tensor& cos,
                      const torch::Tensor& sin, const torch::Tensor& q_norm_w, const torch::Tensor& k_norm_w,
                      double eps);
torch::Tensor aten_swiglu(const torch::Tensor& h);
torch::Tensor aten_gelu_tanh(const torch::Tensor& h, const torch::Tensor& bias);
torch::Tensor aten_lm_head_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                         const torch::Tensor& targets, int64_t ignore_index);

}  // namespace llmtrain::kernels::detail
