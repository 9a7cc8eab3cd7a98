// The parameter table: every parameter of a Transformer with its name, shape,
// group, weight decay and initialisation rule, computed from ModelConfig alone
// (llm.c's fill_in_parameter_sizes; torchtitan's param_init beside each
// parameter). The parameter count, --describe's breakdown, weight
// initialisation, AdamW's decay split, and the HF name map and checkpoints read
// it; tests check it against the built module's named_parameters() for every preset.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llmtrain/model/model_config.hpp"

namespace llmtrain {

enum class ParamGroup { embedding, position, attention, mlp, norm, head };
const char* to_string(ParamGroup g);

// How init_weights draws a parameter (normal draws from one CPU generator, in
// table order, so every rank and device gets the same numbers for a seed).
enum class ParamInit {
  normal,           // N(0, 0.02): embeddings, q|k|v, MLP input, LM head
  residual_normal,  // N(0, 0.02 / sqrt(2 n_layer)): the projections into the residual stream (c_proj)
  zeros,            // biases
  ones,             // norm weights
};

// What a parameter is, whatever a layout calls it. Names are made from it
// (param_module_name), and the transformers name map reads it: no name is parsed.
enum class ParamRole {
  token_embedding,     // wte
  position_embedding,  // wpe (learned positions)
  attn_norm,           // h.<i>.ln_1: the norm before attention
  qkv,                 // h.<i>.attn.c_attn: fused rows q | k | v
  attn_out,            // h.<i>.attn.c_proj
  q_norm,              // h.<i>.attn.q_norm (QK-norm)
  k_norm,              // h.<i>.attn.k_norm
  mlp_norm,            // h.<i>.ln_2: the norm before the MLP
  mlp_in,              // h.<i>.mlp.c_fc (SwiGLU: fused rows gate | up)
  mlp_out,             // h.<i>.mlp.c_proj
  final_norm,          // ln_f
  lm_head,             // lm_head (untied)
};
// The module's name of a role, inside its block: "attn.c_attn", "ln_f".
const char* param_module_name(ParamRole r);
enum class ParamTensor { weight, bias };
const char* to_string(ParamTensor t);  // "weight" | "bias"

struct ParamSpec {
  std::string name;              // as named_parameters(): "h.3.attn.c_attn.weight" (made from the fields below)
  std::vector<int64_t> shape;
  ParamGroup group = ParamGroup::attention;
  int64_t block = -1;            // transformer block index; -1 outside the blocks
  ParamRole role = ParamRole::qkv;
  ParamTensor tensor = ParamTensor::weight;
  bool decay = true;             // AdamW weight decay: matmul weights and embeddings, not norms or biases
  ParamInit init = ParamInit::normal;
  bool matmul = false;           // takes part in a matmul (the N of the MFU rule; see num_matmul_params)
  int64_t numel() const;
};

// In the module's registration order (the order of named_parameters()).
std::vector<ParamSpec> parameter_table(const ModelConfig& m);

// Parameters by group; total == ModelConfig::num_params().
struct ParamBreakdown {
  int64_t embeddings = 0;  // token table (+ learned positions); a tied head lives here
  int64_t attention = 0;   // q|k|v and output projections (+ biases)
  int64_t mlp = 0;         // FFN projections (+ biases)
  int64_t norms = 0;       // every norm weight/bias, QK-norm included
  int64_t head = 0;        // untied LM head (0 when tied)
  int64_t total = 0;
};
ParamBreakdown param_breakdown(const ModelConfig& m);

}  // namespace llmtrain
