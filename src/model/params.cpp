#include "llmtrain/model/params.hpp"

#include <fmt/format.h>

namespace llmtrain {

const char* to_string(ParamGroup g) {
  switch (g) {
    case ParamGroup::embedding: return "embedding";
    case ParamGroup::position: return "position";
    case ParamGroup::attention: return "attention";
    case ParamGroup::mlp: return "mlp";
    case ParamGroup::norm: return "norm";
    case ParamGroup::head: return "head";
  }
  return "?";
}

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

std::vector<ParamSpec> parameter_table(const ModelConfig& m) {
  const int64_t C = m.n_embd, H = m.n_head, K = m.n_kv_head, D = m.head_dim, F = m.ffn_hidden;
  const bool ln_bias = m.norm == NormKind::layernorm && m.bias;
  std::vector<ParamSpec> t;
  // Registration order of TransformerImpl and its modules; a Linear's weight is (out, in).
  auto add = [&](std::string name, std::vector<int64_t> shape, ParamGroup g, int64_t block, bool decay,
                 ParamInit init, bool matmul) {
    t.push_back({std::move(name), std::move(shape), g, block, decay, init, matmul});
  };
  auto norm = [&](const std::string& prefix, int64_t width, int64_t block, bool with_bias) {
    add(prefix + ".weight", {width}, ParamGroup::norm, block, false, ParamInit::ones, false);
    if (with_bias) add(prefix + ".bias", {width}, ParamGroup::norm, block, false, ParamInit::zeros, false);
  };
  auto linear = [&](const std::string& prefix, int64_t out, int64_t in, ParamGroup g, int64_t block,
                    ParamInit init) {
    add(prefix + ".weight", {out, in}, g, block, true, init, true);
    if (m.bias) add(prefix + ".bias", {out}, g, block, false, ParamInit::zeros, false);
  };

  add("wte.weight", {m.padded_vocab, C}, ParamGroup::embedding, -1, true, ParamInit::normal, false);
  if (m.pos_encoding == PosEncoding::learned)
    add("wpe.weight", {m.block_size, C}, ParamGroup::position, -1, true, ParamInit::normal, false);
  for (int64_t i = 0; i < m.n_layer; ++i) {
    const std::string h = fmt::format("h.{}.", i);
    norm(h + "ln_1", C, i, ln_bias);
    linear(h + "attn.c_attn", (H + 2 * K) * D, C, ParamGroup::attention, i, ParamInit::normal);
    linear(h + "attn.c_proj", C, H * D, ParamGroup::attention, i, ParamInit::residual_normal);
    if (m.qk_norm) {
      norm(h + "attn.q_norm", D, i, false);
      norm(h + "attn.k_norm", D, i, false);
    }
    norm(h + "ln_2", C, i, ln_bias);
    linear(h + "mlp.c_fc", m.ffn == FfnKind::swiglu ? 2 * F : F, C, ParamGroup::mlp, i, ParamInit::normal);
    linear(h + "mlp.c_proj", C, F, ParamGroup::mlp, i, ParamInit::residual_normal);
  }
  norm("ln_f", C, -1, ln_bias);
  if (!m.tie_embeddings)
    add("lm_head.weight", {m.padded_vocab, C}, ParamGroup::head, -1, true, ParamInit::normal, true);
  return t;
}

ParamBreakdown param_breakdown(const ModelConfig& m) {
  ParamBreakdown b;
  for (const auto& p : parameter_table(m)) {
    const int64_t n = p.numel();
    switch (p.group) {
      case ParamGroup::embedding:
      case ParamGroup::position: b.embeddings += n; break;
      case ParamGroup::attention: b.attention += n; break;
      case ParamGroup::mlp: b.mlp += n; break;
      case ParamGroup::norm: b.norms += n; break;
      case ParamGroup::head: b.head += n; break;
    }
    b.total += n;
  }
  return b;
}

}  // namespace llmtrain
