// Hugging Face transformers checkpoints: import (init_from=hf:DIR) and export
// (export_hf=DIR) for LlamaForCausalLM, Qwen3ForCausalLM and GPT2LMHeadModel.
// docs/interop.md has the commands and the parity method.
//
// One name map, built on the parameter table (model/params.hpp), says where
// every parameter of ours lives in the transformers layout (torchtitan's
// state_dict_adapter.py is the model): our fused c_attn is the row blocks
// q_proj | k_proj | v_proj, our SwiGLU c_fc is gate_proj | up_proj, GPT-2's
// Conv1D weights are stored (in, out) and are transposed. RoPE is rotate-half
// on both sides, so no permutation is needed.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/types.h>

#include "llmtrain/model/model_config.hpp"

namespace llmtrain {

class TransformerImpl;

enum class HfArch { llama, qwen3, gpt2 };
// "LlamaForCausalLM", "Qwen3ForCausalLM", "GPT2LMHeadModel".
const char* to_string(HfArch a);

// One llmtrain config key set by a config.json.
struct HfKey {
  std::string key;     // ours, e.g. "n_layer"
  std::string value;   // as Config::set takes it
  std::string source;  // what config.json says, e.g. "num_hidden_layers = 4"
};
// What a transformers config.json says, as llmtrain config keys.
struct HfModelKeys {
  std::string config_path;      // DIR/config.json
  HfArch arch = HfArch::llama;
  std::vector<HfKey> keys;      // every model key (+ block_size for GPT-2's learned positions)
  int64_t max_positions = 0;    // max_position_embeddings / n_positions
};

// Reads DIR/config.json (model/hf_init.hpp applies it to the run's config for
// init_from=hf:DIR). DataError when it is missing or not JSON; ConfigError
// naming the option for an architecture or option llmtrain does not implement
// (RoPE scaling types other than default, attention/MLP biases in LLaMA/Qwen3,
// sliding windows, another activation, quantized checkpoints ...).
HfModelKeys read_hf_config(const std::string& dir);

// The transformers architecture a model exports as; ConfigError naming the
// options that no supported architecture has (e.g. norm=layernorm with RoPE).
HfArch hf_arch_for(const ModelConfig& m);

// config.json for `m` (vocab_size = m.padded_vocab: the padding rows are exported,
// as nanoGPT's 50304), with eos/bos ids when eos_id >= 0.
nlohmann::json hf_config_json(const ModelConfig& m, int64_t eos_id);

// Where one of our parameters lives in the transformers layout: the row blocks
// of our tensor, in order, each a whole tensor there (transposed for GPT-2's Conv1D).
struct HfSlice {
  std::string hf_name;
  std::vector<int64_t> hf_shape;  // its shape in the transformers file
  bool transpose = false;         // ours = hf^T
};
struct HfParam {
  std::string name;               // ours, as named_parameters()
  std::vector<int64_t> shape;     // ours
  std::vector<HfSlice> slices;    // concatenated along dim 0 give ours
};
// One entry per parameter_table(m) entry, in table order.
std::vector<HfParam> hf_name_map(const ModelConfig& m, HfArch arch);

// Our tensors by name (parameters, or their gradients) -> the transformers
// tensors by name, in name-map order: row blocks split, Conv1D transposed, fp32
// CPU contiguous. Error when one is missing or has another shape.
std::vector<std::pair<std::string, torch::Tensor>> to_hf_tensors(
    const ModelConfig& m, HfArch arch, const std::vector<std::pair<std::string, torch::Tensor>>& ours);

// Loads DIR (model.safetensors, or the shards named by model.safetensors.index.json)
// into `model`'s parameters (F32, BF16 or F16 converted to the parameters' dtype).
// Checks config.json against the model's config first. DataError naming the file
// and tensor for a missing tensor, a wrong shape, an unexpected tensor or a bad file.
void load_hf_checkpoint(TransformerImpl& model, const std::string& dir);

// Refuses (ConfigError) an export target that exists and is not an empty
// directory, and a model no transformers architecture has: checked at start-up,
// before any training.
void check_hf_export_target(const std::string& dir, const ModelConfig& m);

struct HfExportInfo {
  int64_t eos_id = -1;            // the data's document separator (-1: unknown)
  std::string tokenizer;          // the data index's tokenizer name ("" = none)
  std::string tokenizer_hash;     // ... and the SHA-256 of its file
};
// Writes DIR: config.json, model.safetensors (F32, the padded embedding rows
// included) and the tokenizer files when the data's tokenizer is one llmtrain
// can write (tokenizer/tokenizer.hpp's hf_tokenizer_files). Everything goes to
// a temporary sibling directory that is renamed to DIR at the end. `params`:
// named_parameters() with full values (FSDP: materialized). Returns a line
// saying what was written (and which tokenizer files, or why none).
std::string export_hf(const std::string& dir, const ModelConfig& m,
                      const std::vector<std::pair<std::string, torch::Tensor>>& params, const HfExportInfo& info);

}  // namespace llmtrain
