#include "llmtrain/model/model_config.hpp"

#include <fmt/format.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/model/params.hpp"

namespace llmtrain {

// ---- ModelConfig ---------------------------------------------------------------------

namespace {
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
}  // namespace

ModelConfig ModelConfig::from_config(const Config& c, int64_t data_vocab_size) {
  ModelConfig m;
  m.vocab_size = c.vocab_size > 0 ? c.vocab_size : data_vocab_size;
  if (m.vocab_size <= 0)
    throw ConfigError(
        "vocab_size = 0 means 'take it from the data', but no data vocabulary is known here; "
        "set vocab_size to a positive number");
  m.padded_vocab = round_up(m.vocab_size, c.vocab_pad_multiple);
  m.block_size = c.block_size;
  m.n_layer = c.n_layer;
  m.n_head = c.n_head;
  m.n_embd = c.n_embd;
  m.n_kv_head = c.n_kv_head > 0 ? c.n_kv_head : c.n_head;
  if (m.n_kv_head > m.n_head || m.n_head % m.n_kv_head != 0)
    throw ConfigError(fmt::format("n_kv_head = {} must divide n_head = {} (grouped-query attention)",
                                  m.n_kv_head, m.n_head));
  if (c.head_dim > 0) {
    m.head_dim = c.head_dim;
  } else {
    if (c.n_embd % c.n_head != 0)
      throw ConfigError(fmt::format(
          "n_embd = {} is not divisible by n_head = {}; set head_dim explicitly or choose n_head dividing n_embd",
          c.n_embd, c.n_head));
    m.head_dim = c.n_embd / c.n_head;
  }
  m.norm = c.norm;
  m.pos_encoding = c.pos_encoding;
  m.ffn = c.ffn;
  if (c.ffn_hidden > 0)
    m.ffn_hidden = c.ffn_hidden;
  else if (m.ffn == FfnKind::gelu)
    m.ffn_hidden = 4 * c.n_embd;
  else
    m.ffn_hidden = round_up((8 * c.n_embd + 2) / 3, 256);  // ceil(8/3 d), then up to 256
  if (m.pos_encoding == PosEncoding::rope && m.head_dim % 2 != 0)
    throw ConfigError(fmt::format("pos_encoding = rope needs an even head_dim, got head_dim = {}", m.head_dim));
  m.attention_backend = c.attention_backend;
  m.qk_norm = c.qk_norm;
  m.bias = c.bias;
  m.tie_embeddings = c.tie_embeddings;
  m.rope_theta = c.rope_theta;
  m.norm_eps = c.norm_eps;
  m.dropout = c.dropout;
  m.fused_loss = c.compile;
  m.fused_kernels = c.compile;
  m.document_masking = c.document_masking;
  m.recompute = c.activation_checkpointing;
  m.checkpoint_every = c.activation_checkpointing_every;
  return m;
}

bool ModelConfig::recomputes_block(int64_t i) const {
  switch (recompute) {
    case ActivationCheckpointing::none: return false;
    case ActivationCheckpointing::full: return true;
    case ActivationCheckpointing::selective: return (i + 1) % checkpoint_every == 0;
  }
  return false;
}

int64_t ModelConfig::recomputed_blocks() const {
  int64_t n = 0;
  for (int64_t i = 0; i < n_layer; ++i) n += recomputes_block(i) ? 1 : 0;
  return n;
}

std::string ModelConfig::arch_string() const {
  std::string s = fmt::format("{}L-{}H", n_layer, n_head);
  if (n_kv_head != n_head) s += fmt::format("-{}KV", n_kv_head);
  s += fmt::format("-{}D", n_embd);
  if (head_dim * n_head != n_embd) s += fmt::format("-{}hd", head_dim);
  s += fmt::format("-{}ff", ffn_hidden);
  s += pos_encoding == PosEncoding::rope ? "-RoPE" : "-LearnedPos";
  s += norm == NormKind::rmsnorm ? "-RMS" : "-LN";
  s += ffn == FfnKind::swiglu ? "-SwiGLU" : "-GELU";
  if (qk_norm) s += "-QKNorm";
  if (bias) s += "-Bias";
  if (tie_embeddings) s += "-Tied";
  s += "-PreNorm";
  return s;
}

int64_t ModelConfig::num_params() const { return param_breakdown(*this).total; }

int64_t ModelConfig::num_matmul_params() const {
  // The block weights that multiply activations, and the LM head's vocab_size
  // useful rows: padding rows are work the model does not need, so they do not
  // count toward MFU, and a tied head (the embedding table) counts once.
  int64_t n = 0;
  for (const auto& p : parameter_table(*this))
    if (p.matmul && p.group != ParamGroup::head) n += p.numel();
  return n + vocab_size * n_embd;
}

double ModelConfig::flops_per_token() const {
  return 6.0 * static_cast<double>(num_matmul_params()) +
         12.0 * static_cast<double>(n_layer) * static_cast<double>(n_head) * static_cast<double>(head_dim) *
             static_cast<double>(block_size);
}

double ModelConfig::flops_per_token_6n() const { return 6.0 * static_cast<double>(num_params()); }

}  // namespace llmtrain
