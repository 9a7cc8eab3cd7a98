// StepProfiler around real training steps of the project's Transformer on CPU
// (forward, backward, clipping, AdamW): the trace file of the steps asked for,
// valid Chrome-trace JSON with the project's fused op as llmtrain:: ops, and the
// report's count of it (record/step_profiler.hpp, record/profile_report.hpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "llmtrain/core/error.hpp"             // defines: Error
#include "llmtrain/model/transformer.hpp"      // defines: Transformer
#include "llmtrain/record/profile_report.hpp"  // defines: load_profile
#include "llmtrain/record/step_profiler.hpp"   // defines: StepProfiler
#include "test_util.hpp"                       // defines: scratch_dir

using namespace llmtrain;
namespace fs = std::filesystem;

namespace {

// A small LLaMA (RMSNorm, RoPE, SwiGLU, grouped-query attention) with the fused
// LM head + loss (compile=True's path), so the trace holds an llmtrain:: op.
ModelConfig small_llama(int64_t layers) {
  ModelConfig m;
  m.vocab_size = 200;
  m.padded_vocab = 256;
  m.block_size = 32;
  m.n_layer = layers;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.n_embd = 64;
  m.head_dim = 16;
  m.ffn_hidden = 192;
  m.fused_loss = true;
  return m;
}

// Runs iterations [0, iters) of a training step (forward, backward, the global
// norm clipped to 1, AdamW) with `prof` around each, as the trainer's loop does.
void train(const ModelConfig& cfg, StepProfiler& prof, int64_t iters) {
  torch::manual_seed(7);
  Transformer model(cfg);
  model->init_weights(7);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
  const auto x = torch::randint(cfg.vocab_size, {4, cfg.block_size}, torch::kLong);
  const auto y = torch::randint(cfg.vocab_size, {4, cfg.block_size}, torch::kLong);
  for (int64_t iter = 0; iter < iters; ++iter) {
    prof.before_step(iter);
    opt.zero_grad();
    const auto loss = model->loss(x, y);
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
    prof.after_step(iter);
  }
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);  // throws on anything that is not JSON
}

}  // namespace

TEST(StepProfiler, ParsesProfileSteps) {
  EXPECT_TRUE(parse_profile_steps("").empty());
  const auto one = parse_profile_steps("5");
  EXPECT_EQ(one.first, 5);
  EXPECT_EQ(one.last, 5);
  const auto two = parse_profile_steps("5-6");
  EXPECT_EQ(two.first, 5);
  EXPECT_EQ(two.last, 6);
  EXPECT_TRUE(two.contains(6) && !two.contains(7) && !two.contains(4));
  for (const char* bad : {"x", "5-", "-5", "6-5", "5,6", "1.5"}) {
    try {
      parse_profile_steps(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("profile_steps"), std::string::npos) << e.what();
    }
  }
}

TEST(StepProfiler, TracesTheStepsAskedForAsChromeTrace) {
  const fs::path out = llmtrain::testing::scratch_dir("step_profiler_trace");
  fs::remove_all(out / "profile");
  std::string path;
  {
    StepProfiler prof("1-2", /*rank=*/3, out.string(), torch::kCPU);
    EXPECT_TRUE(prof.enabled());
    train(small_llama(2), prof, 4);
    path = prof.path();
  }
  EXPECT_EQ(path, (out / "profile" / "rank3_steps1-2.pt.trace.json").string());
  ASSERT_TRUE(fs::exists(path));
  EXPECT_EQ(std::distance(fs::directory_iterator(out / "profile"), fs::directory_iterator()), 1);

  const auto trace = read_json(path);
  ASSERT_TRUE(trace.contains("traceEvents") && trace["traceEvents"].is_array());
  int64_t fused = 0, fused_backward = 0, with_shapes = 0;
  std::set<std::string> steps;
  for (const auto& e : trace["traceEvents"]) {
    const std::string name = e.value("name", "");
    if (name == "llmtrain::fused_linear_cross_entropy") ++fused;
    if (name == "llmtrain::fused_linear_cross_entropy_backward") ++fused_backward;
    if (name.rfind("ProfilerStep#", 0) == 0) steps.insert(name);
    if (e.value("cat", "") == "cpu_op" && e.contains("args") && e["args"].contains("Input Dims")) ++with_shapes;
  }
  EXPECT_EQ(fused, 2);  // one per traced step: iterations 1 and 2, not 0 or 3
  EXPECT_EQ(fused_backward, 2);
  EXPECT_EQ(steps, (std::set<std::string>{"ProfilerStep#1", "ProfilerStep#2"}));
  EXPECT_GT(with_shapes, 0);  // shapes recorded

  const auto a = load_profile(path);
  ASSERT_EQ(a.steps.size(), 2u);
  for (const auto& s : a.steps) {
    EXPECT_GT(s.ops, 50) << s.name;
    EXPECT_GT(s.ops_by_category.count("GEMM") ? s.ops_by_category.at("GEMM") : 0, 0) << s.name;
    EXPECT_GT(s.ops_by_category.count("attention") ? s.ops_by_category.at("attention") : 0, 0) << s.name;
    // (torch::optim::AdamW runs per-parameter element-wise ops: no optimizer category here.)
    EXPECT_EQ(s.ops_by_name.at("llmtrain::fused_linear_cross_entropy"), 1) << s.name;
    EXPECT_EQ(s.ops_by_name.at("llmtrain::fused_linear_cross_entropy_backward"), 1) << s.name;
    EXPECT_GE(s.host_syncs, 1) << s.name;  // the fused loss reads its count of valid targets
    EXPECT_FALSE(s.has_kernels);
  }
  EXPECT_EQ(a.steps[0].ops, a.steps[1].ops);  // the same step twice
  EXPECT_EQ(a.steps[0].ops_by_name, a.steps[1].ops_by_name);
}

// A run that ends inside the range (max_iters, a stop signal) still leaves its trace.
TEST(StepProfiler, SavesWhenTheRunEndsInsideTheRange) {
  const fs::path out = llmtrain::testing::scratch_dir("step_profiler_early_end");
  fs::remove_all(out / "profile");
  std::string path;
  {
    StepProfiler prof("2-9", 0, out.string(), torch::kCPU);
    train(small_llama(1), prof, 4);
    path = prof.path();
  }
  const auto a = load_profile(path);
  EXPECT_EQ(a.steps.size(), 2u);  // iterations 2 and 3
}

TEST(StepProfiler, NothingWithoutProfileSteps) {
  const fs::path out = llmtrain::testing::scratch_dir("step_profiler_off");
  fs::remove_all(out / "profile");
  {
    StepProfiler prof("", 0, out.string(), torch::kCPU);
    EXPECT_FALSE(prof.enabled());
    train(small_llama(1), prof, 2);
  }
  EXPECT_FALSE(fs::exists(out / "profile"));
}

// The per-block count of issue 46's convention: a 4-layer and a 2-layer model of
// the same shape, forward + backward + optimizer; printed for the reader.
TEST(StepProfiler, OpsPerBlock) {
  int64_t ops[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    const fs::path out = llmtrain::testing::scratch_dir(fmt::format("step_profiler_block_{}", i));
    fs::remove_all(out / "profile");
    std::string path;
    {
      StepProfiler prof("1", 0, out.string(), torch::kCPU);
      train(small_llama(i == 0 ? 4 : 2), prof, 2);
      path = prof.path();
    }
    ops[i] = load_profile(path).steps.at(0).ops;
  }
  const int64_t per_block = (ops[0] - ops[1]) / 2;
  std::cout << fmt::format("top-level ops per step: 4 layers {}, 2 layers {}: {} per block "
                           "(forward + backward + torch::optim::AdamW, fp32, CPU)\n",
                           ops[0], ops[1], per_block);
  EXPECT_EQ((ops[0] - ops[1]) % 2, 0);  // each block runs the same ops
  EXPECT_GT(per_block, 20);
}
