#include "llmtrain/model/activations.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "llmtrain/core/error.hpp"

namespace llmtrain {

double dtype_bytes(ComputeDtype dtype) { return dtype == ComputeDtype::float32 ? 4.0 : 2.0; }

double activation_bytes_per_block(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size,
                                  AttentionBackend attention) {
  const double e = dtype_bytes(dtype);
  const double C = m.n_embd, H = m.n_head, K = m.n_kv_head, D = m.head_dim, F = m.ffn_hidden;
  const double T = m.block_size, tokens = static_cast<double>(batch_size) * T;
  // Elements saved for backward per token: two norms (input and normalized
  // output each), q|k|v, q and k after RoPE / QK-norm, the attention output,
  // the MLP intermediates (swiglu: gate|up, silu(gate), product; gelu: pre- and
  // post-activation).
  double per_token = (H + 2 * K) * D + (H + K) * D + H * D;
  if (m.qk_norm) per_token += (H + K) * D;
  per_token += m.ffn == FfnKind::swiglu ? 4 * F : 2 * F;
  double bytes = tokens * per_token * e;
  // The norms run on the fp32 residual stream: input and output in fp32 under
  // autocast too, plus the 16-bit copy of each output the next matmul saves.
  bytes += tokens * (e < 4.0 ? 4 * C * 4.0 + 2 * C * e : 4 * C * e);
  // The manual backend stores the (T, T) softmax probabilities of every head
  // (and its dropout mask); fused kernels keep only a log-sum-exp per row.
  if (attention == AttentionBackend::manual)
    bytes += tokens * H * T * e * (m.dropout > 0 ? 2.0 : 1.0);
  else
    bytes += tokens * H * 4.0;
  return bytes;
}

double activation_bytes_block_input(const ModelConfig& m, int64_t batch_size, double residual_bytes) {
  return static_cast<double>(batch_size) * static_cast<double>(m.block_size) * static_cast<double>(m.n_embd) *
         residual_bytes;
}

double activation_bytes_outside_blocks(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size) {
  const double e = dtype_bytes(dtype);
  const double tokens = static_cast<double>(batch_size) * static_cast<double>(m.block_size);
  // Embedding output and the final norm's input and output (fp32 residual
  // stream; under autocast also the head's 16-bit copy), logits in the compute
  // dtype plus their fp32 log-softmax for the loss.
  const double C = static_cast<double>(m.n_embd), V = static_cast<double>(m.padded_vocab);
  // document_masking: one block-diagonal mask for all blocks, (B, 1, T, T) as
  // bool and as SDPA's additive mask in the compute dtype (CUDA's varlen flash
  // path builds neither: an upper bound there).
  const double masks = m.document_masking ? tokens * static_cast<double>(m.block_size) * (1.0 + e) : 0.0;
  if (e < 4.0) return tokens * (3 * C * 4.0 + C * e) + tokens * V * (e + 4.0) + masks;
  return tokens * 3 * C * e + tokens * V * (e + 4.0) + masks;
}

double activation_bytes_forward(const ModelConfig& m, int64_t recomputed, ComputeDtype dtype, int64_t batch_size,
                                AttentionBackend attention, double residual_bytes) {
  const double r = static_cast<double>(std::clamp<int64_t>(recomputed, 0, m.n_layer));
  return (static_cast<double>(m.n_layer) - r) * activation_bytes_per_block(m, dtype, batch_size, attention) +
         r * activation_bytes_block_input(m, batch_size, residual_bytes) +
         activation_bytes_outside_blocks(m, dtype, batch_size);
}

RecomputePeak activation_bytes_recompute(const ModelConfig& m, int64_t recomputed, ComputeDtype dtype,
                                         int64_t batch_size, AttentionBackend attention, double residual_bytes) {
  const int64_t L = m.n_layer, R = std::clamp<int64_t>(recomputed, 0, L);
  if (R == 0) return {};
  // Recomputed blocks k-1, 2k-1, ..., Rk-1 (full: k = 1).
  const int64_t k = R == L ? 1
                    : (m.checkpointing == ActivationCheckpointing::selective && m.recomputed_blocks() == R)
                        ? m.checkpoint_every
                        : L / R;
  RecomputePeak p;
  p.block = k * R - 1;
  p.kept_below = p.block - (R - 1);
  const double block = activation_bytes_per_block(m, dtype, batch_size, attention);
  const double input = activation_bytes_block_input(m, batch_size, residual_bytes);
  // The widest point of a block's backward on top of its saved tensors: two
  // (B, T, F) gradients of the MLP in the compute dtype, and the gradient of
  // the residual stream coming in.
  const double tokens = static_cast<double>(batch_size) * static_cast<double>(m.block_size);
  const double backward = tokens * (2.0 * static_cast<double>(m.ffn_hidden) * dtype_bytes(dtype) +
                                    static_cast<double>(m.n_embd) * residual_bytes);
  p.bytes = static_cast<double>(p.kept_below) * block + static_cast<double>(R) * input + block + backward;
  return p;
}

double activation_bytes(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size,
                        AttentionBackend attention) {
  const int64_t r = m.recomputed_blocks();
  return std::max(activation_bytes_forward(m, r, dtype, batch_size, attention),
                  activation_bytes_recompute(m, r, dtype, batch_size, attention).bytes);
}

}  // namespace llmtrain
