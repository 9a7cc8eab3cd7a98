// Cross-entropy over one chunk of bf16 (or fp32) logits, in place: one block per
// row; pass 1 is an online log-sum-exp over the row (each thread its columns,
// then merged across the block), pass 2 overwrites the row with its gradient
// (softmax - onehot) / n_valid. The row is read twice and written once; no
// fp32 copy of the logits exists.
#include "kernels/cuda_common.cuh"  // defines: to_f/from_f, LLMTRAIN_DT_CASE
#include "kernels/xent_math.hpp"    // defines: lse_add, lse_merge, xent_grad (shared with the twin)

namespace llmtrain::kernels::cuda {
namespace {

constexpr int kThreads = 512;

template <typename T>
__global__ void xent_rows_kernel(T* __restrict__ logits, const int64_t* __restrict__ targets, int64_t ignore_index,
                                 const float* __restrict__ scale_ptr, float* __restrict__ loss_rows, int64_t V,
                                 bool want_grad) {
  __shared__ float sm[32], ss[32];
  const int64_t row = blockIdx.x;
  T* x = logits + row * V;
  const int64_t y = targets[row];
  const bool valid = y != ignore_index;
  float m = -INFINITY, s = 0.0f;
  for (int64_t c = threadIdx.x; c < V; c += blockDim.x) math::lse_add(m, s, to_f(x[c]));
  // Merge the block's (m, s): first within each warp, then across warps.
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    math::lse_merge(m, s, m2, s2);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sm[warp] = m;
    ss[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    const int nw = blockDim.x >> 5;
    m = lane < nw ? sm[lane] : -INFINITY;
    s = lane < nw ? ss[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
      math::lse_merge(m, s, m2, s2);
    }
    if (lane == 0) {
      sm[0] = m;
      ss[0] = s;
    }
  }
  __syncthreads();
  const float lse = math::lse_value(sm[0], ss[0]);
  // Thread 0 reads the target's logit before pass 2 overwrites it (the barrier orders them).
  // A target outside [0, V) makes the row's loss NaN (ATen would throw; a check here would sync).
  if (threadIdx.x == 0) loss_rows[row] = !valid ? 0.0f : (y >= 0 && y < V) ? lse - to_f(x[y]) : NAN;
  __syncthreads();
  if (!want_grad) return;
  const float scale = valid ? *scale_ptr : 0.0f;
  for (int64_t c = threadIdx.x; c < V; c += blockDim.x)
    x[c] = from_f<T>(math::xent_grad(to_f(x[c]), lse, c == y, scale));
}

}  // namespace

void xent_rows(DT dt, void* logits, const int64_t* targets, int64_t ignore_index, const float* scale,
               float* loss_rows, int64_t n, int64_t V, bool want_grad, Stream s) {
  if (n == 0) return;
  LLMTRAIN_DT_CASE(dt, T, {
    xent_rows_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream_of(s)>>>(
        static_cast<T*>(logits), targets, ignore_index, scale, loss_rows, V, want_grad);
  })
  check_launch("xent_rows_kernel");
}

}  // namespace llmtrain::kernels::cuda
