// CUDA builds: the caching allocator's statistics and cudaMemGetInfo for
// record/device_memory.cpp.
#include <cuda_runtime_api.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include "llmtrain/core/error.hpp"
#include "record/device_memory_impl.hpp"

namespace llmtrain::detail {

AllocatedBytes cuda_allocated_bytes(int device_index) {
  // Index 0 of the stat arrays is StatType::AGGREGATE in every LibTorch 2.x.
  const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(device_index);
  return {s.allocated_bytes[0].current, s.allocated_bytes[0].peak};
}

void cuda_reset_allocated_peak(int device_index) { c10::cuda::CUDACachingAllocator::resetPeakStats(device_index); }

int64_t cuda_free_bytes(int device_index) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_index));
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return static_cast<int64_t>(free_b);
}

}  // namespace llmtrain::detail
