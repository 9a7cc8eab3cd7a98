// safetensors and the transformers checkpoint format in C++ alone: a round trip
// through write_safetensors / SafetensorsFile, the name map against the parameter
// table, export_hf -> load_hf_checkpoint for every tiny preset, and every kind of
// bad input refused in one line naming the file or tensor, with nothing written
// half. (Parity with transformers itself: tests/interop/test_hf_interop.py.)
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/model/hf.hpp"
#include "llmtrain/model/params.hpp"
#include "llmtrain/model/safetensors.hpp"
#include "llmtrain/model/transformer.hpp"
#include "llmtrain/model/hf_init.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace llmtrain;

namespace {

fs::path scratch(const std::string& name) {
  auto d = llmtrain::testing::scratch_dir("hf_io") / name;
  fs::remove_all(d);
  return d;
}

Config preset_config(const std::string& name) {
  Config c;
  c.load_file(llmtrain::testing::source_dir() + "/inputs/" + name + ".cfg");
  return c;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A hand-made safetensors file: header JSON text, then `data_bytes` zero bytes.
std::string raw_file(const std::string& header, size_t data_bytes, int64_t length_override = -1) {
  std::string s(8, '\0');
  const uint64_t n = length_override >= 0 ? static_cast<uint64_t>(length_override) : header.size();
  std::memcpy(s.data(), &n, 8);
  return s + header + std::string(data_bytes, '\0');
}

// The message of the DataError/ConfigError `f` throws (a failure when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

Transformer make_model(const Config& c, uint64_t seed) {
  Transformer m(ModelConfig::from_config(c, 0));
  m->init_weights(seed);
  return m;
}

std::vector<std::pair<std::string, torch::Tensor>> params_of(Transformer& m) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : m->named_parameters()) out.emplace_back(p.key(), p.value());
  return out;
}

// An exported tiny LLaMA-3 to break in various ways.
fs::path exported_llama3(const std::string& name) {
  const fs::path d = scratch(name);
  Config c = preset_config("tiny_llama3");
  auto m = make_model(c, 1);
  export_hf(d.string(), m->config(), params_of(m), {});
  return d;
}

void rewrite_tensors(const fs::path& file, const std::function<void(std::vector<std::pair<std::string, torch::Tensor>>&)>& edit) {
  std::vector<std::pair<std::string, torch::Tensor>> t;
  {
    SafetensorsFile f(file.string());
    for (const auto& n : f.names()) t.emplace_back(n, f.tensor(n));
  }
  edit(t);
  write_safetensors(file, t, {{"format", "pt"}});
}

void edit_config(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  auto j = nlohmann::json::parse(read_text(dir / "config.json"));
  edit(j);
  write_bytes(dir / "config.json", j.dump());
}

}  // namespace

// ---- safetensors ------------------------------------------------------------------------

TEST(Safetensors, RoundTripKeepsDtypesShapesValuesAndOrder) {
  const fs::path d = scratch("roundtrip");
  fs::create_directories(d);
  torch::manual_seed(0);
  const auto f32 = torch::randn({3, 5});
  const auto bf16 = torch::randn({7}).to(torch::kBFloat16);
  const auto f16 = torch::randn({2, 2, 2}).to(torch::kHalf);
  const auto i64 = torch::arange(10, torch::kInt64).view({2, 5});
  const auto empty = torch::zeros({0, 4});
  write_safetensors(d / "a.safetensors", {{"z.f32", f32}, {"bf16", bf16}, {"f16", f16}, {"ids", i64}, {"e", empty}},
                    {{"format", "pt"}});
  SafetensorsFile f((d / "a.safetensors").string());
  EXPECT_EQ(f.names(), (std::vector<std::string>{"z.f32", "bf16", "f16", "ids", "e"}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.entry("bf16").dtype, "BF16");
  EXPECT_TRUE(torch::equal(f.tensor("z.f32"), f32));
  EXPECT_TRUE(torch::equal(f.tensor("bf16"), bf16));
  EXPECT_TRUE(torch::equal(f.tensor("f16"), f16));
  EXPECT_TRUE(torch::equal(f.tensor("ids"), i64));
  EXPECT_EQ(f.tensor("e").sizes().vec(), (std::vector<int64_t>{0, 4}));
  // The header is padded to 8 bytes, as the Python library writes it.
  uint64_t n = 0;
  std::memcpy(&n, read_text(d / "a.safetensors").data(), 8);
  EXPECT_EQ(n % 8, 0u);
  // No temporary file is left beside it.
  for (const auto& e : fs::directory_iterator(d)) EXPECT_EQ(e.path().filename(), "a.safetensors");
}

TEST(Safetensors, BadFilesAreRefusedNamingFileAndTensor) {
  const fs::path d = scratch("bad");
  fs::create_directories(d);
  struct Case {
    std::string name, bytes, expect;
  };
  const std::string ok_entry = R"("w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]})";
  const std::vector<Case> cases = {
      {"short", std::string(5, '\0'), "shorter than the 8-byte header length"},
      {"past_end", raw_file("{" + ok_entry + "}", 16, 1 << 20), "runs past the end of the file"},
      {"not_json", raw_file("{\"w\": [", 0), "is not valid JSON"},
      {"dtype", raw_file(R"({"w": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}})", 4),
       "tensor 'w': dtype 'F8_E4M3' is not one this reader reads"},
      {"outside", raw_file("{" + ok_entry + "}", 8), "tensor 'w': data_offsets [0, 16] lie outside the data section of 8 bytes"},
      {"size", raw_file(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", 16),
       "tensor 'w': shape [3] of F32 needs 12 bytes but data_offsets [0, 16] hold 16"},
      {"overlap",
       raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12),
       "tensors 'a' [0, 8] and 'b' [4, 12] overlap"},
      {"negative", raw_file(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4),
       "tensor 'w': shape [-1] has an entry that is not a size"},
  };
  for (const auto& c : cases) {
    const fs::path p = d / (c.name + ".safetensors");
    write_bytes(p, c.bytes);
    const std::string msg = error_of([&] { SafetensorsFile f(p.string()); });
    EXPECT_NE(msg.find(p.string()), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
  write_bytes(d / "fine.safetensors", raw_file("{" + ok_entry + "}", 16));
  SafetensorsFile fine((d / "fine.safetensors").string());
  EXPECT_NE(error_of([&] { fine.entry("v"); }).find("has no tensor 'v'"), std::string::npos);
}

// ---- the name map and the format round trip -----------------------------------------

TEST(HfNameMap, EveryParameterOnceWithTheRowsItHas) {
  for (const std::string name : {"tiny_llama", "tiny_llama3", "tiny_qwen3", "tiny_gpt2"}) {
    const ModelConfig m = ModelConfig::from_config(preset_config(name), 0);
    const HfArch arch = hf_arch_for(m);
    const auto table = parameter_table(m);
    const auto map = hf_name_map(m, arch);
    ASSERT_EQ(map.size(), table.size()) << name;
    std::set<std::string> hf_names;
    for (size_t i = 0; i < map.size(); ++i) {
      EXPECT_EQ(map[i].name, table[i].name);
      int64_t rows = 0;
      for (const auto& s : map[i].slices) {
        EXPECT_TRUE(hf_names.insert(s.hf_name).second) << s.hf_name << " used twice";
        rows += s.transpose ? s.hf_shape.at(1) : s.hf_shape.at(0);
        if (table[i].shape.size() == 2)
          EXPECT_EQ(s.transpose ? s.hf_shape.at(0) : s.hf_shape.at(1), table[i].shape[1]) << s.hf_name;
      }
      EXPECT_EQ(rows, table[i].shape[0]) << table[i].name;
    }
    EXPECT_EQ(hf_names.count("lm_head.weight"), m.tie_embeddings ? 0u : 1u) << name;
  }
  const ModelConfig qwen = ModelConfig::from_config(preset_config("tiny_qwen3"), 0);
  EXPECT_EQ(hf_arch_for(qwen), HfArch::qwen3);
  const auto map = hf_name_map(qwen, HfArch::qwen3);
  const auto& qkv = map[2];  // wte, h.0.ln_1, h.0.attn.c_attn
  ASSERT_EQ(qkv.name, "h.0.attn.c_attn.weight");
  ASSERT_EQ(qkv.slices.size(), 3u);
  EXPECT_EQ(qkv.slices[0].hf_name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(qkv.slices[0].hf_shape, (std::vector<int64_t>{4 * 32, 64}));
  EXPECT_EQ(qkv.slices[2].hf_shape, (std::vector<int64_t>{2 * 32, 64}));
}

TEST(HfCheckpoint, ExportThenImportGivesTheSameModelForEveryTinyPreset) {
  for (const std::string name : {"tiny_llama", "tiny_llama3", "tiny_qwen3", "tiny_gpt2"}) {
    const fs::path d = scratch("rt_" + name);
    Config c = preset_config(name);
    auto a = make_model(c, 1);
    const std::string line = export_hf(d.string(), a->config(), params_of(a), {0, "byte", ""});
    EXPECT_NE(line.find("byte tokenizer: tokenizer.json, tokenizer_config.json"), std::string::npos) << line;
    // A fresh config with only init_from: config.json gives back every model key.
    Config fresh;
    fresh.init_from = llmtrain::InitFrom::hf(d.string());
    fresh.block_size = c.block_size;
    apply_hf_config(fresh, {});
    const ModelConfig back = ModelConfig::from_config(fresh, 0);
    EXPECT_EQ(back.arch_string(), a->config().arch_string()) << name;
    EXPECT_EQ(back.num_params(), a->config().num_params());
    EXPECT_EQ(back.rope_theta, a->config().rope_theta);
    EXPECT_EQ(back.norm_eps, a->config().norm_eps);
    auto b = make_model(fresh, 2);
    load_hf_checkpoint(*b, d.string());
    auto pa = a->named_parameters(), pb = b->named_parameters();
    for (const auto& p : pa) EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << name << " " << p.key();
    auto cfg = nlohmann::json::parse(read_text(d / "config.json"));
    EXPECT_EQ(cfg["eos_token_id"], 0);
    EXPECT_EQ(cfg["vocab_size"], a->config().padded_vocab);
  }
}

TEST(HfCheckpoint, PaddedVocabularyRowsAreExportedAndCounted) {
  Config c = preset_config("tiny_gpt2");
  c.vocab_size = 250;
  c.vocab_pad_multiple = 64;  // 250 -> 256 rows
  auto a = make_model(c, 1);
  const fs::path d = scratch("padded");
  export_hf(d.string(), a->config(), params_of(a), {});
  auto cfg = nlohmann::json::parse(read_text(d / "config.json"));
  EXPECT_EQ(cfg["vocab_size"], 256);
  SafetensorsFile f((d / "model.safetensors").string());
  EXPECT_EQ(f.entry("transformer.wte.weight").shape, (std::vector<int64_t>{256, 64}));
  EXPECT_FALSE(f.contains("lm_head.weight"));  // tied
  EXPECT_TRUE(f.contains("transformer.h.0.attn.c_attn.bias"));
  // GPT-2's Conv1D weights are stored (in, out).
  EXPECT_EQ(f.entry("transformer.h.0.mlp.c_fc.weight").shape, (std::vector<int64_t>{64, 256}));
  EXPECT_TRUE(torch::equal(f.tensor("transformer.h.0.mlp.c_fc.weight"),
                           a->named_parameters()["h.0.mlp.c_fc.weight"].t()));
}

// ---- bad checkpoints and configs ------------------------------------------------------------

TEST(HfCheckpoint, BadDirectoriesAreRefusedInOneLine) {
  auto load = [](const fs::path& d) {
    Config c;
    c.init_from = llmtrain::InitFrom::hf(d.string());
    c.block_size = 64;
    apply_hf_config(c, {});
    auto m = make_model(c, 3);
    load_hf_checkpoint(*m, d.string());
  };
  auto expect = [&](const fs::path& d, const std::string& needle, const std::string& names) {
    const std::string msg = error_of([&] { load(d); });
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_NE(msg.find(names), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  };
  const fs::path none = scratch("no_config");
  fs::create_directories(none);
  expect(none, "config.json' is missing", (none / "config.json").string());

  fs::path d = exported_llama3("arch");
  edit_config(d, [](auto& j) { j["architectures"] = {"MistralForCausalLM"}; });
  expect(d, "architecture 'MistralForCausalLM' is not supported", "config.json");

  d = exported_llama3("rope");
  edit_config(d, [](auto& j) {
    j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e4}, {"factor", 4.0}};
  });
  expect(d, "RoPE scaling type 'yarn' is not supported", "config.json");

  d = exported_llama3("rope_v4");
  edit_config(d, [](auto& j) {
    j.erase("rope_parameters");
    j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  });
  expect(d, "RoPE scaling type 'linear' is not supported", "config.json");

  d = exported_llama3("bias");
  edit_config(d, [](auto& j) { j["attention_bias"] = true; });
  expect(d, "attention_bias = true is not supported", "config.json");

  d = exported_llama3("act");
  edit_config(d, [](auto& j) { j["hidden_act"] = "gelu"; });
  expect(d, "hidden_act 'gelu' is not supported", "config.json");

  d = exported_llama3("missing");
  rewrite_tensors(d / "model.safetensors", [](auto& t) {
    t.erase(std::remove_if(t.begin(), t.end(), [](auto& p) { return p.first == "model.layers.1.mlp.up_proj.weight"; }),
            t.end());
  });
  expect(d, "tensor 'model.layers.1.mlp.up_proj.weight' is missing", "shape [224, 64] for 'h.1.mlp.c_fc.weight'");

  d = exported_llama3("shape");
  rewrite_tensors(d / "model.safetensors", [](auto& t) {
    for (auto& p : t)
      if (p.first == "model.layers.0.self_attn.k_proj.weight") p.second = torch::zeros({16, 64});
  });
  expect(d, "tensor 'model.layers.0.self_attn.k_proj.weight' has shape [16, 64]", "needs [32, 64]");

  d = exported_llama3("extra");
  rewrite_tensors(d / "model.safetensors", [](auto& t) {
    t.emplace_back("model.layers.0.self_attn.q_proj.bias", torch::zeros({64}));
  });
  expect(d, "unexpected tensor 'model.layers.0.self_attn.q_proj.bias'", "model.safetensors");

  d = exported_llama3("int");
  rewrite_tensors(d / "model.safetensors", [](auto& t) {
    for (auto& p : t)
      if (p.first == "model.norm.weight") p.second = torch::ones({64}, torch::kInt32);
  });
  expect(d, "tensor 'model.norm.weight' is I32; weights are read from F32, BF16, F16 or F64", "model.safetensors");

  d = exported_llama3("truncated");
  {
    const std::string bytes = read_text(d / "model.safetensors");
    write_bytes(d / "model.safetensors", bytes.substr(0, bytes.size() - 100));
  }
  expect(d, "lie outside the data section", "model.safetensors");

  d = exported_llama3("no_weights");
  fs::remove(d / "model.safetensors");
  expect(d, "has neither model.safetensors nor model.safetensors.index.json", d.string());

  // A config that does not match the model being loaded.
  d = exported_llama3("mismatch");
  Config other = preset_config("tiny_llama");
  auto m = make_model(other, 1);
  EXPECT_NE(error_of([&] { load_hf_checkpoint(*m, d.string()); }).find("n_kv_head = 2, but the model has 4"),
            std::string::npos);
}

TEST(HfCheckpoint, ShardedDirectoriesAreReadAndCheckedThroughTheirIndex) {
  const fs::path d = exported_llama3("sharded");
  // Split model.safetensors into two shards with an index, as save_pretrained does.
  std::vector<std::pair<std::string, torch::Tensor>> a, b;
  nlohmann::json map = nlohmann::json::object();
  {
    SafetensorsFile f((d / "model.safetensors").string());
    size_t i = 0;
    for (const auto& n : f.names()) {
      auto& dst = (i++ % 2 == 0) ? a : b;
      dst.emplace_back(n, f.tensor(n));
      map[n] = &dst == &a ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    }
  }
  fs::remove(d / "model.safetensors");
  write_safetensors(d / "model-00001-of-00002.safetensors", a, {{"format", "pt"}});
  write_safetensors(d / "model-00002-of-00002.safetensors", b, {{"format", "pt"}});
  write_bytes(d / "model.safetensors.index.json", nlohmann::json({{"metadata", {}}, {"weight_map", map}}).dump());
  Config c = preset_config("tiny_llama3");
  auto ref = make_model(c, 1);
  auto m = make_model(c, 5);
  load_hf_checkpoint(*m, d.string());
  for (const auto& p : ref->named_parameters()) EXPECT_TRUE(torch::equal(p.value(), m->named_parameters()[p.key()]));
  fs::remove(d / "model-00002-of-00002.safetensors");
  const std::string msg = error_of([&] { load_hf_checkpoint(*m, d.string()); });
  EXPECT_NE(msg.find("model-00002-of-00002.safetensors' (for tensor"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is missing"), std::string::npos) << msg;
}

TEST(HfConfig, PresetKeysAreReplacedCommandLineContradictionsRefused) {
  const fs::path d = exported_llama3("keys");
  Config c = preset_config("tiny_gpt2");  // every model key differs from the LLaMA-3 checkpoint's
  c.init_from = llmtrain::InitFrom::hf(d.string());
  c.block_size = 64;
  apply_hf_config(c, {"block_size", "learning_rate"});
  EXPECT_EQ(c.norm, llmtrain::NormKind::rmsnorm);
  EXPECT_EQ(c.n_kv_head, 2);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.tie_embeddings, false);

  Config clash = preset_config("tiny_llama3");
  clash.init_from = llmtrain::InitFrom::hf(d.string());
  clash.n_layer = 6;
  const std::string msg = error_of([&] { apply_hf_config(clash, {"n_layer"}); });
  EXPECT_NE(msg.find("config key 'n_layer' = 6 on the command line contradicts"), std::string::npos) << msg;
  EXPECT_NE(msg.find("num_hidden_layers = 4"), std::string::npos) << msg;

  Config agree = preset_config("tiny_llama3");
  agree.init_from = llmtrain::InitFrom::hf(d.string());
  apply_hf_config(agree, {"n_layer", "n_kv_head", "rope_theta"});  // equal values are not contradictions

  Config too_long = preset_config("tiny_llama3");
  too_long.init_from = llmtrain::InitFrom::hf(d.string());
  too_long.block_size = 4096;
  EXPECT_NE(error_of([&] { apply_hf_config(too_long, {}); }).find("exceeds the 128 positions"), std::string::npos);
}

TEST(HfExport, RefusesNonEmptyTargetsAndUnexportableModelsAndLeavesNothing) {
  Config c = preset_config("tiny_llama");
  auto m = make_model(c, 1);
  const fs::path d = scratch("nonempty");
  fs::create_directories(d);
  write_bytes(d / "keep.txt", "x");
  EXPECT_NE(error_of([&] { export_hf(d.string(), m->config(), params_of(m), {}); })
                .find("exists and is not an empty directory"),
            std::string::npos);
  EXPECT_EQ(read_text(d / "keep.txt"), "x");
  // An empty directory is replaced by the export.
  const fs::path empty = scratch("empty");
  fs::create_directories(empty);
  export_hf(empty.string(), m->config(), params_of(m), {});
  EXPECT_TRUE(fs::exists(empty / "config.json"));

  Config ln = preset_config("tiny_llama");
  ln.norm = llmtrain::NormKind::layernorm;
  auto bad = make_model(ln, 1);
  const fs::path never = scratch("never");
  const std::string msg = error_of([&] { check_hf_export_target(never.string(), bad->config()); });
  EXPECT_NE(msg.find("no supported transformers architecture"), std::string::npos) << msg;
  EXPECT_NE(msg.find("norm=layernorm"), std::string::npos) << msg;
  // A failing export (a parameter list that does not fit) leaves neither the target nor a temporary.
  auto params = params_of(m);
  params.pop_back();
  EXPECT_THROW(export_hf(never.string(), m->config(), params, {}), Error);
  EXPECT_FALSE(fs::exists(never));
  for (const auto& e : fs::directory_iterator(never.parent_path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}
