// What one micro-batch of this Transformer keeps for backward: the activation
// term of every memory estimate (--describe, the strategies' memory model).
// Pure arithmetic on ModelConfig.
#pragma once
#include <cstdint>
#include <string>

#include "llmtrain/model/model_config.hpp"

namespace llmtrain {

// Bytes per element of a compute dtype (float32 | bfloat16 | float16, as the
// config key). Throws ConfigError for anything else.
double dtype_bytes(const std::string& dtype);

// Tensors saved for backward by this implementation for `batch_size` sequences
// of block_size tokens (no activation checkpointing). `attention` is the
// requested backend (the GPU build being planned for): manual stores the (T, T)
// attention probabilities, the fused kernels (sdpa, flash) do not.
double activation_bytes(const ModelConfig& m, const std::string& dtype, int64_t batch_size,
                        AttentionBackend attention);

}  // namespace llmtrain
