// Residual add + RMSNorm / LayerNorm + cast, forward and backward.
// Forward: one block of 256 threads per row; each thread keeps its (at most 32)
// columns of h in registers, so the row is read once and h, y written once.
// Backward: kNormBwdBlocks blocks stride over the rows, each thread keeping its
// columns' weight/bias gradients in registers, written once as a partial row.
#include "kernels/cuda_common.cuh"  // defines: to_f/from_f, block_sum, LLMTRAIN_DT_CASE
#include "kernels/norm_math.hpp"    // defines: inv_rms, norm_fwd, norm_bwd (shared with the twin)

namespace llmtrain::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPer = static_cast<int>(kNormMaxCols / kThreads);  // 32 columns per thread at most

template <typename TH, typename TD, typename TY>
__global__ void norm_fwd_kernel(const TH* __restrict__ x, const TD* __restrict__ delta, const float* __restrict__ w,
                                const float* __restrict__ b, TH* __restrict__ h, TY* __restrict__ y,
                                float* __restrict__ mean_out, float* __restrict__ rstd_out, int64_t C, float eps,
                                bool layernorm) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const TH* xr = x + row * C;
  float v[kPer];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(j) * kThreads;
    v[j] = 0.0f;
    if (c < C) {
      float hv = to_f(xr[c]);
      if (delta) {
        // h is stored in its dtype and the norm reads the stored value (backward reads it too).
        const TH hs = from_f<TH>(hv + to_f(delta[row * C + c]));
        h[row * C + c] = hs;
        hv = to_f(hs);
      }
      v[j] = hv;
      sum += hv;
    }
  }
  float mean = 0.0f;
  if (layernorm) mean = block_sum(sum, scratch) / static_cast<float>(C);
  float sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(j) * kThreads;
    if (c < C) sq += (v[j] - mean) * (v[j] - mean);
  }
  const float rstd = math::inv_rms(block_sum(sq, scratch) / static_cast<float>(C), eps);
  if (threadIdx.x == 0) {
    rstd_out[row] = rstd;
    if (mean_out) mean_out[row] = mean;
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(j) * kThreads;
    if (c < C) y[row * C + c] = from_f<TY>(math::norm_fwd(v[j], mean, rstd, w[c], b ? b[c] : 0.0f));
  }
}

template <typename TH, typename TD, typename TY>
__global__ void norm_bwd_kernel(const TH* __restrict__ h, const TY* __restrict__ dy, const TH* __restrict__ dh_out,
                                const float* __restrict__ w, const float* __restrict__ mean_in,
                                const float* __restrict__ rstd_in, TH* __restrict__ dx, TD* __restrict__ ddelta,
                                float* __restrict__ dw_part, float* __restrict__ db_part, int64_t N, int64_t C,
                                bool layernorm) {
  __shared__ float scratch[32];
  float dw[kPer], db[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) dw[j] = db[j] = 0.0f;
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const float mean = layernorm ? mean_in[row] : 0.0f;
    const float rstd = rstd_in[row];
    float xhat[kPer], g[kPer];
    float sg = 0.0f, sgx = 0.0f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(j) * kThreads;
      xhat[j] = g[j] = 0.0f;
      if (c < C) {
        const float d = to_f(dy[row * C + c]);
        xhat[j] = (to_f(h[row * C + c]) - mean) * rstd;
        g[j] = d * w[c];
        dw[j] += d * xhat[j];
        db[j] += d;
        sg += g[j];
        sgx += g[j] * xhat[j];
      }
    }
    const float mg = layernorm ? block_sum(sg, scratch) / static_cast<float>(C) : 0.0f;
    const float mgx = block_sum(sgx, scratch) / static_cast<float>(C);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(j) * kThreads;
      if (c < C) {
        float d = math::norm_bwd(g[j], xhat[j], rstd, mg, mgx);
        if (dh_out) d += to_f(dh_out[row * C + c]);
        dx[row * C + c] = from_f<TH>(d);
        if (ddelta) ddelta[row * C + c] = from_f<TD>(d);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(j) * kThreads;
    if (c < C) {
      dw_part[blockIdx.x * C + c] = dw[j];
      if (db_part) db_part[blockIdx.x * C + c] = db[j];
    }
  }
}

}  // namespace

void norm_fwd(DT th, DT td, DT ty, const void* x, const void* delta, const float* w, const float* b, void* h,
              void* y, float* mean, float* rstd, int64_t N, int64_t C, float eps, bool layernorm, Stream s) {
  if (N == 0) return;
  LLMTRAIN_DT_CASE(th, TH, LLMTRAIN_DT_CASE(td, TD, LLMTRAIN_DT_CASE(ty, TY, {
    norm_fwd_kernel<TH, TD, TY><<<static_cast<unsigned>(N), kThreads, 0, stream_of(s)>>>(
        static_cast<const TH*>(x), static_cast<const TD*>(delta), w, b, static_cast<TH*>(h), static_cast<TY*>(y),
        mean, rstd, C, eps, layernorm);
  })))
  check_launch("norm_fwd_kernel");
}

void norm_bwd(DT th, DT td, DT ty, const void* h, const void* dy, const void* dh_out, const float* w,
              const float* mean, const float* rstd, void* dx, void* ddelta, float* dw_part, float* db_part, int64_t N,
              int64_t C, bool layernorm, Stream s) {
  if (N == 0) return;
  const auto blocks = static_cast<unsigned>(norm_bwd_blocks(N));
  LLMTRAIN_DT_CASE(th, TH, LLMTRAIN_DT_CASE(td, TD, LLMTRAIN_DT_CASE(ty, TY, {
    norm_bwd_kernel<TH, TD, TY><<<blocks, kThreads, 0, stream_of(s)>>>(
        static_cast<const TH*>(h), static_cast<const TY*>(dy), static_cast<const TH*>(dh_out), w, mean, rstd,
        static_cast<TH*>(dx), static_cast<TD*>(ddelta), dw_part, db_part, N, C, layernorm);
  })))
  check_launch("norm_bwd_kernel");
}

}  // namespace llmtrain::kernels::cuda
