// ModelConfig: the shape and options of one Transformer, resolved once from the
// run's Config (0 = derived defaults). Options are the config's enums
// (core/options.hpp: NormKind, FfnKind, PosEncoding, AttentionBackend, with
// to_string giving their words); nothing below compares strings.
#pragma once
#include <cstdint>
#include <string>

#include "llmtrain/core/options.hpp"  // defines: NormKind, FfnKind, PosEncoding, AttentionBackend, ActivationCheckpointing

namespace llmtrain {

struct Config;

struct ModelConfig {
  int64_t vocab_size = 256;      // tokens the data can contain
  int64_t padded_vocab = 256;    // embedding / LM-head rows (>= vocab_size)
  int64_t block_size = 256;
  int64_t n_layer = 4, n_head = 4, n_kv_head = 4, n_embd = 128, head_dim = 32, ffn_hidden = 512;
  NormKind norm = NormKind::rmsnorm;
  PosEncoding pos_encoding = PosEncoding::rope;
  FfnKind ffn = FfnKind::swiglu;
  AttentionBackend attention_backend = AttentionBackend::sdpa;
  bool qk_norm = false, bias = false, tie_embeddings = false;
  double rope_theta = 10000.0, norm_eps = 1e-5, dropout = 0.0;
  // document_masking: attention stays inside each document of a packed row and
  // positions restart at each document; a document ends after each eos_id
  // token (the data index's EOS, set by the trainer; -1 = unknown).
  bool document_masking = false;
  int64_t eos_id = -1;
  // compile=True: the LM head and the cross-entropy fused, in chunks of rows
  // (model/fused_loss.hpp); the loss and its gradients equal the plain path's.
  bool fused_loss = false;
  // compile=True: the block's element-wise work through the project's fused
  // kernels (docs/kernels.md): residual add + norm (add_rmsnorm /
  // add_layernorm), qkv -> q, k (QK-norm, RoPE), v (rope_qk_norm), SwiGLU /
  // GELU-tanh, and the LM head + cross-entropy (lm_head_cross_entropy, in place
  // of fused_loss's). compile=False keeps the ATen ops of model/layers.cpp.
  bool fused_kernels = false;
  // Blocks that recompute their forward during backward (model/recompute.hpp):
  // none, every block (full), or every checkpoint_every-th block (selective).
  ActivationCheckpointing recompute = ActivationCheckpointing::none;
  int64_t checkpoint_every = 2;
  // Whether block i (0-based) is recomputed: full: all; selective: i + 1 a
  // multiple of checkpoint_every (blocks k-1, 2k-1, ...); none: no block.
  bool recomputes_block(int64_t i) const;
  // How many of the n_layer blocks are recomputed.
  int64_t recomputed_blocks() const;

  // Resolves the config's model keys (0 = derived defaults); `data_vocab_size`
  // is used when vocab_size = 0. Throws ConfigError on inconsistent shapes.
  static ModelConfig from_config(const Config& c, int64_t data_vocab_size);

  // e.g. "18L-18H-2304D-6144ff-RoPE-RMS-SwiGLU-PreNorm"
  std::string arch_string() const;
  // Exact parameter count: the sum over parameter_table() (no allocation).
  int64_t num_params() const;
  // N of the MFU rule: parameters that take part in matmuls (no input embedding,
  // no learned position table; a tied LM head counts once).
  int64_t num_matmul_params() const;
  // Training FLOPs per token, docs/mfu.md's rule: 6*N + 12*L*H*Q*T.
  double flops_per_token() const;
  // The Python system's convention, for comparison: 6 * all parameters (embeddings included).
  double flops_per_token_6n() const;
};

}  // namespace llmtrain
