#include "llmtrain/model/activations.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "llmtrain/core/error.hpp"

namespace llmtrain {

double dtype_bytes(ComputeDtype dtype) { return dtype == ComputeDtype::float32 ? 4.0 : 2.0; }

namespace {

// Bytes per token a norm over C saves with the matmul that reads its output
// (e: the compute dtype, r: the residual stream's). RMSNorm is one fused op
// (CUDA's _fused_rms_norm, its CPU twin in model/layers.cpp): it saves its
// input as given (the residual stream, in r) and the fp32 reciprocal RMS of
// the row, not its normalized rows; the matmul saves its output (autocast's
// 16-bit copy under autocast). LayerNorm saves its input with a mean and a
// reciprocal deviation per row, all in r (CPU autocast does not lift it to
// fp32), and the matmul its output.
// compile=True (fused_kernels): kernels::add_rmsnorm / add_layernorm save
// their input (the residual stream, r) and an fp32 mean and rstd per row (8:
// RMSNorm keeps a zero mean too), and write the output in the matmul's dtype.
double norm_bytes_per_token(const ModelConfig& m, double e, double r) {
  const double C = static_cast<double>(m.n_embd);
  if (m.fused_kernels) return r * C + 8 + e * C;
  if (m.norm == NormKind::rmsnorm) return r * C + 4 + e * C;
  return r * C + 2 * r + e * C;
}

}  // namespace

double activation_bytes_per_block(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size,
                                  AttentionBackend attention, double residual_bytes) {
  // What autograd saves in model/layers.cpp, tensor by tensor. e: the compute
  // dtype (what the matmuls read); r: the residual stream's, the parameters'
  // dtype (fp32 under autocast over fp32 parameters).
  const double e = dtype_bytes(dtype), r = residual_bytes;
  const double H = m.n_head, K = m.n_kv_head, D = m.head_dim, F = m.ffn_hidden;
  const double T = m.block_size, tokens = static_cast<double>(batch_size) * T;
  // ln_1 and ln_2, each with the matmul that reads it.
  double per_token = 2 * norm_bytes_per_token(m, e, r);
  // QK-norm (RMSNorm over D of q and k, before RoPE) saves its inputs, views
  // of c_attn's (B, T, (H+2K)D) output (which keeps all of it alive: counted
  // with attention below), and an fp32 reciprocal RMS per head; RoPE, which
  // reads its output, saves only its (T, D/2) tables.
  const bool rope = m.pos_encoding == PosEncoding::rope;
  if (m.qk_norm && !m.fused_kernels) per_token += (H + K) * 4.0;
  if (m.fused_kernels) {
    // kernels::rope_qk_norm writes q, k, v as new tensors, which attention
    // saves (manual: the scaled q in place of q); it keeps c_attn's output only
    // for QK-norm (its backward recomputes the rstd from it). They are (B, T,
    // h, D) storage, so SDPA's output comes in (B, T, H, D) storage and c_proj
    // reads it through a view: one H*D per token, and an fp32 log-sum-exp per
    // row and head. The manual path takes contiguous (B, h, T, D) copies (the
    // kernel's outputs die) and saves the (T, T) probabilities; its output is
    // (B, H, T, D), and c_proj saves its (B, T, H*D) copy.
    if (m.qk_norm) per_token += (H + 2 * K) * D * e;
    per_token += (H + 2 * K) * D * e + H * D * e +
                 (attention == AttentionBackend::manual ? H * T * e * (m.dropout > 0 ? 2.0 : 1.0) : H * 4.0);
  } else if (attention == AttentionBackend::manual) {
    // c_attn's output where QK-norm keeps it; the scaled q, k and v the two
    // matmuls read (copies into (B, h, T, D)), the (T, T) softmax probabilities
    // of every head (and their dropout mask), and the copy of the output c_proj
    // reads.
    if (m.qk_norm) per_token += (H + 2 * K) * D * e;
    per_token += (H + 2 * K) * D * e + H * T * e * (m.dropout > 0 ? 2.0 : 1.0) + H * D * e;
  } else {
    // SDPA saves q, k and v as passed: (B, h, T, D) views. q and k are new
    // tensors after RoPE or QK-norm; otherwise views of c_attn's output, as v
    // is where QK-norm keeps that output anyway or without RoPE; else v is a
    // copy. Then the output (c_proj reads it through a view: it comes in q's
    // (B, T, H, D) storage) and one fp32 log-sum-exp per row and head.
    const bool qkv_kept = m.qk_norm || !rope;
    per_token += (qkv_kept ? (H + 2 * K) * D * e : K * D * e) + (rope || m.qk_norm ? (H + K) * D * e : 0.0) +
                 H * D * e + H * 4.0;
  }
  // MLP: SwiGLU keeps c_fc's (B, T, 2F) output and c_proj its input, the
  // product: 3F. Both paths make silu(gate) again in backward instead of
  // saving it (compile=False: model/layers.cpp SwigluRecompute; compile=True:
  // kernels::swiglu). GELU its input and output: 2F.
  per_token += (m.ffn == FfnKind::swiglu ? 3 * F : 2 * F) * e;
  return tokens * per_token;
}

double activation_bytes_block_input(const ModelConfig& m, int64_t batch_size, double residual_bytes) {
  return static_cast<double>(batch_size) * static_cast<double>(m.block_size) * static_cast<double>(m.n_embd) *
         residual_bytes;
}

double activation_bytes_outside_blocks(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size,
                                       double residual_bytes) {
  const double e = dtype_bytes(dtype);
  const double tokens = static_cast<double>(batch_size) * static_cast<double>(m.block_size);
  const double V = static_cast<double>(m.padded_vocab);
  // The embedding's output is block 0's input (counted there, or as a
  // recomputed block's input). The final norm with the head that reads it;
  // the logits in the compute dtype, the loss's fp32 copy of 16-bit logits,
  // and the fp32 log-softmax it saves: all three exist at once in the loss.
  double bytes = tokens * norm_bytes_per_token(m, e, residual_bytes) + tokens * V * (e + 4.0 + (e < 4.0 ? 4.0 : 0.0));
  // compile=True: kernels::lm_head_cross_entropy makes the logits a chunk of
  // rows at a time (transient, not counted) and keeps, until backward, hidden's
  // gradient (in place of the final norm's output, counted above) and the
  // head weight's (V, C) gradient in the parameters' dtype.
  if (m.fused_kernels)
    bytes = tokens * norm_bytes_per_token(m, e, residual_bytes) + V * static_cast<double>(m.n_embd) * residual_bytes;
  // document_masking: one block-diagonal mask for all blocks, (B, 1, T, T) as
  // bool and as SDPA's additive mask in the compute dtype (CUDA's varlen flash
  // path builds neither: an upper bound there).
  if (m.document_masking) bytes += tokens * static_cast<double>(m.block_size) * (1.0 + e);
  return bytes;
}

double activation_bytes_forward(const ModelConfig& m, int64_t recomputed, ComputeDtype dtype, int64_t batch_size,
                                AttentionBackend attention, double residual_bytes) {
  const double r = static_cast<double>(std::clamp<int64_t>(recomputed, 0, m.n_layer));
  return (static_cast<double>(m.n_layer) - r) *
             activation_bytes_per_block(m, dtype, batch_size, attention, residual_bytes) +
         r * activation_bytes_block_input(m, batch_size, residual_bytes) +
         activation_bytes_outside_blocks(m, dtype, batch_size, residual_bytes);
}

RecomputePeak activation_bytes_recompute(const ModelConfig& m, int64_t recomputed, ComputeDtype dtype,
                                         int64_t batch_size, AttentionBackend attention, double residual_bytes) {
  const int64_t L = m.n_layer, R = std::clamp<int64_t>(recomputed, 0, L);
  if (R == 0) return {};
  // Recomputed blocks k-1, 2k-1, ..., Rk-1 (full: k = 1).
  const int64_t k = R == L ? 1
                    : (m.recompute == ActivationCheckpointing::selective && m.recomputed_blocks() == R)
                        ? m.checkpoint_every
                        : L / R;
  RecomputePeak p;
  p.block = k * R - 1;
  p.kept_below = p.block - (R - 1);
  const double block = activation_bytes_per_block(m, dtype, batch_size, attention, residual_bytes);
  const double input = activation_bytes_block_input(m, batch_size, residual_bytes);
  // The widest point of a block's backward on top of its saved tensors: the
  // gradient of c_fc's output in the compute dtype ((B, T, 2F) for SwiGLU's
  // gate | up, (B, T, F) for GELU), and the gradient of the residual stream
  // coming in.
  const double tokens = static_cast<double>(batch_size) * static_cast<double>(m.block_size);
  const double fc_out = static_cast<double>(m.ffn == FfnKind::swiglu ? 2 * m.ffn_hidden : m.ffn_hidden);
  const double backward =
      tokens * (fc_out * dtype_bytes(dtype) + static_cast<double>(m.n_embd) * residual_bytes);
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
