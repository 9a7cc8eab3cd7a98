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

// Tensors one transformer block saves for backward for `batch_size` sequences
// of block_size tokens. `attention` is the requested backend (the GPU build
// being planned for): manual stores the (T, T) attention probabilities, the
// fused kernels (sdpa, flash) do not.
double activation_bytes_per_block(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size,
                                  AttentionBackend attention);
// What a block whose forward is recomputed during backward keeps instead: its
// input (the fp32 residual stream).
double activation_bytes_block_input(const ModelConfig& m, int64_t batch_size);
// Outside the blocks: embedding output, final norm, logits and the loss.
double activation_bytes_outside_blocks(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size);

// All of it: n_layer blocks + outside, with m's activation checkpointing (a
// recomputed block keeps its input; one block's activations exist again during
// its backward).
double activation_bytes(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size,
                        AttentionBackend attention);

}  // namespace llmtrain
