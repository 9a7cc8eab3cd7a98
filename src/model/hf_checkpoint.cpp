// The transformers name map on the parameter table, and checkpoint import/export.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "llmtrain/core/atomic_file.hpp"
#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/model/hf.hpp"
#include "llmtrain/model/params.hpp"
#include "llmtrain/model/safetensors.hpp"
#include "llmtrain/model/transformer.hpp"
#include "llmtrain/tokenizer/tokenizer.hpp"

namespace llmtrain {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- the name map ------------------------------------------------------------------------

namespace {

// GPT-2 (GPT2LMHeadModel) names its modules as we do, under "transformer."
// (lm_head outside it); its Conv1D matrices inside the blocks are stored (in, out).
void gpt2_place(const ParamSpec& spec, HfParam& p) {
  if (spec.role == ParamRole::lm_head) {
    p.slices.push_back({spec.name, spec.shape, false});
    return;
  }
  const std::string hf = spec.block >= 0 ? fmt::format("transformer.h.{}.{}.{}", spec.block,
                                                       param_module_name(spec.role), to_string(spec.tensor))
                                         : fmt::format("transformer.{}.{}", param_module_name(spec.role),
                                                       to_string(spec.tensor));
  if (spec.block >= 0 && spec.shape.size() == 2)
    p.slices.push_back({hf, {spec.shape[1], spec.shape[0]}, true});
  else
    p.slices.push_back({hf, spec.shape, false});
}

// LLaMA / Qwen3 (no biases): q|k|v and gate|up are separate tensors, our row blocks.
void llama_place(const ModelConfig& m, HfArch arch, const ParamSpec& spec, HfParam& p) {
  if (spec.tensor != ParamTensor::weight) return;
  const int64_t H = m.n_head, K = m.n_kv_head, D = m.head_dim, F = m.ffn_hidden;
  const std::string layer = fmt::format("model.layers.{}.", spec.block);
  auto whole = [&](const std::string& hf) { p.slices.push_back({hf, spec.shape, false}); };
  auto rows = [&](const std::string& hf, int64_t n) { p.slices.push_back({hf, {n, spec.shape.at(1)}, false}); };
  switch (spec.role) {
    case ParamRole::token_embedding: whole("model.embed_tokens.weight"); break;
    case ParamRole::position_embedding: break;  // no learned positions there
    case ParamRole::attn_norm: whole(layer + "input_layernorm.weight"); break;
    case ParamRole::qkv:
      rows(layer + "self_attn.q_proj.weight", H * D);
      rows(layer + "self_attn.k_proj.weight", K * D);
      rows(layer + "self_attn.v_proj.weight", K * D);
      break;
    case ParamRole::attn_out: whole(layer + "self_attn.o_proj.weight"); break;
    case ParamRole::q_norm:
      if (arch == HfArch::qwen3) whole(layer + "self_attn.q_norm.weight");
      break;
    case ParamRole::k_norm:
      if (arch == HfArch::qwen3) whole(layer + "self_attn.k_norm.weight");
      break;
    case ParamRole::mlp_norm: whole(layer + "post_attention_layernorm.weight"); break;
    case ParamRole::mlp_in:
      rows(layer + "mlp.gate_proj.weight", F);
      rows(layer + "mlp.up_proj.weight", F);
      break;
    case ParamRole::mlp_out: whole(layer + "mlp.down_proj.weight"); break;
    case ParamRole::final_norm: whole("model.norm.weight"); break;
    case ParamRole::lm_head: whole("lm_head.weight"); break;
  }
}

}  // namespace

std::vector<HfParam> hf_name_map(const ModelConfig& m, HfArch arch) {
  std::vector<HfParam> out;
  for (const ParamSpec& spec : parameter_table(m)) {
    HfParam p{spec.name, spec.shape, {}};
    if (arch == HfArch::gpt2)
      gpt2_place(spec, p);
    else
      llama_place(m, arch, spec, p);
    LLMTRAIN_CHECK(!p.slices.empty(), "{} has no place for parameter '{}' ({})", to_string(arch), spec.name,
                   m.arch_string());
    out.push_back(std::move(p));
  }
  return out;
}

// ---- import ------------------------------------------------------------------------------

namespace {

std::string shape_text(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// config.json must describe the model being loaded (the trainer builds it from
// the same keys; a library caller may not have).
void check_model_matches(const ModelConfig& m, const HfModelKeys& hf) {
  Config c;
  for (const auto& k : hf.keys) c.set(k.key, k.value);
  ModelConfig want = ModelConfig::from_config(c, 0);
  struct Field { const char* key; std::string ours, theirs; };
  const Field fields[] = {
      {"vocab_size (embedding rows)", std::to_string(m.padded_vocab), std::to_string(want.padded_vocab)},
      {"n_layer", std::to_string(m.n_layer), std::to_string(want.n_layer)},
      {"n_head", std::to_string(m.n_head), std::to_string(want.n_head)},
      {"n_kv_head", std::to_string(m.n_kv_head), std::to_string(want.n_kv_head)},
      {"n_embd", std::to_string(m.n_embd), std::to_string(want.n_embd)},
      {"head_dim", std::to_string(m.head_dim), std::to_string(want.head_dim)},
      {"ffn_hidden", std::to_string(m.ffn_hidden), std::to_string(want.ffn_hidden)},
      {"norm", to_string(m.norm), to_string(want.norm)},
      {"pos_encoding", to_string(m.pos_encoding), to_string(want.pos_encoding)},
      {"ffn", to_string(m.ffn), to_string(want.ffn)},
      {"qk_norm", m.qk_norm ? "True" : "False", want.qk_norm ? "True" : "False"},
      {"bias", m.bias ? "True" : "False", want.bias ? "True" : "False"},
      {"tie_embeddings", m.tie_embeddings ? "True" : "False", want.tie_embeddings ? "True" : "False"},
      {"norm_eps", fmt::format("{}", m.norm_eps), fmt::format("{}", want.norm_eps)},
      {"rope_theta", fmt::format("{}", m.pos_encoding == PosEncoding::rope ? m.rope_theta : 0.0),
       fmt::format("{}", want.pos_encoding == PosEncoding::rope ? want.rope_theta : 0.0)},
  };
  for (const auto& f : fields)
    if (f.ours != f.theirs)
      throw ConfigError(fmt::format("{} describes a {} with {} = {}, but the model has {} (set init_from=hf:DIR so "
                                    "that the model keys come from config.json)",
                                    hf.config_path, to_string(hf.arch), f.key, f.theirs, f.ours));
  if (m.pos_encoding == PosEncoding::learned && m.block_size != hf.max_positions)
    throw ConfigError(fmt::format("{} has n_positions = {}, but the model's block_size is {}", hf.config_path,
                                  hf.max_positions, m.block_size));
}

// Non-parameter tensors some checkpoints carry (old GPT-2 causal-mask buffers,
// old LLaMA inverse frequencies): skipped.
bool is_known_buffer(const std::string& name) {
  auto ends_with = [&](const char* s) {
    const std::string t(s);
    return name.size() >= t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0;
  };
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias") || ends_with("rotary_emb.inv_freq");
}

// The tensors of a checkpoint directory, single file or sharded, by name.
struct CheckpointFiles {
  std::map<std::string, std::shared_ptr<SafetensorsFile>> files;  // by path
  std::map<std::string, std::string> where;                        // tensor -> path

  explicit CheckpointFiles(const std::string& dir) {
    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    const fs::path single = fs::path(dir) / "model.safetensors";
    if (fs::exists(index)) {
      std::ifstream in(index);
      json j;
      try {
        j = json::parse(in);
      } catch (const json::exception& e) {
        throw DataError(fmt::format("{}: not valid JSON ({})", index.string(), e.what()));
      }
      if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        throw DataError(fmt::format("{}: no \"weight_map\" object (tensor name -> shard file)", index.string()));
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it.value().is_string())
          throw DataError(fmt::format("{}: weight_map['{}'] is not a file name", index.string(), it.key()));
        const std::string file = it.value().get<std::string>();
        if (file.empty() || file.find('/') != std::string::npos)
          throw DataError(fmt::format("{}: weight_map['{}'] = '{}' is not a plain file name", index.string(),
                                      it.key(), file));
        const std::string path = (fs::path(dir) / file).string();
        if (!files.count(path)) {
          if (!fs::exists(path))
            throw DataError(fmt::format("{}: shard '{}' (for tensor '{}') is missing", index.string(), path,
                                        it.key()));
          files[path] = std::make_shared<SafetensorsFile>(path);
        }
        where[it.key()] = path;
      }
      // Tensors a shard holds that the index does not list are still checked below.
      for (const auto& [path, f] : files)
        for (const auto& n : f->names())
          if (!where.count(n)) where[n] = path;
    } else if (fs::exists(single)) {
      auto f = std::make_shared<SafetensorsFile>(single.string());
      files[single.string()] = f;
      for (const auto& n : f->names()) where[n] = single.string();
    } else {
      std::string hint;
      if (fs::exists(fs::path(dir) / "pytorch_model.bin"))
        hint = "; pytorch_model.bin is not read (save with save_pretrained(DIR, safe_serialization=True))";
      throw DataError(fmt::format("'{}' has neither model.safetensors nor model.safetensors.index.json{}", dir,
                                  hint));
    }
  }
};

}  // namespace

void load_hf_checkpoint(TransformerImpl& model, const std::string& dir) {
  const ModelConfig& m = model.config();
  const HfModelKeys hf = read_hf_config(dir);
  check_model_matches(m, hf);
  CheckpointFiles ck(dir);
  auto map = hf_name_map(m, hf.arch);
  // GPT-2 checkpoints saved from GPT2Model (the original "gpt2") have no "transformer." prefix.
  std::string strip;
  if (hf.arch == HfArch::gpt2 && !ck.where.count("transformer.wte.weight") && ck.where.count("wte.weight"))
    strip = "transformer.";
  auto file_name = [&](const std::string& hf_name) {
    return !strip.empty() && hf_name.rfind(strip, 0) == 0 ? hf_name.substr(strip.size()) : hf_name;
  };
  auto named = model.named_parameters(/*recurse=*/true);
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  for (const HfParam& p : map) {
    torch::Tensor* dst = named.find(p.name);
    LLMTRAIN_CHECK(dst != nullptr, "the model has no parameter '{}'", p.name);
    std::vector<torch::Tensor> parts;
    for (const HfSlice& s : p.slices) {
      const std::string name = file_name(s.hf_name);
      auto it = ck.where.find(name);
      if (it == ck.where.end())
        throw DataError(fmt::format("'{}': tensor '{}' is missing ({} needs it with shape {} for '{}')", dir, name,
                                    to_string(hf.arch), shape_text(s.hf_shape), p.name));
      const SafetensorsFile& f = *ck.files.at(it->second);
      const SafetensorsEntry& e = f.entry(name);
      if (e.shape != s.hf_shape)
        throw DataError(fmt::format("{}: tensor '{}' has shape {}, but the {} that {} describes needs {}",
                                    f.path(), name, shape_text(e.shape), to_string(hf.arch), hf.config_path,
                                    shape_text(s.hf_shape)));
      if (e.dtype != "F32" && e.dtype != "BF16" && e.dtype != "F16" && e.dtype != "F64")
        throw DataError(fmt::format("{}: tensor '{}' is {}; weights are read from F32, BF16, F16 or F64", f.path(),
                                    name, e.dtype));
      auto t = f.tensor(name).to(torch::kFloat);
      parts.push_back(s.transpose ? t.t() : t);
      used.insert(name);
    }
    auto full = parts.size() == 1 ? parts[0] : torch::cat(parts, 0);
    dst->copy_(full);
  }
  for (const auto& [name, path] : ck.where) {
    if (used.count(name) || is_known_buffer(name)) continue;
    if (m.tie_embeddings && name == "lm_head.weight") continue;  // tied: transformers ignores it too
    throw DataError(fmt::format("{}: unexpected tensor '{}': {} as {} describes it has no such parameter (a bias or "
                                "option llmtrain does not implement?)",
                                path, name, to_string(hf.arch), hf.config_path));
  }
}

// ---- export ------------------------------------------------------------------------------

std::vector<std::pair<std::string, torch::Tensor>> to_hf_tensors(
    const ModelConfig& m, HfArch arch, const std::vector<std::pair<std::string, torch::Tensor>>& ours) {
  std::map<std::string, torch::Tensor> by_name(ours.begin(), ours.end());
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const HfParam& p : hf_name_map(m, arch)) {
    auto it = by_name.find(p.name);
    LLMTRAIN_CHECK(it != by_name.end(), "to_hf_tensors: parameter '{}' was not given", p.name);
    auto t = it->second.detach().to(torch::kCPU, torch::kFloat);
    LLMTRAIN_CHECK(t.sizes().vec() == p.shape, "to_hf_tensors: parameter '{}' has shape {}, expected {}", p.name,
                   shape_text(t.sizes().vec()), shape_text(p.shape));
    int64_t row = 0;
    for (const HfSlice& s : p.slices) {
      const int64_t n = s.transpose ? s.hf_shape.at(1) : s.hf_shape.at(0);
      auto part = t.narrow(0, row, n);
      row += n;
      out.emplace_back(s.hf_name, (s.transpose ? part.t() : part).contiguous());
    }
  }
  return out;
}

void check_hf_export_target(const std::string& dir, const ModelConfig& m) {
  hf_arch_for(m);  // ConfigError when no architecture fits
  std::error_code ec;
  if (dir.empty()) throw ConfigError("config key 'export_hf' is empty");
  if (fs::exists(dir, ec) && (!fs::is_directory(dir, ec) || !fs::is_empty(dir, ec)))
    throw ConfigError(fmt::format("config key 'export_hf': '{}' exists and is not an empty directory; export never "
                                  "overwrites: choose a new directory",
                                  dir));
}

std::string export_hf(const std::string& dir, const ModelConfig& m,
                      const std::vector<std::pair<std::string, torch::Tensor>>& params, const HfExportInfo& info) {
  check_hf_export_target(dir, m);
  const HfArch arch = hf_arch_for(m);
  const fs::path target = fs::absolute(fs::path(dir)).lexically_normal();
  const fs::path parent = target.parent_path();
  fs::create_directories(parent);
  const fs::path tmp = parent / fmt::format(".{}.tmp.{}", target.filename().string(), static_cast<long>(::getpid()));
  fs::remove_all(tmp);
  fs::create_directory(tmp);
  struct RemoveOnFailure {
    fs::path p;
    bool armed = true;
    ~RemoveOnFailure() {
      std::error_code ec;
      if (armed) fs::remove_all(p, ec);
    }
  } guard{tmp};

  const auto tensors = to_hf_tensors(m, arch, params);
  int64_t bytes = 0;
  for (const auto& [name, t] : tensors) bytes += t.numel() * t.element_size();
  write_safetensors(tmp / "model.safetensors", tensors, {{"format", "pt"}});
  write_file_atomic(tmp / "config.json", hf_config_json(m, info.eos_id).dump(2) + "\n");
  std::string tokenizer_note;
  if (info.tokenizer.empty()) {
    tokenizer_note = "no tokenizer files (the data's tokenizer is unknown)";
  } else {
    const HfTokenizerFiles tf = hf_tokenizer_files(info.tokenizer, info.tokenizer_hash);
    std::vector<std::string> names;
    for (const auto& [name, text] : tf.files) {
      write_file_atomic(tmp / name, text);
      names.push_back(name);
    }
    tokenizer_note = names.empty() ? fmt::format("no tokenizer files: {}", tf.why_not)
                                   : fmt::format("{} tokenizer: {}", info.tokenizer, fmt::join(names, ", "));
  }
  publish_directory(tmp, target);  // an empty target directory is replaced; anything else was refused above
  guard.armed = false;
  return fmt::format("export_hf: wrote {} ({}, {} tensors, {:.1f} MB of F32; {})", target.string(), to_string(arch),
                     tensors.size(), static_cast<double>(bytes) / 1e6, tokenizer_note);
}

}  // namespace llmtrain
