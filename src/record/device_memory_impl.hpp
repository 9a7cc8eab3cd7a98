// Private: the CUDA half of record/device_memory.cpp (device_memory_cuda.cpp,
// compiled in CUDA builds only).
#pragma once
#include <cstdint>

#include "llmtrain/record/device_memory.hpp"

namespace llmtrain::detail {
AllocatedBytes cuda_allocated_bytes(int device_index);
void cuda_reset_allocated_peak(int device_index);
int64_t cuda_free_bytes(int device_index);  // cudaMemGetInfo's free bytes
}  // namespace llmtrain::detail
