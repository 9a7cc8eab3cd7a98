// RoPE (+ Qwen3's per-head QK-norm) from the qkv GEMM's output straight into
// the layout attention takes, forward and backward: q, k, v each (B, T, h, D)
// storage, which attention reads as (B, h, T, D) views (so SDPA's output comes
// in (B, T, H, D) storage too and c_proj reads it without a copy). One warp per (token,
// head) row of D values; lane l holds the pairs (i, i + D/2) for i = l, l + 32, ...
// Warps stride over the rows; in backward each warp keeps its q_norm / k_norm
// weight-gradient columns in registers and writes them once as a partial row.
#include "kernels/cuda_common.cuh"  // defines: to_f/from_f, warp_sum, LLMTRAIN_DT_CASE
#include "kernels/norm_math.hpp"    // defines: inv_rms, norm_bwd (QK-norm)
#include "kernels/rope_math.hpp"    // defines: rope_fwd, rope_bwd (shared with the twin)

namespace llmtrain::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kPairs = static_cast<int>(kRopeMaxHeadDim / 2 / 32);  // 4 pairs per lane at most

struct Geometry {
  int64_t B, T, H, K, D;
  __host__ __device__ int64_t heads() const { return H + 2 * K; }
};

template <typename T>
__global__ void rope_fwd_kernel(const T* __restrict__ qkv, const float* __restrict__ cos,
                                const float* __restrict__ sin, int64_t cos_bstride, const float* __restrict__ qw,
                                const float* __restrict__ kw, T* __restrict__ q, T* __restrict__ k,
                                T* __restrict__ v, Geometry g, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t nwarps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  const int64_t half = g.D / 2, NH = g.heads(), items = g.B * g.T * NH;
  for (int64_t it = warp; it < items; it += nwarps) {
    const int64_t head = it % NH, tok = it / NH, t = tok % g.T, b = tok / g.T;
    const T* src = qkv + it * g.D;  // (b, t, head) row: qkv is (B, T, NH, D)
    T* dst;
    const float* nw = nullptr;
    bool rotate = cos != nullptr;
    if (head < g.H) {  // q, k, v rows in (B, T, h, D) storage: token tok, head h at (tok * h + head) * D
      dst = q + (tok * g.H + head) * g.D;
      nw = qw;
    } else if (head < g.H + g.K) {
      dst = k + (tok * g.K + head - g.H) * g.D;
      nw = kw;
    } else {
      dst = v + (tok * g.K + head - g.H - g.K) * g.D;
      rotate = false;
    }
    float x1[kPairs], x2[kPairs];
    float sq = 0.0f;
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      const int64_t i = lane + 32 * j;
      x1[j] = x2[j] = 0.0f;
      if (i < half) {
        x1[j] = to_f(src[i]);
        x2[j] = to_f(src[i + half]);
        sq += x1[j] * x1[j] + x2[j] * x2[j];
      }
    }
    float rstd = 1.0f;
    if (nw) rstd = math::inv_rms(warp_sum(sq) / static_cast<float>(g.D), eps);
    const float* cr = rotate ? cos + b * cos_bstride + t * half : nullptr;
    const float* sr = rotate ? sin + b * cos_bstride + t * half : nullptr;
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      const int64_t i = lane + 32 * j;
      if (i < half) {
        float a = x1[j], c = x2[j];
        if (nw) {
          a = math::norm_fwd(a, 0.0f, rstd, nw[i], 0.0f);
          c = math::norm_fwd(c, 0.0f, rstd, nw[i + half], 0.0f);
        }
        float y1 = a, y2 = c;
        if (rotate) math::rope_fwd(a, c, cr[i], sr[i], y1, y2);
        dst[i] = from_f<T>(y1);
        dst[i + half] = from_f<T>(y2);
      }
    }
  }
}

template <typename T>
__global__ void rope_bwd_kernel(const T* __restrict__ qkv, const T* __restrict__ dq, const T* __restrict__ dk,
                                const T* __restrict__ dv, const float* __restrict__ cos,
                                const float* __restrict__ sin, int64_t cos_bstride, const float* __restrict__ qw,
                                const float* __restrict__ kw, T* __restrict__ dqkv, float* __restrict__ w_part,
                                Geometry g, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t nwarps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  const int64_t half = g.D / 2, NH = g.heads(), items = g.B * g.T * NH;
  float dwq1[kPairs], dwq2[kPairs], dwk1[kPairs], dwk2[kPairs];
#pragma unroll
  for (int j = 0; j < kPairs; ++j) dwq1[j] = dwq2[j] = dwk1[j] = dwk2[j] = 0.0f;
  for (int64_t it = warp; it < items; it += nwarps) {
    const int64_t head = it % NH, tok = it / NH, t = tok % g.T, b = tok / g.T;
    const T* src = qkv ? qkv + it * g.D : nullptr;  // read only with QK-norm (null without)
    T* out = dqkv + it * g.D;
    const T* dy;
    const float* nw = nullptr;
    bool rotate = cos != nullptr, is_q = head < g.H;
    if (is_q) {  // dq, dk, dv in (B, T, h, D) storage, as forward wrote q, k, v
      dy = dq ? dq + (tok * g.H + head) * g.D : nullptr;
      nw = qw;
    } else if (head < g.H + g.K) {
      dy = dk ? dk + (tok * g.K + head - g.H) * g.D : nullptr;
      nw = kw;
    } else {
      dy = dv ? dv + (tok * g.K + head - g.H - g.K) * g.D : nullptr;
      rotate = false;
    }
    const float* cr = rotate ? cos + b * cos_bstride + t * half : nullptr;
    const float* sr = rotate ? sin + b * cos_bstride + t * half : nullptr;
    float d1[kPairs], d2[kPairs], x1[kPairs], x2[kPairs];
    float sq = 0.0f;
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      const int64_t i = lane + 32 * j;
      d1[j] = d2[j] = x1[j] = x2[j] = 0.0f;
      if (i < half) {
        if (dy) {
          d1[j] = to_f(dy[i]);
          d2[j] = to_f(dy[i + half]);
          if (rotate) math::rope_bwd(to_f(dy[i]), to_f(dy[i + half]), cr[i], sr[i], d1[j], d2[j]);
        }
        if (nw) {
          x1[j] = to_f(src[i]);
          x2[j] = to_f(src[i + half]);
          sq += x1[j] * x1[j] + x2[j] * x2[j];
        }
      }
    }
    if (nw) {  // d1, d2: the gradient of the normalized row
      const float rstd = math::inv_rms(warp_sum(sq) / static_cast<float>(g.D), eps);
      float sgx = 0.0f;
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
        const int64_t i = lane + 32 * j;
        if (i < half) {
          x1[j] *= rstd;  // now xhat
          x2[j] *= rstd;
          sgx += d1[j] * nw[i] * x1[j] + d2[j] * nw[i + half] * x2[j];
          if (is_q) {
            dwq1[j] += d1[j] * x1[j];
            dwq2[j] += d2[j] * x2[j];
          } else {
            dwk1[j] += d1[j] * x1[j];
            dwk2[j] += d2[j] * x2[j];
          }
        }
      }
      const float mgx = warp_sum(sgx) / static_cast<float>(g.D);
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
        const int64_t i = lane + 32 * j;
        if (i < half) {
          d1[j] = math::norm_bwd(d1[j] * nw[i], x1[j], rstd, 0.0f, mgx);
          d2[j] = math::norm_bwd(d2[j] * nw[i + half], x2[j], rstd, 0.0f, mgx);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      const int64_t i = lane + 32 * j;
      if (i < half) {
        out[i] = from_f<T>(d1[j]);
        out[i + half] = from_f<T>(d2[j]);
      }
    }
  }
  if (w_part) {
    float* wq = w_part + warp * 2 * g.D;
    float* wk = wq + g.D;
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      const int64_t i = lane + 32 * j;
      if (i < half) {
        wq[i] = dwq1[j];
        wq[i + half] = dwq2[j];
        wk[i] = dwk1[j];
        wk[i + half] = dwk2[j];
      }
    }
  }
}

unsigned blocks_for(int64_t warps) { return static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

void rope_fwd(DT dt, const void* qkv, const float* cos, const float* sin, int64_t cos_bstride, const float* qw,
              const float* kw, void* q, void* k, void* v, int64_t B, int64_t T, int64_t H, int64_t K, int64_t D,
              float eps, Stream s) {
  const Geometry g{B, T, H, K, D};
  const int64_t items = B * T * g.heads();
  if (items == 0) return;
  const int64_t warps = items < 65536 * 8 ? items : 65536 * 8;
  LLMTRAIN_DT_CASE(dt, T_, {
    rope_fwd_kernel<T_><<<blocks_for(warps), kWarpsPerBlock * 32, 0, stream_of(s)>>>(
        static_cast<const T_*>(qkv), cos, sin, cos_bstride, qw, kw, static_cast<T_*>(q), static_cast<T_*>(k),
        static_cast<T_*>(v), g, eps);
  })
  check_launch("rope_fwd_kernel");
}

void rope_bwd(DT dt, const void* qkv, const void* dq, const void* dk, const void* dv, const float* cos,
              const float* sin, int64_t cos_bstride, const float* qw, const float* kw, void* dqkv, float* w_part,
              int64_t B, int64_t T, int64_t H, int64_t K, int64_t D, float eps, Stream s) {
  const Geometry g{B, T, H, K, D};
  const int64_t items = B * T * g.heads();
  if (items == 0) return;
  // Exactly rope_bwd_warps(items) warps: the wrapper sized w_part for that many.
  LLMTRAIN_DT_CASE(dt, T_, {
    rope_bwd_kernel<T_><<<blocks_for(rope_bwd_warps(items)), kWarpsPerBlock * 32, 0, stream_of(s)>>>(
        static_cast<const T_*>(qkv), static_cast<const T_*>(dq), static_cast<const T_*>(dk),
        static_cast<const T_*>(dv), cos, sin, cos_bstride, qw, kw, static_cast<T_*>(dqkv), w_part, g, eps);
  })
  check_launch("rope_bwd_kernel");
}

}  // namespace llmtrain::kernels::cuda
