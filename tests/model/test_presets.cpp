// The presets in inputs/: full-size parameter counts by arithmetic (never
// allocated), the arithmetic checked against built tiny models of each family,
// attention backends and their fallback, FSDP's sharding plan of each preset
// (describe_model's tests: tests/prediction/test_describe.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include <torch/torch.h>
#include <torch/version.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/distributed/sharding_plan.hpp"
#include "llmtrain/prediction/memory_model.hpp"  // defines: estimate_memory (against the built tiny models)
#include "llmtrain/model/activations.hpp"
#include "llmtrain/model/params.hpp"
#include "llmtrain/model/transformer.hpp"
#include "model/layers.hpp"
#include "test_util.hpp"

using llmtrain::Config;
using llmtrain::ModelConfig;
using llmtrain::Transformer;

namespace {

using llmtrain::testing::load_preset;
using llmtrain::ComputeDtype;

ModelConfig preset_model(const std::string& name) { return ModelConfig::from_config(load_preset(name), 0); }

// The issue quotes counts in billions rounded to three decimals.
double billions_3(int64_t n) { return std::round(static_cast<double>(n) / 1e6) / 1e3; }

const char* const kTiny[] = {"tiny_llama", "tiny_llama3", "tiny_qwen3", "tiny_gpt2"};

// Group of a built parameter by its name, as param_breakdown groups them.
std::string group_of(const std::string& name) {
  if (name.rfind("wte.", 0) == 0 || name.rfind("wpe.", 0) == 0) return "embeddings";
  if (name.rfind("lm_head.", 0) == 0) return "head";
  if (name.find("ln_") != std::string::npos || name.find("_norm.") != std::string::npos) return "norms";
  if (name.find(".attn.") != std::string::npos) return "attention";
  if (name.find(".mlp.") != std::string::npos) return "mlp";
  return "?" + name;
}

}  // namespace

TEST(Presets, Llama136bHasExactlyTheQuotedParameters) {
  const auto m = preset_model("full_llama_1.36b");
  EXPECT_EQ(m.num_params(), 1294159104);
  EXPECT_EQ(m.arch_string(), "18L-18H-2304D-6144ff-RoPE-RMS-SwiGLU-PreNorm");
  EXPECT_EQ(m.block_size, 2048);
  // By hand: N = 18 * (4 * 2304^2 + 3 * 2304 * 6144) + 32000 * 2304 = 1,220,345,856;
  // 6N + 12 * 18 * 18 * 128 * 2048.
  EXPECT_EQ(m.num_matmul_params(), 1220345856);
  EXPECT_DOUBLE_EQ(m.flops_per_token(), 6.0 * 1220345856 + 12.0 * 18 * 18 * 128 * 2048);
}

TEST(Presets, FullPresetsMatchTheIssueFigures) {
  EXPECT_DOUBLE_EQ(billions_3(preset_model("full_llama3_1.5b_optimal").num_params()), 1.545);
  EXPECT_DOUBLE_EQ(billions_3(preset_model("full_llama3_2.2b_chinchilla").num_params()), 2.224);
  const auto qwen = preset_model("full_qwen3_1.8b_optimal");
  EXPECT_EQ(qwen.padded_vocab, 151808);  // 151643 padded to a multiple of 256
  EXPECT_DOUBLE_EQ(billions_3(qwen.num_params()), 1.830);
  EXPECT_TRUE(qwen.qk_norm);
  EXPECT_EQ(qwen.head_dim, 128);
  const auto gpt2 = preset_model("full_gpt2_1.36b");
  EXPECT_EQ(gpt2.padded_vocab, 50304);
  EXPECT_EQ(gpt2.arch_string(), "18L-18H-2304D-9216ff-LearnedPos-LN-GELU-Bias-Tied-PreNorm");
  // 18 * (12 d^2 + 13 d) + 50304 d + 2048 d + 2d, d = 2304 (tied head counted once).
  const int64_t d = 2304;
  EXPECT_EQ(gpt2.num_params(), 18 * (12 * d * d + 13 * d) + 50304 * d + 2048 * d + 2 * d);
  for (const char* name : {"full_llama_1.36b", "full_llama3_1.5b_optimal", "full_llama3_2.2b_chinchilla",
                           "full_qwen3_1.8b_optimal", "full_gpt2_1.36b"}) {
    const auto m = preset_model(name);
    EXPECT_EQ(llmtrain::param_breakdown(m).total, m.num_params()) << name;
  }
}

TEST(Presets, ArithmeticMatchesBuiltTinyModelOfEachFamily) {
  for (const char* name : kTiny) {
    const auto m = preset_model(name);
    Transformer model(m);
    std::map<std::string, int64_t> by_group;
    int64_t total = 0;
    for (auto& item : model->named_parameters()) {
      by_group[group_of(item.key())] += item.value().numel();
      total += item.value().numel();
    }
    EXPECT_EQ(by_group.size(), m.tie_embeddings ? 4u : 5u) << name;  // nothing unclassified
    const auto pb = llmtrain::param_breakdown(m);
    EXPECT_EQ(total, m.num_params()) << name;
    EXPECT_EQ(by_group["embeddings"], pb.embeddings) << name;
    EXPECT_EQ(by_group["attention"], pb.attention) << name;
    EXPECT_EQ(by_group["mlp"], pb.mlp) << name;
    EXPECT_EQ(by_group["norms"], pb.norms) << name;
    EXPECT_EQ(by_group["head"], pb.head) << name;
    // Tiny means tiny: a few hundred thousand parameters (as docs/model.md lists).
    const std::map<std::string, int64_t> documented = {
        {"tiny_llama", 295488}, {"tiny_llama3", 254528}, {"tiny_qwen3", 279360}, {"tiny_gpt2", 224640}};
    EXPECT_EQ(total, documented.at(name)) << name;
    // Weight and gradient bytes of the estimate are the built model's bytes.
    // Persistent buckets (use_cuda_graphs=True): held at the peak.
    llmtrain::MemoryInputs in;
    in.dtype = ComputeDtype::float32;
    in.batch_size = 8;
    in.world_size = 4;
    in.attention = llmtrain::AttentionBackend::manual;
    in.persistent_grads = true;
    const auto est = llmtrain::estimate_memory(m, in);
    EXPECT_DOUBLE_EQ(est[0].weights, 4.0 * total);
    // + autograd's gradients of the blocks and the token embedding during backward
    const auto units = llmtrain::fsdp_unit_params(m);  // embedding, blocks..., head
    int64_t in_blocks = 0;
    for (size_t u = 1; u + 1 < units.size(); ++u) in_blocks += units[u];
    const double handover = 4.0 * (in_blocks + m.padded_vocab * m.n_embd);
    EXPECT_DOUBLE_EQ(est[0].gradients, 4.0 * total + handover);
    EXPECT_DOUBLE_EQ(est[0].optimizer, 8.0 * total);
    EXPECT_DOUBLE_EQ(est[1].optimizer, 8.0 * total / 4);
    // Buckets made during the backward (the default): the peak is the start
    // of the backward without them, or its end with all of them and no activation.
    in.persistent_grads = false;
    const auto made = llmtrain::estimate_memory(m, in);
    EXPECT_DOUBLE_EQ(made[0].total(), std::max(est[0].total() - 4.0 * total,
                                               est[0].weights + est[0].optimizer + 4.0 * total + handover));
  }
}

TEST(Presets, TinyFamiliesTrainForwardBackward) {
  for (const char* name : kTiny) {
    auto c = load_preset(name);
    const auto m = ModelConfig::from_config(c, 0);
    Transformer model(m);
    model->init_weights(static_cast<uint64_t>(c.seed));
    auto gen = at::detail::createCPUGenerator(3);
    auto x = torch::randint(m.vocab_size, {2, m.block_size}, gen, torch::kLong);
    auto y = torch::randint(m.vocab_size, {2, m.block_size}, gen, torch::kLong);
    auto loss = model->loss(x, y);
    EXPECT_NEAR(loss.item<double>(), std::log(256.0), 0.1) << name;
    loss.backward();
    double gnorm2 = 0;
    for (auto& p : model->parameters()) gnorm2 += p.grad().pow(2).sum().item<double>();
    EXPECT_TRUE(std::isfinite(gnorm2) && gnorm2 > 0) << name;
  }
}

TEST(Attention, FallbackChainOnCpuSaysWhyAndReportsTheKernelUsed) {
  using llmtrain::model_detail::plan_attention;
  using llmtrain::AttentionBackend;
  const auto manual = plan_attention(AttentionBackend::manual, torch::kCPU, torch::kFloat, 4, 2, 16, 64, 0.0);
  EXPECT_EQ(manual.backend, AttentionBackend::manual);
  EXPECT_TRUE(manual.unavailable.empty());
  EXPECT_EQ(manual.label(), "manual");
  // flash_attn_3 (cuDNN) and flash_attn_2 (flash) are CUDA kernels: one line each, then SDPA.
  const auto fa3 = plan_attention(AttentionBackend::flash_attn_3, torch::kCPU, torch::kFloat, 16, 8, 128, 2048, 0.0);
  EXPECT_EQ(fa3.backend, AttentionBackend::sdpa);
  ASSERT_EQ(fa3.unavailable.size(), 2u);
  EXPECT_NE(fa3.unavailable[0].find("flash_attn_3"), std::string::npos) << fa3.unavailable[0];
  EXPECT_NE(fa3.unavailable[1].find("flash_attn_2"), std::string::npos) << fa3.unavailable[1];
  for (const auto& line : fa3.unavailable) EXPECT_EQ(line.find('\n'), std::string::npos) << "one line";
  // SDPA's dispatcher names the kernel it runs (its fused CPU flash kernel here).
  EXPECT_EQ(fa3.kernel_used.rfind("SDPA ", 0), 0u) << fa3.kernel_used;
  EXPECT_NE(fa3.label().find("sdpa ("), std::string::npos) << fa3.label();
  const auto fa2 = plan_attention(AttentionBackend::flash_attn_2, torch::kCPU, torch::kBFloat16, 16, 8, 128, 2048, 0.0);
  EXPECT_EQ(fa2.backend, AttentionBackend::sdpa);
  EXPECT_EQ(fa2.unavailable.size(), 1u);
  ModelConfig m = preset_model("tiny_llama");
  m.attention_backend = AttentionBackend::flash_attn_2;
  Transformer model(m);
  model->plan_attention(torch::kCPU, torch::kFloat);
  EXPECT_EQ(model->attention_backend_used(), AttentionBackend::sdpa);
  EXPECT_NE(model->attention_kernel_used().find("SDPA"), std::string::npos);
  EXPECT_THROW(llmtrain::option_from_string<llmtrain::AttentionBackend>("flash"), llmtrain::ConfigError);
}

TEST(Attention, AvailableBackendsAgree) {
  // Every request resolves to sdpa or manual on CPU; both must compute the same model.
  const std::vector<std::string> backends = {"flash_attn_3", "flash_attn_2", "sdpa", "manual"};  // as users type them
  ModelConfig m = preset_model("tiny_qwen3");  // GQA + QK-norm
  auto gen = at::detail::createCPUGenerator(9);
  auto x = torch::randint(m.vocab_size, {2, 64}, gen, torch::kLong);
  torch::Tensor ref;
  for (const auto& b : backends) {
    m.attention_backend = llmtrain::option_from_string<llmtrain::AttentionBackend>(b);
    Transformer model(m);
    model->init_weights(5);
    auto out = model->forward(x);
    if (!ref.defined())
      ref = out;
    else
      EXPECT_TRUE(torch::allclose(out, ref, 1e-4, 1e-4)) << b;
  }
}

// FSDP's sharding plan from ModelConfig alone (full presets, never allocated):
// the embedding, each block, the final norm with the head; every parameter in
// one unit. LLaMA-3 1.5B's largest unit is one 128256 x 2048 table (263M), not
// the 525M root of embedding + head that FSDP once gathered.
TEST(ShardingPlan, UnitsAreEmbeddingBlocksAndHeadForEveryPreset) {
  using llmtrain::UnitKind;
  for (const char* name : {"full_llama_1.36b", "full_llama3_1.5b_optimal", "full_qwen3_1.8b_optimal",
                           "full_gpt2_1.36b", "tiny_gpt2", "tiny_llama3"}) {
    SCOPED_TRACE(name);
    const auto m = preset_model(name);
    const auto table = llmtrain::parameter_table(m);
    const auto plan = llmtrain::fsdp_sharding_plan(m);
    ASSERT_EQ(plan.size(), static_cast<size_t>(m.n_layer + 2));
    std::vector<int> seen(table.size(), 0);
    int64_t total = 0;
    for (size_t k = 0; k < plan.size(); ++k) {
      const auto& u = plan[k];
      const UnitKind want = k == 0 ? UnitKind::embedding : k + 1 == plan.size() ? UnitKind::head : UnitKind::block;
      EXPECT_EQ(u.kind, want) << k;
      EXPECT_EQ(u.block, want == UnitKind::block ? static_cast<int64_t>(k) - 1 : -1);
      int64_t n = 0;
      for (int i : u.params) {
        ++seen.at(static_cast<size_t>(i));
        n += table[static_cast<size_t>(i)].numel();
        EXPECT_EQ(table[static_cast<size_t>(i)].block, u.block) << table[static_cast<size_t>(i)].name;
      }
      EXPECT_EQ(u.numel, n);
      EXPECT_EQ(u.padded_numel(8) % 8, 0);
      EXPECT_LT(u.padded_numel(8) - u.numel, 8);
      total += n;
    }
    for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << table[i].name;
    EXPECT_EQ(total, m.num_params());
    // A tied table belongs to the embedding unit, held through the step; the
    // head unit is then the final norm alone.
    const int64_t C = m.n_embd, V = m.padded_vocab;
    const int64_t norm = m.norm == llmtrain::NormKind::layernorm && m.bias ? 2 * C : C;
    EXPECT_EQ(plan.front().held_through_step, m.tie_embeddings);
    EXPECT_EQ(plan.back().numel, m.tie_embeddings ? norm : norm + V * C);
    EXPECT_EQ(plan.front().numel, V * C + (m.pos_encoding == llmtrain::PosEncoding::learned ? m.block_size * C : 0));
  }
  const auto plan = llmtrain::fsdp_sharding_plan(preset_model("full_llama3_1.5b_optimal"));
  int64_t largest = 0;
  for (const auto& u : plan) largest = std::max(largest, u.numel);
  EXPECT_EQ(largest, 128256LL * 2048 + 2048);  // the head: LM head + final norm
  EXPECT_LT(largest, 264'000'000);
}
