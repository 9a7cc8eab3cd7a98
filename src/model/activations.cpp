#include "llmtrain/model/activations.hpp"

#include <fmt/format.h>

#include "llmtrain/core/error.hpp"

namespace llmtrain {

double dtype_bytes(ComputeDtype dtype) { return dtype == ComputeDtype::float32 ? 4.0 : 2.0; }

double activation_bytes(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size,
                        AttentionBackend attention) {
  const double e = dtype_bytes(dtype);
  const double C = m.n_embd, H = m.n_head, K = m.n_kv_head, D = m.head_dim, F = m.ffn_hidden;
  const double T = m.block_size, tokens = static_cast<double>(batch_size) * T;
  // Elements saved for backward per token and layer: two norms (input and
  // normalized output each), q|k|v, q and k after RoPE / QK-norm, the attention
  // output, the MLP intermediates (swiglu: gate|up, silu(gate), product; gelu:
  // pre- and post-activation).
  double per_token_layer = 4 * C + (H + 2 * K) * D + (H + K) * D + H * D;
  if (m.qk_norm) per_token_layer += (H + K) * D;
  per_token_layer += m.ffn == FfnKind::swiglu ? 4 * F : 2 * F;
  double layer = tokens * per_token_layer * e;
  // The manual backend stores the (T, T) softmax probabilities of every head
  // (and its dropout mask); fused kernels keep only a log-sum-exp per row.
  if (attention == AttentionBackend::manual) {
    layer += tokens * H * T * e * (m.dropout > 0 ? 2.0 : 1.0);
  } else {
    layer += tokens * H * 4.0;
  }
  // Activation checkpointing: a recomputed block keeps only its input, the
  // (B, T, C) residual stream, which stays in the parameters' dtype (fp32:
  // the embedding and the residual adds are not autocast). During backward one
  // recomputed block's activations exist again, one block at a time.
  const double recomputed = static_cast<double>(m.recomputed_blocks());
  double bytes = (m.n_layer - recomputed) * layer + recomputed * tokens * C * 4.0;
  if (recomputed > 0) bytes += layer;
  // Embedding output and final norm (compute dtype), logits in the compute dtype
  // plus their fp32 log-softmax for the loss.
  bytes += tokens * 3 * C * e + tokens * m.padded_vocab * (e + 4.0);
  return bytes;
}

}  // namespace llmtrain
