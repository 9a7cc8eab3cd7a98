// ModelConfig: the shape and options of one Transformer, resolved once from the
// run's Config (0 = derived defaults). Options are enums: text becomes an enum
// here, at the edge, and nothing below compares strings (llama.cpp's llm_arch).
#pragma once
#include <cstdint>
#include <string>

namespace llmtrain {

struct Config;

enum class NormKind { rmsnorm, layernorm };
enum class FfnKind { swiglu, gelu };
enum class PosEncoding { rope, learned };
// The fallback chain, in order: flash_attn_3 -> flash_attn_2 -> sdpa -> manual.
enum class AttentionBackend { flash_attn_3, flash_attn_2, sdpa, manual };

// The config's words for them (what users type, what run logs print).
const char* to_string(NormKind k);
const char* to_string(FfnKind k);
const char* to_string(PosEncoding k);
const char* to_string(AttentionBackend k);
// Throws ConfigError naming the key, the value and the allowed values.
NormKind norm_kind_from_string(const std::string& s);
FfnKind ffn_kind_from_string(const std::string& s);
PosEncoding pos_encoding_from_string(const std::string& s);
AttentionBackend attention_backend_from_string(const std::string& s);

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
  // compile=True: the LM head and the cross-entropy fused, in chunks of rows
  // (model/fused_loss.hpp); the loss and its gradients equal the plain path's.
  bool fused_loss = false;

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
  // The seeds' convention for comparison: 6 * all parameters (embeddings included).
  double flops_per_token_6n() const;
};

}  // namespace llmtrain
