// transformers config.json <-> llmtrain model keys (LLaMA, Qwen3, GPT-2).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "llmtrain/core/error.hpp"
#include "llmtrain/core/log.hpp"
#include "llmtrain/model/hf.hpp"

namespace llmtrain {

namespace fs = std::filesystem;
using nlohmann::json;

const char* to_string(HfArch a) {
  switch (a) {
    case HfArch::llama: return "LlamaForCausalLM";
    case HfArch::qwen3: return "Qwen3ForCausalLM";
    case HfArch::gpt2: return "GPT2LMHeadModel";
  }
  return "?";
}

namespace {

constexpr const char* kSupported = "LlamaForCausalLM, Qwen3ForCausalLM, GPT2LMHeadModel";

std::string text(double v) { return fmt::format("{}", v); }
std::string text(int64_t v) { return std::to_string(v); }
std::string text(bool v) { return v ? "True" : "False"; }

// Reads config.json values with transformers' class defaults for absent (or
// null) keys, so a file means here what it means to from_pretrained.
class ConfigReader {
 public:
  ConfigReader(const json& j, std::string path) : j_(j), path_(std::move(path)) {}

  bool has(const char* k) const { return j_.contains(k) && !j_[k].is_null(); }
  int64_t integer(const char* k, int64_t def) const {
    if (!has(k)) return def;
    if (!j_[k].is_number_integer() || j_[k].get<int64_t>() < 0)
      throw DataError(fmt::format("{}: '{}' is {}, expected a non-negative integer", path_, k, j_[k].dump()));
    return j_[k].get<int64_t>();
  }
  double number(const char* k, double def) const {
    if (!has(k)) return def;
    if (!j_[k].is_number()) throw DataError(fmt::format("{}: '{}' is {}, expected a number", path_, k, j_[k].dump()));
    return j_[k].get<double>();
  }
  bool boolean(const char* k, bool def) const {
    if (!has(k)) return def;
    if (!j_[k].is_boolean()) throw DataError(fmt::format("{}: '{}' is {}, expected true or false", path_, k, j_[k].dump()));
    return j_[k].get<bool>();
  }
  std::string string(const char* k, const std::string& def) const {
    if (!has(k)) return def;
    if (!j_[k].is_string()) throw DataError(fmt::format("{}: '{}' is {}, expected a string", path_, k, j_[k].dump()));
    return j_[k].get<std::string>();
  }
  // An option llmtrain does not implement: ConfigError naming it.
  [[noreturn]] void refuse(const std::string& option, const std::string& why) const {
    throw ConfigError(fmt::format("{}: {} is not supported: {}", path_, option, why));
  }
  const json& raw() const { return j_; }

 private:
  const json& j_;
  std::string path_;
};

// rope_parameters (transformers 5) or rope_theta + rope_scaling (4.x): only the
// default (unscaled) RoPE is implemented.
double read_rope_theta(const ConfigReader& r) {
  json params = json::object();
  if (r.has("rope_parameters")) params = r.raw()["rope_parameters"];
  else if (r.has("rope_scaling")) params = r.raw()["rope_scaling"];
  if (!params.is_object()) r.refuse(fmt::format("rope_parameters {}", params.dump()), "expected an object");
  std::string type = "default";
  for (const char* k : {"rope_type", "type"})
    if (params.contains(k) && params[k].is_string()) {
      type = params[k].get<std::string>();
      break;
    }
  if (type != "default")
    r.refuse(fmt::format("RoPE scaling type '{}'", type),
             "llmtrain implements the default (unscaled) rotary embedding only (rope_type 'default')");
  if (params.contains("partial_rotary_factor") && params["partial_rotary_factor"].is_number() &&
      params["partial_rotary_factor"].get<double>() != 1.0)
    r.refuse(fmt::format("partial_rotary_factor = {}", params["partial_rotary_factor"].dump()),
             "llmtrain rotates the whole head");
  if (params.contains("rope_theta") && params["rope_theta"].is_number()) return params["rope_theta"].get<double>();
  return r.number("rope_theta", 10000.0);
}

void add(HfModelKeys& out, const std::string& key, const std::string& value, const std::string& source) {
  out.keys.push_back({key, value, source});
}

void read_llama_like(const ConfigReader& r, HfModelKeys& out) {
  const bool qwen3 = out.arch == HfArch::qwen3;
  // LlamaConfig / Qwen3Config defaults (transformers 5).
  const int64_t V = r.integer("vocab_size", qwen3 ? 151936 : 32000);
  const int64_t C = r.integer("hidden_size", 4096);
  const int64_t F = r.integer("intermediate_size", qwen3 ? 22016 : 11008);
  const int64_t L = r.integer("num_hidden_layers", 32);
  const int64_t H = r.integer("num_attention_heads", 32);
  const int64_t K = r.integer("num_key_value_heads", H);
  if (H == 0) throw DataError(fmt::format("{}: num_attention_heads is 0", out.config_path));
  const int64_t D = r.integer("head_dim", qwen3 ? 128 : C / H);
  const double eps = r.number("rms_norm_eps", 1e-6);
  const double theta = read_rope_theta(r);
  const std::string act = r.string("hidden_act", "silu");
  if (act != "silu") r.refuse(fmt::format("hidden_act '{}'", act), "the SwiGLU MLP uses silu");
  if (r.boolean("attention_bias", false))
    r.refuse("attention_bias = true", "llmtrain's LLaMA/Qwen3 blocks have no biases in q/k/v/o");
  if (r.boolean("mlp_bias", false)) r.refuse("mlp_bias = true", "llmtrain's SwiGLU MLP has no biases");
  if (qwen3) {
    if (r.boolean("use_sliding_window", false))
      r.refuse("use_sliding_window = true", "llmtrain attends over the whole block (full causal attention)");
  }
  if (r.has("layer_types") && r.raw()["layer_types"].is_array())
    for (const auto& t : r.raw()["layer_types"])
      if (!t.is_string() || t.get<std::string>() != "full_attention")
        r.refuse(fmt::format("layer_types entry {}", t.dump()), "every layer uses full causal attention");
  const bool tie = r.boolean("tie_word_embeddings", false);
  out.max_positions = r.integer("max_position_embeddings", qwen3 ? 32768 : 2048);

  add(out, "vocab_size", text(V), fmt::format("vocab_size = {}", V));
  add(out, "vocab_pad_multiple", "1", "vocab_size (the embedding has exactly that many rows)");
  add(out, "n_layer", text(L), fmt::format("num_hidden_layers = {}", L));
  add(out, "n_head", text(H), fmt::format("num_attention_heads = {}", H));
  add(out, "n_kv_head", text(K), fmt::format("num_key_value_heads = {}", K));
  add(out, "n_embd", text(C), fmt::format("hidden_size = {}", C));
  add(out, "head_dim", text(D), fmt::format("head_dim = {}", D));
  add(out, "ffn_hidden", text(F), fmt::format("intermediate_size = {}", F));
  add(out, "norm", to_string(NormKind::rmsnorm), "RMSNorm");
  add(out, "pos_encoding", to_string(PosEncoding::rope), "rotary embeddings");
  add(out, "ffn", to_string(FfnKind::swiglu), "SwiGLU (silu)");
  add(out, "qk_norm", text(qwen3), qwen3 ? "Qwen3's q_norm/k_norm" : "no QK-norm");
  add(out, "rope_theta", text(theta), fmt::format("rope_theta = {}", theta));
  add(out, "norm_eps", text(eps), fmt::format("rms_norm_eps = {}", eps));
  add(out, "bias", "False", "no biases");
  add(out, "tie_embeddings", text(tie), fmt::format("tie_word_embeddings = {}", tie ? "true" : "false"));
}

void read_gpt2(const ConfigReader& r, HfModelKeys& out) {
  // GPT2Config defaults.
  const int64_t V = r.integer("vocab_size", 50257);
  const int64_t T = r.integer("n_positions", 1024);
  const int64_t C = r.integer("n_embd", 768);
  const int64_t L = r.integer("n_layer", 12);
  const int64_t H = r.integer("n_head", 12);
  const int64_t F = r.integer("n_inner", 4 * C);
  const double eps = r.number("layer_norm_epsilon", 1e-5);
  if (H == 0 || C % H != 0)
    throw DataError(fmt::format("{}: n_embd = {} is not divisible by n_head = {}", out.config_path, C, H));
  const std::string act = r.string("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu_fast")
    r.refuse(fmt::format("activation_function '{}'", act),
             "llmtrain's GELU is the tanh approximation (gelu_new, gelu_pytorch_tanh, gelu_fast)");
  if (!r.boolean("scale_attn_weights", true))
    r.refuse("scale_attn_weights = false", "attention scores are always scaled by 1/sqrt(head_dim)");
  if (r.boolean("scale_attn_by_inverse_layer_idx", false))
    r.refuse("scale_attn_by_inverse_layer_idx = true", "attention scores are scaled by 1/sqrt(head_dim) only");
  if (r.boolean("add_cross_attention", false)) r.refuse("add_cross_attention = true", "llmtrain is decoder-only");
  const bool tie = r.boolean("tie_word_embeddings", true);
  out.max_positions = T;

  add(out, "vocab_size", text(V), fmt::format("vocab_size = {}", V));
  add(out, "vocab_pad_multiple", "1", "vocab_size (the embedding has exactly that many rows)");
  add(out, "n_layer", text(L), fmt::format("n_layer = {}", L));
  add(out, "n_head", text(H), fmt::format("n_head = {}", H));
  add(out, "n_kv_head", text(H), fmt::format("n_head = {} (no grouped-query attention)", H));
  add(out, "n_embd", text(C), fmt::format("n_embd = {}", C));
  add(out, "head_dim", text(C / H), fmt::format("n_embd / n_head = {}", C / H));
  add(out, "ffn_hidden", text(F), fmt::format("n_inner = {}", F));
  add(out, "norm", to_string(NormKind::layernorm), "LayerNorm");
  add(out, "pos_encoding", to_string(PosEncoding::learned), "learned positions (wpe)");
  add(out, "ffn", to_string(FfnKind::gelu), "GELU MLP");
  add(out, "qk_norm", "False", "no QK-norm");
  add(out, "norm_eps", text(eps), fmt::format("layer_norm_epsilon = {}", eps));
  add(out, "bias", "True", "biases in every linear layer and LayerNorm");
  add(out, "tie_embeddings", text(tie), fmt::format("tie_word_embeddings = {}", tie ? "true" : "false"));
  // The position table has n_positions rows: the sequence length is part of the model.
  add(out, "block_size", text(T), fmt::format("n_positions = {}", T));
}

}  // namespace

HfModelKeys read_hf_config(const std::string& dir) {
  if (!fs::is_directory(dir))
    throw DataError(fmt::format("transformers model directory '{}' does not exist", dir));
  HfModelKeys out;
  out.config_path = (fs::path(dir) / "config.json").string();
  std::ifstream in(out.config_path);
  if (!in)
    throw DataError(fmt::format("'{}' is missing: a transformers model directory has config.json beside "
                                "model.safetensors (save_pretrained writes both)",
                                out.config_path));
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw DataError(fmt::format("{}: not valid JSON ({})", out.config_path, e.what()));
  }
  if (!j.is_object()) throw DataError(fmt::format("{}: not a JSON object", out.config_path));
  ConfigReader r(j, out.config_path);
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty()) {
    if (j["architectures"].size() > 1 || !j["architectures"][0].is_string())
      throw ConfigError(fmt::format("{}: architectures {} names more than one model class; expected one of {}",
                                    out.config_path, j["architectures"].dump(), kSupported));
    arch = j["architectures"][0].get<std::string>();
  }
  const std::string model_type = r.string("model_type", "");
  struct Known { const char* cls; const char* type; HfArch a; };
  const Known known[] = {{"LlamaForCausalLM", "llama", HfArch::llama},
                         {"Qwen3ForCausalLM", "qwen3", HfArch::qwen3},
                         {"GPT2LMHeadModel", "gpt2", HfArch::gpt2}};
  const Known* hit = nullptr;
  for (const auto& k : known)
    if (arch.empty() ? model_type == k.type : arch == k.cls) hit = &k;
  if (!hit)
    throw ConfigError(fmt::format("{}: architecture '{}' is not supported (supported: {})", out.config_path,
                                  arch.empty() ? "model_type " + model_type : arch, kSupported));
  if (!model_type.empty() && model_type != hit->type)
    throw ConfigError(fmt::format("{}: architectures says {} but model_type is '{}' (expected '{}')",
                                  out.config_path, hit->cls, model_type, hit->type));
  out.arch = hit->a;
  if (r.has("quantization_config"))
    r.refuse("quantization_config", "llmtrain reads floating-point checkpoints (F32, BF16, F16) only");
  if (out.arch == HfArch::gpt2) read_gpt2(r, out);
  else read_llama_like(r, out);
  return out;
}

HfArch hf_arch_for(const ModelConfig& m) {
  std::vector<std::string> gpt2_misses, llama_misses;
  if (m.norm != NormKind::layernorm) gpt2_misses.push_back("norm=rmsnorm");
  if (m.pos_encoding != PosEncoding::learned) gpt2_misses.push_back("pos_encoding=rope");
  if (m.ffn != FfnKind::gelu) gpt2_misses.push_back("ffn=swiglu");
  if (!m.bias) gpt2_misses.push_back("bias=False");
  if (m.qk_norm) gpt2_misses.push_back("qk_norm=True");
  if (m.n_kv_head != m.n_head) gpt2_misses.push_back(fmt::format("n_kv_head={} != n_head={}", m.n_kv_head, m.n_head));
  if (m.head_dim * m.n_head != m.n_embd)
    gpt2_misses.push_back(fmt::format("head_dim={} x n_head={} != n_embd={}", m.head_dim, m.n_head, m.n_embd));
  if (m.norm != NormKind::rmsnorm) llama_misses.push_back("norm=layernorm");
  if (m.pos_encoding != PosEncoding::rope) llama_misses.push_back("pos_encoding=learned");
  if (m.ffn != FfnKind::swiglu) llama_misses.push_back("ffn=gelu");
  if (m.bias) llama_misses.push_back("bias=True");
  if (gpt2_misses.empty()) return HfArch::gpt2;
  if (llama_misses.empty()) return m.qk_norm ? HfArch::qwen3 : HfArch::llama;
  throw ConfigError(fmt::format(
      "export_hf: no supported transformers architecture has this model ({}): LlamaForCausalLM/Qwen3ForCausalLM "
      "cannot have {}; GPT2LMHeadModel cannot have {}",
      m.arch_string(), fmt::join(llama_misses, ", "), fmt::join(gpt2_misses, ", ")));
}

json hf_config_json(const ModelConfig& m, int64_t eos_id) {
  const HfArch arch = hf_arch_for(m);
  json j = json::object();
  j["architectures"] = {to_string(arch)};
  const json eos = eos_id >= 0 ? json(eos_id) : json(nullptr);
  if (arch == HfArch::gpt2) {
    j["model_type"] = "gpt2";
    j["vocab_size"] = m.padded_vocab;
    j["n_positions"] = m.block_size;
    j["n_embd"] = m.n_embd;
    j["n_layer"] = m.n_layer;
    j["n_head"] = m.n_head;
    j["n_inner"] = m.ffn_hidden;
    j["activation_function"] = "gelu_new";
    j["layer_norm_epsilon"] = m.norm_eps;
    j["resid_pdrop"] = m.dropout;
    j["embd_pdrop"] = m.dropout;
    j["attn_pdrop"] = m.dropout;
    j["scale_attn_weights"] = true;
    j["scale_attn_by_inverse_layer_idx"] = false;
    j["reorder_and_upcast_attn"] = false;
    j["add_cross_attention"] = false;
  } else {
    const bool qwen3 = arch == HfArch::qwen3;
    j["model_type"] = qwen3 ? "qwen3" : "llama";
    j["vocab_size"] = m.padded_vocab;
    j["hidden_size"] = m.n_embd;
    j["intermediate_size"] = m.ffn_hidden;
    j["num_hidden_layers"] = m.n_layer;
    j["num_attention_heads"] = m.n_head;
    j["num_key_value_heads"] = m.n_kv_head;
    j["head_dim"] = m.head_dim;
    j["hidden_act"] = "silu";
    j["max_position_embeddings"] = m.block_size;
    j["rms_norm_eps"] = m.norm_eps;
    // transformers 5 reads rope_parameters; 4.x reads rope_theta.
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", m.rope_theta}};
    j["rope_theta"] = m.rope_theta;
    j["attention_bias"] = false;
    j["attention_dropout"] = m.dropout;
    if (qwen3) {
      j["use_sliding_window"] = false;
      j["sliding_window"] = nullptr;
      j["max_window_layers"] = m.n_layer;
    } else {
      j["mlp_bias"] = false;
    }
  }
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["bos_token_id"] = nullptr;
  j["eos_token_id"] = eos;
  j["pad_token_id"] = nullptr;
  j["dtype"] = "float32";
  j["use_cache"] = true;
  return j;
}

}  // namespace llmtrain
