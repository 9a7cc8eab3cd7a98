// What one micro-batch of this Transformer keeps for backward: the activation
// term of every memory estimate (--describe, the strategies' memory model).
// Pure arithmetic on ModelConfig.
#pragma once
#include <cstdint>
#include <string>

#include "llmtrain/model/model_config.hpp"

namespace llmtrain {

// Bytes per element of a compute dtype.
double dtype_bytes(ComputeDtype dtype);

// Tensors saved for backward by this implementation for `batch_size` sequences
// of block_size tokens (no activation checkpointing). `attention` is the
// requested backend (the GPU build being planned for): manual stores the (T, T)
// attention probabilities, the fused kernels (sdpa, flash) do not.
double activation_bytes(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size,
                        AttentionBackend attention);

}  // namespace llmtrain
