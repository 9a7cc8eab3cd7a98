// Device helpers of the fused kernels: fp32/bf16 loads and stores (all math is
// fp32; a value is rounded once, where it is stored), warp and block sums, the
// launch check. Included by the .cu files only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/launch.hpp"   // defines: DT, Stream, the launchers' contracts
#include "llmtrain/core/error.hpp"  // defines: CUDA_CHECK

namespace llmtrain::kernels::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(bf16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) { return v; }
template <>
__device__ __forceinline__ bf16 from_f<bf16>(float v) { return __float2bfloat16_rn(v); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread
// gets the result. `scratch`: 32 floats of shared memory, reusable after return.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by an earlier call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

inline cudaStream_t stream_of(Stream s) { return static_cast<cudaStream_t>(s); }

inline void check_launch(const char* kernel) {
  ::llmtrain::detail::check_cuda(static_cast<int>(cudaGetLastError()), kernel, __FILE__, __LINE__);
}

// Calls f.template operator()<T>() with T = float or bf16 for dt.
#define LLMTRAIN_DT_CASE(dt, T, ...)            \
  switch (dt) {                                 \
    case DT::f32: {                             \
      using T = float;                          \
      __VA_ARGS__;                              \
      break;                                    \
    }                                           \
    case DT::bf16: {                            \
      using T = __nv_bfloat16;                  \
      __VA_ARGS__;                              \
      break;                                    \
    }                                           \
  }

}  // namespace llmtrain::kernels::cuda
