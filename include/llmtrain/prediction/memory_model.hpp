// The memory one GPU holds under each strategy (DDP, ZeRO-1, FSDP) for a model
// of a given shape: --describe's table and the memory-limit studies' first
// guess. Pure arithmetic: works for the full presets without allocating them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llmtrain/model/model_config.hpp"

namespace llmtrain {

// Bytes one GPU holds for one strategy.
struct MemoryEstimate {
  StrategyKind strategy = StrategyKind::ddp;
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;
  double total() const { return weights + gradients + optimizer + activations; }
};
// dtype: the compute dtype (the config key). Weights and gradients
// are held in the compute dtype; AdamW keeps two fp32 moments, plus fp32 master
// weights when the compute dtype is 16-bit. Activations: activation_bytes() of
// one micro-batch of `batch_size` sequences with the `attention` backend.
std::vector<MemoryEstimate> estimate_memory(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size,
                                            int64_t world_size, AttentionBackend attention);

}  // namespace llmtrain
