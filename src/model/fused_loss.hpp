// The fused LM-head + cross-entropy of compile=True (private to model/).
#pragma once
#include <cstdint>

#include <torch/torch.h>

namespace llmtrain::model_detail {

// mean over the rows whose target != ignore_index of
//   cross_entropy(hidden @ weightᵀ, targets)
// computed `chunk_rows` rows at a time (Liger's fused linear cross-entropy):
// each chunk's logits are made, turned into the loss and — when a gradient is
// wanted — at once into the gradients of `hidden` and `weight`, then dropped.
// The (N, V) logits and their gradient never exist whole: the memory is
// N x C for hidden's gradient and one chunk of logits, instead of N x V several
// times over. The FLOPs are those of the plain path (one forward and two
// backward matmuls). Under autocast the matmuls run in the autocast dtype and
// the softmax in fp32, as the plain path does. hidden (N, C), weight (V, C),
// targets (N) int64.
torch::Tensor fused_linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                         const torch::Tensor& targets, int64_t ignore_index = -1,
                                         int64_t chunk_rows = 0);

// Rows per chunk of `rows`: about 64 MiB of fp32 logits on the CPU, 512 MiB on
// CUDA (`cuda`), at least 512 rows, the same for every chunk.
int64_t default_chunk_rows(int64_t rows, int64_t vocab, bool cuda = false);

}  // namespace llmtrain::model_detail
