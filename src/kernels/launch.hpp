// The CUDA kernels' launchers (src/kernels/*.cu), on raw pointers: the .cu files
// include no LibTorch header (nvcc compiles them in seconds, and they do not
// depend on ATen's ABI); the wrappers in the .cpp files hand them data pointers
// and the current stream. Compiled only where LLMTRAIN_WITH_CUDA is on.
// Every pointer is to a contiguous row-major tensor; float* are fp32.
#pragma once
#include <cstdint>

namespace llmtrain::kernels::cuda {

enum class DT : int { f32 = 0, bf16 = 1 };
using Stream = void*;  // cudaStream_t

// ---- norms (norm.cu) ----
// Columns per row a norm kernel takes: 256 threads x 32 values in registers.
constexpr int64_t kNormMaxCols = 8192;
// Blocks of the backward, each with one (C) row of weight/bias gradient
// partials (the wrapper sums the (kNormBwdBlocks, C) partials).
constexpr int64_t kNormBwdBlocks = 512;
inline int64_t norm_bwd_blocks(int64_t rows) { return rows < kNormBwdBlocks ? rows : kNormBwdBlocks; }

// h = x + delta (delta may be null; x and h in th, delta in td), y = norm(h) * w (+ b)
// in ty; h is written only when delta is given. mean (LayerNorm) and rstd: (N) fp32.
void norm_fwd(DT th, DT td, DT ty, const void* x, const void* delta, const float* w, const float* b, void* h,
              void* y, float* mean, float* rstd, int64_t N, int64_t C, float eps, bool layernorm, Stream s);
// dx = norm backward(dy) + dh_out (dh_out may be null), in th; ddelta (td) the
// same values where non-null; dw_part / db_part (norm_bwd_blocks(N), C) fp32
// (db_part may be null).
void norm_bwd(DT th, DT td, DT ty, const void* h, const void* dy, const void* dh_out, const float* w,
              const float* mean, const float* rstd, void* dx, void* ddelta, float* dw_part, float* db_part, int64_t N,
              int64_t C, bool layernorm, Stream s);

// ---- RoPE + QK-norm (rope.cu) ----
// One warp per (token, head) row of D values: D even and at most 256.
constexpr int64_t kRopeMaxHeadDim = 256;
// Warps of the backward, each with one (2, D) row of q_norm/k_norm weight
// gradient partials.
constexpr int64_t kRopeBwdWarps = 4096;
inline int64_t rope_bwd_warps(int64_t items) { return items < kRopeBwdWarps ? ((items + 7) / 8) * 8 : kRopeBwdWarps; }

// qkv (B, T, (H+2K) D) -> q (B, T, H, D), k, v (B, T, K, D), all in dt; cos/sin
// (T or B*T, D/2) fp32 (cos_bstride 0 or T*D/2 between batch rows; null: no RoPE);
// qw, kw (D) fp32 or null.
void rope_fwd(DT dt, const void* qkv, const float* cos, const float* sin, int64_t cos_bstride, const float* qw,
              const float* kw, void* q, void* k, void* v, int64_t B, int64_t T, int64_t H, int64_t K, int64_t D,
              float eps, Stream s);
// dq (B, T, H, D), dk, dv (B, T, K, D) (null: zero) -> dqkv (B, T, (H+2K) D); w_part (rope_bwd_warps(B*T*(H+2K)), 2, D)
// fp32 q_norm/k_norm weight-gradient partials (null without QK-norm).
void rope_bwd(DT dt, const void* qkv, const void* dq, const void* dk, const void* dv, const float* cos,
              const float* sin, int64_t cos_bstride, const float* qw, const float* kw, void* dqkv, float* w_part,
              int64_t B, int64_t T, int64_t H, int64_t K, int64_t D, float eps, Stream s);

// ---- activations (act.cu) ----
// h (rows, 2F) gate | up -> y (rows, F)
void swiglu_fwd(DT dt, const void* h, void* y, int64_t rows, int64_t F, Stream s);
void swiglu_bwd(DT dt, const void* h, const void* dy, void* dh, int64_t rows, int64_t F, Stream s);
// y = gelu_tanh(h + bias); bias (F) fp32 or null. dpre (rows, F) is d/d(h + bias).
void gelu_fwd(DT dt, const void* h, const float* bias, void* y, int64_t rows, int64_t F, Stream s);
void gelu_bwd(DT dt, const void* h, const float* bias, const void* dy, void* dpre, int64_t rows, int64_t F, Stream s);

// ---- cross-entropy over a chunk of logits (xent.cu) ----
// logits (n, V) in dt; targets (n) int64; *scale = 1 / n_valid on the device.
// loss_rows (n) fp32: lse - logit[target] (0 on ignored rows). With want_grad the
// logits are overwritten with (softmax - onehot) * scale (0 on ignored rows).
void xent_rows(DT dt, void* logits, const int64_t* targets, int64_t ignore_index, const float* scale,
               float* loss_rows, int64_t n, int64_t V, bool want_grad, Stream s);

}  // namespace llmtrain::kernels::cuda
