// What LibTorch has allocated on a rank's device, counted exactly, and what the
// device still has: the measured side of the memory model (docs/memory.md).
//   CPU:  a counting allocator installed with c10::SetCPUAllocator in front of
//         the default one (every CPU tensor's bytes, current and peak)
//   CUDA: the caching allocator's allocated-bytes statistics; cudaMemGetInfo
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <torch/types.h>

namespace llmtrain {

// Bytes of tensor storage allocated on a device now and at most since the last
// reset_allocated_peak (or since counting started).
struct AllocatedBytes {
  int64_t current = 0;
  int64_t peak = 0;
};

// Installs the counting CPU allocator (once per process; later calls do
// nothing). Tensors allocated before it are not counted, so call it before the
// model is built.
void count_cpu_allocations();
// CPU: the counting allocator's figures (nullopt before count_cpu_allocations);
// CUDA: the caching allocator's.
std::optional<AllocatedBytes> allocated_bytes(const torch::Device& device);
// Starts a new peak window: peak = current.
void reset_allocated_peak(const torch::Device& device);

// What a rank may still allocate. CUDA: cudaMemGetInfo's free bytes of the
// rank's GPU; CPU: MemAvailable of /proc/meminfo divided among `ranks_on_node`.
struct AvailableMemory {
  int64_t bytes = 0;
  std::string source;  // "cudaMemGetInfo free of GPU 0", "MemAvailable 22.1 GiB / 2 ranks on host"
};
AvailableMemory available_memory(const torch::Device& device, int ranks_on_node, const std::string& hostname);

// MemAvailable of /proc/meminfo in bytes (-1 when it cannot be read).
int64_t mem_available_bytes();

}  // namespace llmtrain
