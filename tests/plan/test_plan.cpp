// The planner's library: the loss law against the Python system's two (N, D)
// pairs (docs/planning.md), the search (its budget, monotone in the budget),
// its FLOP accounting against --describe, the fit on synthetic losses, run-log readers and the bad inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/prediction/describe.hpp"
#include "llmtrain/prediction/memory_model.hpp"
#include "llmtrain/model/params.hpp"
#include "llmtrain/plan/planner.hpp"
#include "llmtrain/plan/scaling_law.hpp"
#include "test_util.hpp"

using namespace llmtrain;
namespace fs = std::filesystem;

namespace {

using llmtrain::testing::load_preset;

std::string fixture(const std::string& name) {
  return (fs::path(llmtrain::testing::source_dir()) / "tests/train/fixtures" / name).string();
}

// The message of the exception `f` throws as E ("" if none).
template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

// A minimal run log: N parameters, `iters` records of `tokens_per_iter` tokens,
// the given eval_results.
std::string write_log(const std::string& name, double params, int iters, double tokens_per_iter,
                      const nlohmann::json& evals) {
  nlohmann::json j;
  j["startup_info"] = {{"config", {{"tokens_per_iter", tokens_per_iter}}},
                       {"model", {{"num_params", params}, {"flops_per_token", 6 * params}}}};
  j["training_iterations"] = nlohmann::json::array();
  for (int i = 0; i < iters; ++i) j["training_iterations"].push_back({{"iter", i}, {"tokens", tokens_per_iter}});
  j["eval_results"] = evals;
  j["errors"] = nlohmann::json::array();
  j["summary"] = nlohmann::json::object();
  const auto p = llmtrain::testing::scratch_dir("plan") / name;
  std::ofstream(p) << j.dump();
  return p.string();
}

}  // namespace

// ---- the loss formula ---------------------------------------------------------------

TEST(PlanLaw, ChinchillaReproducesThePythonSystemsLosses) {
  const ScalingLaw law = ScalingLaw::chinchilla();
  // The presets' exact parameter counts with the Python system's token counts.
  const auto opt = plan_evaluate(load_preset("full_llama3_1.5b_optimal"), 101.909e9, FlopAccounting::mfu, law);
  const auto chin = plan_evaluate(load_preset("full_llama3_2.2b_chinchilla"), 61.545e9, FlopAccounting::mfu, law);
  EXPECT_EQ(opt.params, 1544628224);
  EXPECT_EQ(chin.params, 2224154624);
  EXPECT_NEAR(opt.loss, 2.335, 0.002);
  EXPECT_NEAR(chin.loss, 2.351, 0.002);
  // By hand: 1.69 + 406.4 / N^0.34 + 410.7 / D^0.28.
  EXPECT_NEAR(law.loss(1e9, 2e10), 1.69 + 406.4 / std::pow(1e9, 0.34) + 410.7 / std::pow(2e10, 0.28), 1e-12);
}

TEST(PlanLaw, ParseTakesFiveNumbers) {
  const auto l = ScalingLaw::parse("1.5,100,200,0.3,0.25");
  EXPECT_DOUBLE_EQ(l.E, 1.5);
  EXPECT_DOUBLE_EQ(l.beta, 0.25);
  EXPECT_NE(error_of<ConfigError>([] { ScalingLaw::parse("1,2,3"); }).find("five numbers"), std::string::npos);
  EXPECT_NE(error_of<ConfigError>([] { ScalingLaw::parse("1,2,x,4,5"); }).find("'x' is not a number"),
            std::string::npos);
}

// ---- the search -----------------------------------------------------------------------

TEST(PlanSearch, PythonSystemsBudgetGivesThe18LayerPreset) {
  SearchOptions o;
  o.flops = 1.36e21;
  const auto r = plan_search(plan_family_config("llama3"), o);
  ASSERT_FALSE(r.candidates.empty());
  EXPECT_EQ(r.shapes_searched, 128u);
  EXPECT_FALSE(r.best_at_edge);
  const Candidate& best = r.candidates.front();
  EXPECT_EQ(best.n_layer, 18);
  // The best shape is the preset's, key for key.
  const Config preset = load_preset("full_llama3_1.5b_optimal");
  for (const auto& k : Config::key_names()) EXPECT_EQ(best.config.get(k), preset.get(k)) << k;
  // D = C / (6N + 12LHQT) of that shape.
  const ModelConfig m = ModelConfig::from_config(preset, 0);
  EXPECT_DOUBLE_EQ(best.tokens, 1.36e21 / m.flops_per_token());
  EXPECT_NEAR(best.tokens, 158.19e9, 0.01e9);
  for (size_t i = 1; i < r.candidates.size(); ++i) EXPECT_LE(best.loss, r.candidates[i].loss);
}

TEST(PlanSearch, SixNAccountingPrefersDeeperShapes) {
  SearchOptions o;
  o.flops = 1.36e21;
  o.accounting = FlopAccounting::six_n;
  const auto r = plan_search(plan_family_config("llama3"), o);
  const Candidate& best = r.candidates.front();
  EXPECT_EQ(best.n_layer, 28);
  EXPECT_DOUBLE_EQ(best.flops_per_token, 6.0 * static_cast<double>(best.params));
  // The Python system's 101.909B is C / (6 x all parameters) of the 30-layer shape.
  Candidate l30 = *std::find_if(r.candidates.begin(), r.candidates.end(), [](const Candidate& c) { return c.n_layer == 30; });
  EXPECT_NEAR(l30.tokens / 1e9, 101.909, 0.005);
}

TEST(PlanSearch, LargerBudgetGivesLargerOptimum) {
  for (const std::string fam : {"llama3", "gpt2"}) {
    for (bool widths : {false, true}) {
      const Config base = plan_family_config(fam);
      double first_params = 0, last_params = 0, last_tokens = 0, last_loss = 1e9;
      for (double c : {1e19, 1e20, 1e21, 1e22, 1e23}) {
        SearchOptions o;
        o.flops = c;
        if (widths) o.widths = plan_auto_widths(base);
        const auto best = plan_search(base, o).candidates.front();
        // Shapes are discrete: two budgets may share the best shape, never go smaller.
        EXPECT_GE(static_cast<double>(best.params), last_params) << fam << " at " << c;
        EXPECT_GT(best.tokens, last_tokens) << fam << " at " << c;
        EXPECT_LT(best.loss, last_loss) << fam << " at " << c;
        if (first_params == 0) first_params = static_cast<double>(best.params);
        last_params = static_cast<double>(best.params), last_tokens = best.tokens, last_loss = best.loss;
      }
      EXPECT_GT(last_params, 10 * first_params) << fam;
    }
  }
}

TEST(PlanSearch, TokensPerParamConstraints) {
  const Config base = plan_family_config("llama3");
  SearchOptions o;
  o.flops = 1.36e21;
  o.max_tokens_per_param = 60;
  auto r = plan_search(base, o);
  for (const auto& c : r.candidates) EXPECT_LE(c.tokens_per_param, 60.0);
  // Loss grows with depth past the optimum: the best under the cap is the shallowest allowed.
  EXPECT_GT(r.candidates.front().tokens_per_param, 55.0);
  o.max_tokens_per_param.reset();
  o.tokens_per_param = 20;
  r = plan_search(base, o);
  const double d0 = std::fabs(std::log(r.candidates.front().tokens_per_param / 20));
  for (const auto& c : r.candidates) EXPECT_LE(d0, std::fabs(std::log(c.tokens_per_param / 20)) + 1e-12);
  EXPECT_NEAR(r.candidates.front().tokens_per_param, 20, 1.0);
}

TEST(PlanSearch, WidthsScaleHeadsAndKeepTheShapeRules) {
  const Config base = plan_family_config("llama3");
  const auto widths = plan_auto_widths(base);
  ASSERT_FALSE(widths.empty());
  EXPECT_EQ(widths.front(), 1024);
  EXPECT_EQ(widths.back(), 4096);
  const Config c = plan_reshape(base, 24, 2560);
  const ModelConfig m = ModelConfig::from_config(c, 0);
  EXPECT_EQ(m.n_head, 20);
  EXPECT_EQ(m.n_kv_head, 10);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.ffn_hidden, 8960);  // 3.5 x 2560
  EXPECT_NE(error_of<ConfigError>([&] { plan_reshape(base, 24, 2100); }).find("whole heads"), std::string::npos);
}

// ---- FLOP accounting: the same numbers as --describe ---------------------------------

TEST(PlanFlops, EqualDescribesForEveryFamily) {
  for (const auto& fam : plan_family_names()) {
    const Config base = plan_family_config(fam);
    for (int64_t L : {1, 12, 40}) {
      const Config shape = plan_reshape(base, L, base.n_embd);
      const ModelConfig m = ModelConfig::from_config(shape, 0);
      const auto c = plan_evaluate(shape, 1e9, FlopAccounting::mfu, ScalingLaw::chinchilla());
      EXPECT_DOUBLE_EQ(c.flops_per_token, m.flops_per_token()) << fam;
      EXPECT_EQ(c.params, m.num_params()) << fam;
      EXPECT_EQ(c.params, param_breakdown(m).total) << fam;
      const auto c6 = plan_evaluate(shape, 1e9, FlopAccounting::six_n, ScalingLaw::chinchilla());
      EXPECT_DOUBLE_EQ(c6.flops_per_token, m.flops_per_token_6n()) << fam;
      // --describe prints both figures: the same numbers.
      const std::string d = describe_model(shape, 8);
      EXPECT_NE(d.find(fmt::format("FLOPs/token  {:.4g} GFLOP", c.flops_per_token / 1e9)), std::string::npos) << d;
      EXPECT_NE(d.find(fmt::format("{:.4g} GFLOP  (6 * all", c6.flops_per_token / 1e9)), std::string::npos) << d;
      // ... and the memory per GPU of its table (DDP row at 8 GPUs).
      std::vector<Candidate> cs = {c};
      plan_apply_memory(cs, 8);
      EXPECT_EQ(cs[0].memory_strategy, "ddp");
      const auto est = estimate_memory(m, shape.dtype, shape.batch_size, 8, m.attention_backend);
      EXPECT_DOUBLE_EQ(cs[0].memory_per_gpu, est.front().total()) << fam;
      EXPECT_EQ(llmtrain::to_string(est.front().strategy), std::string("ddp"));
      EXPECT_NE(d.find(fmt::format("  {:<9}", "ddp")), std::string::npos) << d;
      EXPECT_NE(d.find(fmt::format("{:>10.2f}\n", cs[0].memory_per_gpu / static_cast<double>(1ull << 30))),
                std::string::npos)
          << d;
    }
  }
  // The LLaMA-3 1.5B preset by hand: N_matmul = 18 (12,582,912 + 44,040,192) + 128256 x 2048.
  const auto c = plan_evaluate(load_preset("full_llama3_1.5b_optimal"), 1, FlopAccounting::mfu, ScalingLaw::chinchilla());
  EXPECT_DOUBLE_EQ(c.flops_per_token, 6.0 * (18.0 * (12582912 + 44040192) + 128256.0 * 2048) + 12.0 * 18 * 16 * 128 * 2048);
  EXPECT_EQ(c.non_embedding_params, 1544628224 - 2 * 262668288);
}

TEST(PlanFamily, IsThePresetFileItself) {
  const std::map<std::string, std::string> preset = {{"llama3", "full_llama3_1.5b_optimal"},
                                                     {"llama2", "full_llama_1.36b"},
                                                     {"qwen3", "full_qwen3_1.8b_optimal"},
                                                     {"gpt2", "full_gpt2_1.36b"}};
  ASSERT_EQ(plan_family_names().size(), preset.size());
  for (const auto& [fam, file] : preset) {
    EXPECT_EQ(fs::canonical(plan_family_preset(fam)),
              fs::canonical(fs::path(llmtrain::testing::source_dir()) / "inputs" / (file + ".cfg")));
    const Config a = plan_family_config(fam), b = load_preset(file);
    for (const auto& k : Config::key_names()) EXPECT_EQ(a.get(k), b.get(k)) << fam << " " << k;
  }
  // LLMTRAIN_INPUTS_DIR comes first (an installed copy, or the user's own presets).
  const auto dir = llmtrain::testing::scratch_dir("plan_inputs");
  {  // the user's copy with another depth (a key may appear once per file)
    std::ifstream in(fs::path(llmtrain::testing::source_dir()) / "inputs/full_gpt2_1.36b.cfg");
    std::ofstream out(dir / "full_gpt2_1.36b.cfg", std::ios::trunc);
    for (std::string line; std::getline(in, line);)
      out << (line.rfind("n_layer", 0) == 0 ? std::string("n_layer = 7") : line) << "\n";
  }
  ::setenv("LLMTRAIN_INPUTS_DIR", dir.c_str(), 1);
  const Config own = plan_family_config("gpt2");
  ::unsetenv("LLMTRAIN_INPUTS_DIR");
  EXPECT_EQ(own.n_layer, 7);
  EXPECT_EQ(plan_family_config("gpt2").n_layer, 18);
}

// ---- the fit ----------------------------------------------------------------------------

namespace {
std::vector<LossObservation> synthetic(const ScalingLaw& law, double noise, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> eps(0.0, noise);
  std::vector<LossObservation> obs;
  for (double n : {1e7, 3e7, 1e8, 3e8, 1e9})
    for (double d : {2e8, 1e9, 5e9, 2e10, 1e11})
      obs.push_back({n, d, law.loss(n, d) * std::exp(noise > 0 ? eps(rng) : 0.0), fmt::format("N={} D={}", n, d)});
  return obs;
}
}  // namespace

TEST(PlanFit, RecoversKnownConstantsFromSyntheticLosses) {
  for (const ScalingLaw truth : {ScalingLaw::chinchilla(), ScalingLaw{2.1, 900.0, 2500.0, 0.42, 0.36}}) {
    FitOptions fo;
    fo.bootstrap = 0;
    const FitResult f = fit_scaling_law(synthetic(truth, 0, 0), fo);
    EXPECT_EQ(f.starts, 5400);
    EXPECT_NEAR(f.law.E / truth.E, 1, 0.02) << f.law.to_string();
    EXPECT_NEAR(f.law.A / truth.A, 1, 0.02) << f.law.to_string();
    EXPECT_NEAR(f.law.B / truth.B, 1, 0.02) << f.law.to_string();
    EXPECT_NEAR(f.law.alpha / truth.alpha, 1, 0.02) << f.law.to_string();
    EXPECT_NEAR(f.law.beta / truth.beta, 1, 0.02) << f.law.to_string();
    for (double r : f.residuals) EXPECT_LT(std::fabs(r), 1e-4);
  }
}

TEST(PlanFit, NoisyLossesGiveCloseConstantsAndAnHonestSpread) {
  const ScalingLaw truth = ScalingLaw::chinchilla();
  FitOptions fo;
  fo.bootstrap = 60;
  const FitResult f = fit_scaling_law(synthetic(truth, 0.003, 7), fo);
  EXPECT_EQ(f.bootstrap_samples, 60);
  // 0.3% noise on the losses: exponents within a few percent, predictions within 1%.
  EXPECT_NEAR(f.law.alpha, truth.alpha, 0.03) << f.law.to_string();
  EXPECT_NEAR(f.law.beta, truth.beta, 0.03) << f.law.to_string();
  EXPECT_NEAR(f.law.loss(5e8, 5e10) / truth.loss(5e8, 5e10), 1, 0.01);
  // The bootstrap interval is not empty and holds the fit's own value.
  EXPECT_GT(f.sigma.alpha, 0);
  EXPECT_LE(f.p05.alpha, f.law.alpha + 1e-9);
  EXPECT_GE(f.p95.alpha, f.law.alpha - 1e-9);
}

TEST(PlanFit, IsRobustToAnOutlier) {
  const ScalingLaw truth = ScalingLaw::chinchilla();
  auto obs = synthetic(truth, 0, 0);
  obs[7].loss *= 1.3;  // one diverged run
  FitOptions fo;
  fo.bootstrap = 0;
  const FitResult f = fit_scaling_law(obs, fo);
  EXPECT_NEAR(f.law.alpha / truth.alpha, 1, 0.02) << f.law.to_string();
  EXPECT_NEAR(f.law.E / truth.E, 1, 0.02) << f.law.to_string();
}

// ---- run logs --------------------------------------------------------------------------

TEST(PlanRunLog, LossObservationIsNTokensAndFinalValLoss) {
  const auto p = write_log("ok.json", 123456, 30, 4096,
                           {{{"iter", 10}, {"val_loss", 3.0}}, {{"iter", 30}, {"train_loss", 2.4}, {"val_loss", 2.5}}});
  const auto o = read_loss_observation(p);
  EXPECT_DOUBLE_EQ(o.params, 123456);
  EXPECT_DOUBLE_EQ(o.tokens, 30 * 4096.0);
  EXPECT_DOUBLE_EQ(o.loss, 2.5);
}

TEST(PlanRunLog, MeasuredSpeedGivesHoursAndGpuHours) {
  // run_1gpu.json: 100,000 tokens/s after warm-up of the 1.36B shape (8,341,291,008 FLOPs/token) on one B200.
  const auto s = read_measured_speed(fixture("run_1gpu.json"));
  EXPECT_EQ(s.world_size, 1);
  EXPECT_NEAR(s.tokens_per_sec, 1e5, 1e-6 * 1e5);
  ASSERT_TRUE(s.mfu.has_value());
  EXPECT_NEAR(*s.mfu, 37.07, 0.01);
  std::vector<Candidate> cs = {plan_evaluate(load_preset("full_llama_1.36b"), 85e9, FlopAccounting::mfu, {})};
  plan_apply_speed(cs, s, 8);
  // Same shape: 85e9 tokens at 8 x 100,000 tokens/s.
  EXPECT_NEAR(*cs[0].hours, 85e9 / 8e5 / 3600, 1e-6 * *cs[0].hours);
  EXPECT_NEAR(*cs[0].gpu_hours, 8 * *cs[0].hours, 1e-9);
}

// ---- bad inputs: one line, saying what is missing -----------------------------------------

TEST(PlanBadInput, EachIsOneLineSayingWhatIsMissing) {
  std::vector<std::pair<std::string, std::string>> cases;  // message, what it must say
  SearchOptions tiny;
  tiny.flops = 1e15;
  cases.push_back({error_of<ConfigError>([&] { plan_search(plan_family_config("llama3"), tiny); }), "too small"});
  cases.push_back({error_of<ConfigError>([] { plan_family_config("mistral"); }), "vocabulary"});
  Config no_vocab;
  cases.push_back({error_of<ConfigError>([&] { plan_require_vocabulary(no_vocab, "config 'x.cfg'"); }),
                   "vocab_size = 0"});
  const auto no_eval = write_log("no_eval.json", 1e5, 10, 100, nlohmann::json::array());
  cases.push_back({error_of<Error>([&] { read_loss_observation(no_eval); }), "no final val loss"});
  const auto early = write_log("early_eval.json", 1e5, 100, 100, {{{"iter", 99}, {"val_loss", 2.0}}});
  cases.push_back({error_of<Error>([&] { read_loss_observation(early); }), "iteration 99 of 100"});
  cases.push_back({error_of<Error>([] { read_loss_observation(fixture("run_1gpu.json")); }), "num_params"});
  cases.push_back({error_of<Error>([] { read_measured_speed(fixture("run_inconsistent.json")); }), "self-check"});
  auto four = synthetic(ScalingLaw::chinchilla(), 0, 0);
  four.resize(4);
  cases.push_back({error_of<Error>([&] { fit_scaling_law(four); }), "at least 5 runs"});
  std::vector<LossObservation> same_n;
  for (double d : {1e9, 2e9, 3e9, 4e9, 5e9}) same_n.push_back({1e8, d, 3.0, "x"});
  cases.push_back({error_of<Error>([&] { fit_scaling_law(same_n); }), "differ in size"});
  SearchOptions capped;
  capped.flops = 1.36e21;
  capped.max_tokens_per_param = 0.5;
  cases.push_back({error_of<ConfigError>([&] { plan_search(plan_family_config("llama3"), capped); }), "at most 0.5"});
  for (const auto& [msg, want] : cases) {
    EXPECT_NE(msg.find(want), std::string::npos) << "'" << msg << "' lacks '" << want << "'";
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// ---- the preset it writes --------------------------------------------------------------

TEST(PlanPreset, WrittenConfigLoadsToTheSameShape) {
  SearchOptions o;
  o.flops = 1e22;
  o.widths = {2048, 2560, 3072};
  const auto best = plan_search(plan_family_config("llama3"), o).candidates.front();
  const std::string text = plan_preset_text(best, "llmtrain-plan --flops 1e22 --family llama3", 16);
  const auto p = llmtrain::testing::scratch_dir("plan") / "written.cfg";
  std::ofstream(p) << text;
  Config c;
  c.load_file(p.string());
  c.validate();
  const ModelConfig m = ModelConfig::from_config(c, 0);
  EXPECT_EQ(m.num_params(), best.params);
  EXPECT_DOUBLE_EQ(m.flops_per_token(), best.flops_per_token);
  EXPECT_EQ(m.arch_string(), best.arch);
  const double tokens_per_iter = 8.0 * 8 * 16 * 2048;
  EXPECT_EQ(c.max_iters, static_cast<int64_t>(std::ceil(best.tokens / tokens_per_iter)));
  EXPECT_EQ(c.lr_decay_iters, c.max_iters);
  EXPECT_NE(text.find("# llmtrain-plan --flops 1e22 --family llama3"), std::string::npos);
  EXPECT_NO_THROW(describe_model(c, 16));
}
