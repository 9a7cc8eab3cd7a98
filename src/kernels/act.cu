// SwiGLU and GELU-tanh (+ bias), forward and backward: element-wise over rows,
// a grid-stride loop over the (rows, F) outputs. SwiGLU's backward recomputes
// silu(gate) from the saved GEMM output instead of keeping silu(gate) alive.
#include "kernels/act_math.hpp"     // defines: swiglu_fwd/bwd, gelu_tanh_fwd/bwd (shared with the twin)
#include "kernels/cuda_common.cuh"  // defines: to_f/from_f, LLMTRAIN_DT_CASE

namespace llmtrain::kernels::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
}

template <typename T>
__global__ void swiglu_fwd_kernel(const T* __restrict__ h, T* __restrict__ y, int64_t n, int64_t F) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / F, c = e % F;
    y[e] = from_f<T>(math::swiglu_fwd(to_f(h[r * 2 * F + c]), to_f(h[r * 2 * F + F + c])));
  }
}

template <typename T>
__global__ void swiglu_bwd_kernel(const T* __restrict__ h, const T* __restrict__ dy, T* __restrict__ dh, int64_t n,
                                  int64_t F) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / F, c = e % F;
    float dg, du;
    math::swiglu_bwd(to_f(h[r * 2 * F + c]), to_f(h[r * 2 * F + F + c]), to_f(dy[e]), dg, du);
    dh[r * 2 * F + c] = from_f<T>(dg);
    dh[r * 2 * F + F + c] = from_f<T>(du);
  }
}

template <typename T>
__global__ void gelu_fwd_kernel(const T* __restrict__ h, const float* __restrict__ bias, T* __restrict__ y, int64_t n,
                                int64_t F) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = to_f(h[e]) + (bias ? bias[e % F] : 0.0f);
    y[e] = from_f<T>(math::gelu_tanh_fwd(x));
  }
}

template <typename T>
__global__ void gelu_bwd_kernel(const T* __restrict__ h, const float* __restrict__ bias, const T* __restrict__ dy,
                                T* __restrict__ dpre, int64_t n, int64_t F) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = to_f(h[e]) + (bias ? bias[e % F] : 0.0f);
    dpre[e] = from_f<T>(math::gelu_tanh_bwd(x, to_f(dy[e])));
  }
}

}  // namespace

void swiglu_fwd(DT dt, const void* h, void* y, int64_t rows, int64_t F, Stream s) {
  const int64_t n = rows * F;
  if (n == 0) return;
  LLMTRAIN_DT_CASE(dt, T, {
    swiglu_fwd_kernel<T><<<grid_for(n), kThreads, 0, stream_of(s)>>>(static_cast<const T*>(h), static_cast<T*>(y),
                                                                     n, F);
  })
  check_launch("swiglu_fwd_kernel");
}

void swiglu_bwd(DT dt, const void* h, const void* dy, void* dh, int64_t rows, int64_t F, Stream s) {
  const int64_t n = rows * F;
  if (n == 0) return;
  LLMTRAIN_DT_CASE(dt, T, {
    swiglu_bwd_kernel<T><<<grid_for(n), kThreads, 0, stream_of(s)>>>(
        static_cast<const T*>(h), static_cast<const T*>(dy), static_cast<T*>(dh), n, F);
  })
  check_launch("swiglu_bwd_kernel");
}

void gelu_fwd(DT dt, const void* h, const float* bias, void* y, int64_t rows, int64_t F, Stream s) {
  const int64_t n = rows * F;
  if (n == 0) return;
  LLMTRAIN_DT_CASE(dt, T, {
    gelu_fwd_kernel<T><<<grid_for(n), kThreads, 0, stream_of(s)>>>(static_cast<const T*>(h), bias,
                                                                   static_cast<T*>(y), n, F);
  })
  check_launch("gelu_fwd_kernel");
}

void gelu_bwd(DT dt, const void* h, const float* bias, const void* dy, void* dpre, int64_t rows, int64_t F,
              Stream s) {
  const int64_t n = rows * F;
  if (n == 0) return;
  LLMTRAIN_DT_CASE(dt, T, {
    gelu_bwd_kernel<T><<<grid_for(n), kThreads, 0, stream_of(s)>>>(
        static_cast<const T*>(h), bias, static_cast<const T*>(dy), static_cast<T*>(dpre), n, F);
  })
  check_launch("gelu_bwd_kernel");
}

}  // namespace llmtrain::kernels::cuda
