// The qualifier that lets one inline function compile for the host (the CPU
// twins, g++) and the device (the .cu kernels, nvcc): each kernel's per-element
// math lives in one header that both include, so the twin is the kernel's
// arithmetic, not a second description of it.
#pragma once
#include <cmath>

#if defined(__CUDACC__)
#define LLMTRAIN_HD __host__ __device__ __forceinline__
#else
#define LLMTRAIN_HD inline
#endif
