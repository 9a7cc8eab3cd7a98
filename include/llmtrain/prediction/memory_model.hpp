// The memory one rank holds under each strategy (DDP, ZeRO-1, FSDP) for a model
// of a given shape: --describe's table, the start-up check that refuses a run
// that cannot fit, llmtrain-plan's filter and the memory-limit studies' first
// guess. Pure arithmetic: works for the full presets without allocating them.
// docs/memory.md describes every term; benchmarks/memory_table.py compares the
// prediction with what LibTorch allocates.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llmtrain/model/model_config.hpp"

namespace llmtrain {

struct Config;

// Bytes one rank holds for one strategy at the peak of a training step.
struct MemoryEstimate {
  StrategyKind strategy = StrategyKind::ddp;
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;
  double total() const { return weights + gradients + optimizer + activations; }
};

// Everything of a run besides the model's shape that decides its memory.
struct MemoryInputs {
  ComputeDtype dtype = ComputeDtype::float32;  // the compute dtype (autocast below fp32)
  // Bytes per stored parameter and per gradient: 4 (fp32 parameters, today's
  // trainer for every dtype) or 2 (param_dtype=bfloat16: 16-bit parameters and
  // gradients, an fp32 master copy inside the sharded AdamW).
  double param_bytes = 4.0;
  // Bytes per element of the gradient buckets and collectives (reduce_dtype).
  double reduce_bytes = 4.0;
  // Blocks that recompute their forward during backward (activation
  // checkpointing, ModelConfig::recomputed_blocks()): 0 = none, n_layer = full.
  int64_t recomputed_blocks = 0;
  int64_t batch_size = 1;  // sequences per micro-batch
  int64_t world_size = 1;
  AttentionBackend attention = AttentionBackend::sdpa;
  bool fsdp_prefetch = true;  // two blocks gathered at a time instead of one
  // DDP / ZeRO-1: the gradient buckets stay allocated between steps
  // (use_cuda_graphs=True) instead of being made during each backward.
  bool persistent_grads = false;
  // The run's inputs (dtype, batch_size, strategy options) at `world_size` ranks.
  static MemoryInputs from_config(const Config& c, int64_t world_size);
};

// FSDP's units as the code gathers them (parameters per unit), from the one
// sharding plan (distributed/sharding_plan.hpp): the embedding, each block, the
// final norm with the LM head.
std::vector<int64_t> fsdp_unit_params(const ModelConfig& m);

// One strategy's estimate, and all three (DDP, ZeRO-1, FSDP) in that order.
MemoryEstimate estimate_memory(const ModelConfig& m, const MemoryInputs& in, StrategyKind strategy);
std::vector<MemoryEstimate> estimate_memory(const ModelConfig& m, const MemoryInputs& in);
// Today's callers: fp32 parameters, no recomputation.
std::vector<MemoryEstimate> estimate_memory(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size,
                                            int64_t world_size, AttentionBackend attention);

// The largest micro-batch (sequences) whose predicted peak is at most `bytes`;
// 0 when not even one sequence fits.
int64_t max_batch_size(const ModelConfig& m, MemoryInputs in, StrategyKind strategy, double bytes);

// What a GPU's memory holds in tensors: the CUDA caching allocator reserves more
// than it hands out (block sizes rounded up and split, freed blocks kept for
// reuse). Its reserved peak was 1.042-1.057x its allocated peak over the five
// full_* presets on an H200 (docs/gpu.md, 2026-11-26). The predicted peak is of
// tensors (the allocated peak: within 1-6% above it there), so the memory check
// and the largest-batch searches for a GPU compare it with bytes / this.
constexpr double kCudaAllocatorReserve = 1.06;
inline double gpu_tensor_bytes(double device_bytes) { return device_bytes / kCudaAllocatorReserve; }

// Bytes in GiB (2^30), for messages and tables.
inline double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

}  // namespace llmtrain
