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

const char* param_module_name(ParamRole r) {
  switch (r) {
    case ParamRole::token_embedding: return "wte";
    case ParamRole::position_embedding: return "wpe";
    case ParamRole::attn_norm: return "ln_1";
    case ParamRole::qkv: return "attn.c_attn";
    case ParamRole::attn_out: return "attn.c_proj";
    case ParamRole::q_norm: return "attn.q_norm";
    case ParamRole::k_norm: return "attn.k_norm";
    case ParamRole::mlp_norm: return "ln_2";
    case ParamRole::mlp_in: return "mlp.c_fc";
    case ParamRole::mlp_out: return "mlp.c_proj";
    case ParamRole::final_norm: return "ln_f";
    case ParamRole::lm_head: return "lm_head";
  }
  return "?";
}

const char* to_string(ParamTensor t) { return t == ParamTensor::weight ? "weight" : "bias"; }

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
  auto add = [&](ParamRole role, int64_t block, ParamTensor tensor, std::vector<int64_t> shape, ParamGroup g,
                 bool decay, ParamInit init, bool matmul) {
    std::string name = block >= 0 ? fmt::format("h.{}.{}.{}", block, param_module_name(role), to_string(tensor))
                                  : fmt::format("{}.{}", param_module_name(role), to_string(tensor));
    t.push_back({std::move(name), std::move(shape), g, block, role, tensor, decay, init, matmul});
  };
  auto norm = [&](ParamRole role, int64_t width, int64_t block, bool with_bias) {
    add(role, block, ParamTensor::weight, {width}, ParamGroup::norm, false, ParamInit::ones, false);
    if (with_bias) add(role, block, ParamTensor::bias, {width}, ParamGroup::norm, false, ParamInit::zeros, false);
  };
  auto linear = [&](ParamRole role, int64_t out, int64_t in, ParamGroup g, int64_t block, ParamInit init) {
    add(role, block, ParamTensor::weight, {out, in}, g, true, init, true);
    if (m.bias) add(role, block, ParamTensor::bias, {out}, g, false, ParamInit::zeros, false);
  };

  add(ParamRole::token_embedding, -1, ParamTensor::weight, {m.padded_vocab, C}, ParamGroup::embedding, true,
      ParamInit::normal, false);
  if (m.pos_encoding == PosEncoding::learned)
    add(ParamRole::position_embedding, -1, ParamTensor::weight, {m.block_size, C}, ParamGroup::position, true,
        ParamInit::normal, false);
  for (int64_t i = 0; i < m.n_layer; ++i) {
    norm(ParamRole::attn_norm, C, i, ln_bias);
    linear(ParamRole::qkv, (H + 2 * K) * D, C, ParamGroup::attention, i, ParamInit::normal);
    linear(ParamRole::attn_out, C, H * D, ParamGroup::attention, i, ParamInit::residual_normal);
    if (m.qk_norm) {
      norm(ParamRole::q_norm, D, i, false);
      norm(ParamRole::k_norm, D, i, false);
    }
    norm(ParamRole::mlp_norm, C, i, ln_bias);
    linear(ParamRole::mlp_in, m.ffn == FfnKind::swiglu ? 2 * F : F, C, ParamGroup::mlp, i, ParamInit::normal);
    linear(ParamRole::mlp_out, C, F, ParamGroup::mlp, i, ParamInit::residual_normal);
  }
  norm(ParamRole::final_norm, C, -1, ln_bias);
  if (!m.tie_embeddings)
    add(ParamRole::lm_head, -1, ParamTensor::weight, {m.padded_vocab, C}, ParamGroup::head, true, ParamInit::normal,
        true);
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
