// The project's fused kernels (issue 47, docs/kernels.md): one function per op
// that the model calls. Each picks, by device, dtype and shape,
//   - cuda: the CUDA kernel (src/kernels/*.cu), on a CUDA tensor in fp32 or bf16;
//   - twin: the kernel's CPU twin (the same per-element math, src/kernels/*.cpp),
//     on a CPU tensor in fp32 or bf16;
//   - aten: the ATen ops the kernel replaces, for everything else and for a
//     kernel the start-up self-check turned off.
// Every op is one autograd node and shows in traces as `llmtrain::<name>`
// (backward as `llmtrain::<name>_backward`); the aten path shows ATen's ops.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace llmtrain::kernels {

enum class Op {
  add_rmsnorm,            // h = x + delta; y = rms_norm(h) * w, cast
  add_layernorm,          // h = x + delta; y = layer_norm(h) * w + b, cast (GPT-2)
  rope_qk_norm,           // qkv GEMM output -> q, k (QK-norm, RoPE), v in attention's layout
  swiglu,                 // silu(gate) * up
  gelu_tanh,              // gelu_tanh(h + bias) (GPT-2)
  lm_head_cross_entropy,  // mean cross-entropy of hidden @ weightᵀ, in chunks
};
constexpr int kNumOps = 6;
const std::vector<Op>& all_ops();
const char* name(Op op);  // "add_rmsnorm", ...; traces say "llmtrain::add_rmsnorm"

enum class Impl { cuda, twin, aten };
const char* to_string(Impl impl);

// True where this build compiled the CUDA kernels (LLMTRAIN_WITH_CUDA).
bool cuda_built();

// What `op` runs for a tensor like `x` (the op's main input) when no Impl is
// forced: cuda / twin where the device, dtype and `shape_ok` allow and the
// self-check has not turned the op off, aten otherwise.
Impl choose(Op op, const torch::Tensor& x, bool shape_ok = true);

// Why `op` cannot take a model's tensors of this width and dtype (empty when it
// can): `width` is the norm's hidden size C for the norms, head_dim for
// rope_qk_norm, unused by the others; `dtype` the dtype the op computes in (the
// autocast dtype, else the parameters'). The model asks once at start-up and
// prints one line per op that falls back to ATen (TransformerImpl::plan_kernels).
std::string unsupported(Op op, int64_t width, torch::ScalarType dtype);

// The self-check's switch (also for tests): a disabled op runs ATen everywhere.
void set_enabled(Op op, bool on);
bool enabled(Op op);

// ---- the ops ----------------------------------------------------------------
// `impl` forces a path (tests, benchmarks); a forced path that cannot run the
// input throws, naming the op and why.

struct NormOut {
  torch::Tensor residual;  // h = x + delta in promote(x, delta) (undefined without delta)
  torch::Tensor normed;    // (N.., C) in out_dtype
};

// x: (..., C) the residual stream; delta: (..., C) the branch output, or
// undefined (then h = x and only `normed` is returned); weight: (C).
// out_dtype: the dtype the next GEMM reads (bf16 under autocast).
NormOut add_rmsnorm(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& weight, double eps,
                    torch::ScalarType out_dtype, std::optional<Impl> impl = std::nullopt);
// bias: (C) or undefined.
NormOut add_layernorm(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& weight,
                      const torch::Tensor& bias, double eps, torch::ScalarType out_dtype,
                      std::optional<Impl> impl = std::nullopt);

// (B, h, T, D) views of (B, T, h, D) storage: the layout SDPA's kernels take
// (model/layers.cpp's plan_attention probes it), in which cuDNN's attention
// writes its output too, so c_proj reads that output without a copy (issue 46).
struct Qkv {
  torch::Tensor q;  // (B, H, T, D)
  torch::Tensor k;  // (B, K, T, D)
  torch::Tensor v;  // (B, K, T, D)
};

// qkv: (B, T, (H + 2K) * D), the qkv GEMM's output (q heads | k heads | v heads).
// cos, sin: RoPE tables of T * D/2 (shared over the batch: the model's (T, 1, D/2))
// or B * T * D/2 (per token: document positions) fp32 values, or undefined (no
// RoPE). q_norm_w, k_norm_w: (D) Qwen3's per-head RMSNorm weights, or undefined.
// q and k are normalized (if weights are given), then rotated; v is moved.
Qkv rope_qk_norm(const torch::Tensor& qkv, int64_t n_head, int64_t n_kv_head, const torch::Tensor& cos,
                 const torch::Tensor& sin, const torch::Tensor& q_norm_w, const torch::Tensor& k_norm_w, double eps,
                 std::optional<Impl> impl = std::nullopt);

// h: (..., 2F) gate | up (the c_fc GEMM's output) -> (..., F).
torch::Tensor swiglu(const torch::Tensor& h, std::optional<Impl> impl = std::nullopt);

// h: (..., F) the c_fc GEMM's output without its bias; bias: (F) or undefined.
torch::Tensor gelu_tanh(const torch::Tensor& h, const torch::Tensor& bias, std::optional<Impl> impl = std::nullopt);

// Mean over rows with targets != ignore_index of cross_entropy(hidden @ weightᵀ).
// hidden (N, C), weight (V, C), targets (N) int64. The logits exist one chunk of
// `chunk_rows` rows at a time (0: about 64 MiB of fp32 per chunk, at least 512
// rows), in the GEMM's dtype (bf16 under autocast); the kernel turns each chunk
// into its rows' losses and overwrites it with the logits' gradient, which two
// GEMMs turn into hidden's and weight's gradients (weight's accumulated in
// fp32). No host sync: 1/n_valid stays on the device.
torch::Tensor lm_head_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                    const torch::Tensor& targets, int64_t ignore_index = -1,
                                    int64_t chunk_rows = 0, std::optional<Impl> impl = std::nullopt);

// ---- start-up self-check ----------------------------------------------------------

struct CheckResult {
  Op op;
  Impl impl;           // what was checked (cuda on a GPU, twin on CPU)
  bool passed = true;
  double max_error = 0;  // the worst |kernel - aten| over values and gradients, in units of the tolerance
  std::string detail;  // which output disagreed, when one did
};

// Runs every op once (forward and backward) on a small input on `device`, in
// bf16 on CUDA and fp32 and bf16 on CPU, against its ATen path. An op that
// disagrees is turned off (set_enabled(op, false): it then runs ATen) with one
// log line naming it, so a kernel bug never trains a wrong model in silence.
std::vector<CheckResult> self_check(torch::Device device);

}  // namespace llmtrain::kernels
