// The llmtrain-plan binary: the seeds' example end to end through the command
// line, --json, --write_config read back by `llmtrain --describe`, --run_log, and
// one-line errors for bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "run_command.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using llmtrain::testing::run_command;

namespace {

std::string plan_bin() { return llmtrain::testing::build_dir() + "/bin/llmtrain-plan"; }
std::string src(const std::string& rel) { return llmtrain::testing::source_dir() + "/" + rel; }

// stdout only (stderr to /dev/null), parsed as JSON.
nlohmann::json plan_json(const std::string& args) {
  const auto r = run_command(plan_bin() + " " + args + " --json 2>/dev/null");
  EXPECT_EQ(r.rc, 0) << args << "\n" << r.out;
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST(PlanApp, EvaluatesTheSeedsPairs) {
  auto j = plan_json("--config " + src("inputs/full_llama3_1.5b_optimal.cfg") + " --tokens 101.909e9");
  ASSERT_EQ(j.size(), 1u);
  EXPECT_NEAR(j[0]["expected_loss"].get<double>(), 2.335, 0.002);
  EXPECT_EQ(j[0]["params"].get<int64_t>(), 1544628224);
  j = plan_json("--config " + src("inputs/full_llama3_2.2b_chinchilla.cfg") + " --tokens 61.545e9");
  EXPECT_NEAR(j[0]["expected_loss"].get<double>(), 2.351, 0.002);
  EXPECT_EQ(j[0]["n_layer"].get<int64_t>(), 30);
}

TEST(PlanApp, SearchesTheSeedsBudget) {
  const auto j = plan_json("--flops 1.36e21 --family llama3 --top 5");
  ASSERT_EQ(j.size(), 5u);
  EXPECT_EQ(j[0]["n_layer"].get<int64_t>(), 18);
  EXPECT_EQ(j[0]["n_embd"].get<int64_t>(), 2048);
  EXPECT_EQ(j[0]["flops_per_token_accounting"].get<std::string>(), "mfu");
  EXPECT_NEAR(j[0]["tokens"].get<double>() * j[0]["flops_per_token"].get<double>(), 1.36e21, 1e9);
  for (const char* k : {"params", "non_embedding_params", "tokens", "flops_per_token", "expected_loss",
                        "tokens_per_param", "hours", "gpu_hours"})
    EXPECT_TRUE(j[0].contains(k)) << k;
  const auto six = plan_json("--flops 1.36e21 --family llama3 --flops_per_token 6N --top 1");
  EXPECT_EQ(six[0]["n_layer"].get<int64_t>(), 28);
  // The text table has the same first row.
  const auto r = run_command(plan_bin() + " --flops 1.36e21 --family llama3 --top 3");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("  1     18   2048      16/8   7168     1.545B     1.019B   158.190B"), std::string::npos) << r.out;
}

TEST(PlanApp, WrittenConfigIsAcceptedByDescribe) {
  const auto dir = fs::path(llmtrain::testing::build_dir()) / "test-scratch" / "plan_app";
  fs::create_directories(dir);
  const auto cfg = (dir / "planned.cfg").string();
  fs::remove(cfg);
  auto r = run_command(plan_bin() + " --flops 1e21 --family qwen3 --widths auto --write_config " + cfg);
  ASSERT_EQ(r.rc, 0) << r.out;
  ASSERT_TRUE(fs::exists(cfg));
  r = run_command(llmtrain::testing::build_dir() + "/bin/llmtrain " + cfg + " --describe");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("FLOPs/token"), std::string::npos) << r.out;
}

TEST(PlanApp, RunLogAddsTimes) {
  const auto j = plan_json("--flops 1.36e21 --family llama2 --top 2 --run_log " +
                           src("tests/train/fixtures/run_1gpu.json") + " --gpus 8");
  ASSERT_EQ(j.size(), 2u);
  // At the fixture's FLOP/s per GPU (1e5 tokens/s x 8,341,291,008) on 8 GPUs.
  const double hours = 1.36e21 / (8 * 1e5 * 8341291008.0) / 3600;
  EXPECT_NEAR(j[0]["hours"].get<double>() / hours, 1, 1e-6);
  EXPECT_NEAR(j[0]["gpu_hours"].get<double>(), 8 * j[0]["hours"].get<double>(), 1e-6);
}

TEST(PlanApp, BadInputIsOneLine) {
  // A run log whose training ended without an evaluation.
  const auto dir = fs::path(llmtrain::testing::build_dir()) / "test-scratch" / "plan_app";
  fs::create_directories(dir);
  const auto no_eval = (dir / "no_eval.json").string();
  std::ofstream(no_eval) << nlohmann::json{
      {"startup_info", {{"config", {{"tokens_per_iter", 1024}}}, {"model", {{"num_params", 1e5}}}}},
      {"training_iterations", {{{"iter", 0}}, {{"iter", 1}}}},
      {"eval_results", nlohmann::json::array()}}.dump();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--flops 1e15 --family llama3", "too small"},
      {"--flops 1e21 --family mistral", "vocabulary"},
      {"--flops 1e21 --config " + src("inputs/tiny_llama.cfg") + " --set vocab_size=0", "vocab_size = 0"},
      {"--fit " + no_eval, "no final val loss"},
      {"--flops 1e21", "needs a base shape"},
      {"--tokens 1e9 --family llama3", "needs --config"},
      {"--flops 1e21 --family llama3 --gpus 0", "--gpus must be >= 1, got 0"},  // issue 49: not "8"
  };
  for (const auto& [args, want] : cases) {
    const auto r = run_command(plan_bin() + " " + args);
    EXPECT_EQ(r.rc, 1) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(r.out.rfind("llmtrain-plan: error: ", 0), 0u) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
}
