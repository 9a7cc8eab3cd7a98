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
// of block_size tokens. `attention` is the requested backend (the GPU build
// being planned for): manual stores the (T, T) attention probabilities, the
// fused kernels (sdpa, flash) do not. m's activation checkpointing counts: a
// recomputed block keeps only its fp32 input, and one block's activations
// exist again during its backward.
double activation_bytes(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size,
                        AttentionBackend attention);

}  // namespace llmtrain
