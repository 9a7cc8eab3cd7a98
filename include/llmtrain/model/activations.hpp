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
// of block_size tokens, as model/layers.cpp's operations save them (its input
// where saved; not the 16-bit weight copies of autocast, which the memory
// model counts apart). `attention` is the requested backend (the GPU build
// being planned for): manual stores the (T, T) attention probabilities, the
// fused kernels (sdpa, flash) do not. `residual_bytes`: the residual stream's
// element size, the parameters' (4 under autocast over fp32 parameters, 2 with
// param_dtype=bfloat16). Checked against the counting allocator for each
// family and precision (tests/model/test_transformer.cpp, ActivationBytes.*).
double activation_bytes_per_block(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size,
                                  AttentionBackend attention, double residual_bytes = 4.0);
// What a block whose forward is recomputed during backward keeps instead: its
// input, the residual stream: in the parameters' dtype (`residual_bytes`: fp32
// under autocast too, since the embedding and the residual additions are not
// autocast; 2 with param_dtype=bfloat16).
double activation_bytes_block_input(const ModelConfig& m, int64_t batch_size, double residual_bytes = 4.0);
// Outside the blocks: the final norm, the logits and the loss.
double activation_bytes_outside_blocks(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size,
                                       double residual_bytes = 4.0);

// With activation checkpointing a step has two peaks of saved tensors. At the
// end of the forward every block holds what it keeps (its activations, or its
// input where recomputed) and the logits and loss exist. During the backward of
// the highest recomputed block j those are gone (the head's and the blocks
// above j's backward has run): the blocks below j keep theirs, j's activations
// exist again, with the gradients that block's backward works on.
struct RecomputePeak {
  double bytes = 0;          // the saved tensors and temporaries at that point
  int64_t block = -1;        // j, the highest recomputed block (-1: none)
  int64_t kept_below = 0;    // blocks below j that are not recomputed (keep activations)
};
// `recomputed` blocks of m.n_layer, in m's pattern when it recomputes that
// many (selective: every m.checkpoint_every-th), else evenly spaced.
RecomputePeak activation_bytes_recompute(const ModelConfig& m, int64_t recomputed, ComputeDtype dtype,
                                         int64_t batch_size, AttentionBackend attention, double residual_bytes = 4.0);
// What the end of the forward holds: the blocks' kept tensors and everything
// outside them.
double activation_bytes_forward(const ModelConfig& m, int64_t recomputed, ComputeDtype dtype, int64_t batch_size,
                                AttentionBackend attention, double residual_bytes = 4.0);

// The larger of the two, with m's activation checkpointing (no checkpointing:
// the end of the forward).
double activation_bytes(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size,
                        AttentionBackend attention);

}  // namespace llmtrain
