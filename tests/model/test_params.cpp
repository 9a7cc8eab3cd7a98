// The parameter table against the built module, for every preset in inputs/:
// the same names in the same order with the same shapes, the decay split of the
// table equal to the rule it encodes (matmul weights and embeddings decay,
// norms and biases do not), the count equal to ModelConfig::num_params(), and
// init_weights following each entry's rule. Full presets are built with two
// layers (every kind of entry, the real widths and vocabularies) and their
// full-depth tables checked by arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <torch/torch.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/model/params.hpp"
#include "llmtrain/model/transformer.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using llmtrain::ModelConfig;
using llmtrain::ParamGroup;
using llmtrain::ParamInit;

namespace {

std::vector<std::string> presets() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(llmtrain::testing::source_dir()) / "inputs"))
    if (e.path().extension() == ".cfg" && e.path().stem() != "quickstart") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

ModelConfig preset(const std::string& name) {
  llmtrain::Config c;
  c.load_file(llmtrain::testing::source_dir() + "/inputs/" + name + ".cfg");
  return ModelConfig::from_config(c, 256);
}

TEST(ParameterTable, EveryPresetHasFiveFullPresetsAmongThem) {
  int full = 0;
  for (const auto& p : presets()) full += p.rfind("full_", 0) == 0;
  EXPECT_EQ(full, 5);
}

TEST(ParameterTable, EqualsNamedParametersOfEveryPreset) {
  for (const auto& name : presets()) {
    ModelConfig full = preset(name);
    ModelConfig m = full;
    m.n_layer = std::min<int64_t>(m.n_layer, 2);
    const auto table = llmtrain::parameter_table(m);
    llmtrain::Transformer model(m);
    const auto named = model->named_parameters().pairs();  // (name, tensor) in registration order
    ASSERT_EQ(named.size(), table.size()) << name;
    int64_t total = 0;
    for (size_t i = 0; i < table.size(); ++i) {
      const auto& spec = table[i];
      const auto& item = named[i];
      EXPECT_EQ(item.first, spec.name) << name << " entry " << i;
      EXPECT_EQ(item.second.sizes().vec(), spec.shape) << name << " " << spec.name;
      // The rule the table encodes: matrices (matmul weights, embeddings) decay.
      EXPECT_EQ(spec.decay, item.second.dim() >= 2) << name << " " << spec.name;
      EXPECT_EQ(spec.block >= 0, spec.name.rfind("h.", 0) == 0) << name << " " << spec.name;
      total += spec.numel();
    }
    EXPECT_EQ(total, m.num_params()) << name;
    // Full depth: the blocks repeat, so the table scales by arithmetic.
    const auto full_table = llmtrain::parameter_table(full);
    int64_t per_block = 0, outside = 0, full_total = 0;
    for (const auto& s : table) {
      if (s.block == 0) per_block += s.numel();
      if (s.block < 0) outside += s.numel();
    }
    for (const auto& s : full_table) full_total += s.numel();
    EXPECT_EQ(full_total, outside + full.n_layer * per_block) << name;
    EXPECT_EQ(full_total, full.num_params()) << name;
    EXPECT_EQ(llmtrain::param_breakdown(full).total, full.num_params()) << name;
  }
}

TEST(ParameterTable, InitWeightsFollowsEachRule) {
  ModelConfig m = preset("tiny_gpt2");  // biases and LayerNorm biases too
  m.n_layer = 4;
  llmtrain::Transformer model(m);
  model->init_weights(3);
  const auto named = model->named_parameters();
  const double resid = 0.02 / std::sqrt(2.0 * 4);
  std::set<ParamInit> seen;
  for (const auto& spec : llmtrain::parameter_table(m)) {
    const auto& t = named[spec.name];
    seen.insert(spec.init);
    switch (spec.init) {
      case ParamInit::zeros: EXPECT_EQ(t.abs().max().item<float>(), 0.f) << spec.name; break;
      case ParamInit::ones: EXPECT_TRUE(torch::all(t == 1).item<bool>()) << spec.name; break;
      case ParamInit::normal:
      case ParamInit::residual_normal: {
        const double want = spec.init == ParamInit::normal ? 0.02 : resid;
        const double got = t.std().item<double>();
        EXPECT_NEAR(got, want, 0.15 * want) << spec.name;
        EXPECT_LT(std::abs(t.mean().item<double>()), 0.2 * want) << spec.name;
        break;
      }
    }
  }
  EXPECT_EQ(seen.size(), 4u) << "tiny_gpt2 exercises every rule";
}

TEST(ParameterTable, GroupsAndDecaySplitOfTheModel) {
  for (const char* name : {"tiny_llama", "tiny_qwen3", "tiny_gpt2"}) {
    const ModelConfig m = preset(name);
    llmtrain::Transformer model(m);
    std::set<const void*> decay;
    for (const auto& t : model->decay_parameters()) decay.insert(t.unsafeGetTensorImpl());
    const auto named = model->named_parameters();
    for (const auto& spec : llmtrain::parameter_table(m)) {
      EXPECT_EQ(decay.count(named[spec.name].unsafeGetTensorImpl()) == 1, spec.decay) << name << " " << spec.name;
      if (spec.name.find("_norm.") != std::string::npos || spec.name.find("ln_") != std::string::npos)
        EXPECT_EQ(spec.group, ParamGroup::norm) << spec.name;
    }
    EXPECT_EQ(model->decay_parameters().size() + model->no_decay_parameters().size(), named.size()) << name;
  }
}

}  // namespace
