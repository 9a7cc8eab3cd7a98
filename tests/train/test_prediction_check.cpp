// record/prediction_check.hpp: a run's measured phases against the predicted
// step (prediction/cost_model.hpp's StepPrediction): the slow-step warning
// comes once, after warm-up, naming the phase that grew.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "llmtrain/prediction/cost_model.hpp"    // defines: StepPrediction
#include "llmtrain/record/metrics.hpp"           // defines: IterationMetrics
#include "llmtrain/record/prediction_check.hpp"  // defines: PredictionCheck

using namespace llmtrain;

TEST(PredictionCheck, WarnsOnceAfterWarmupNamingThePhaseThatGrew) {
  StepPrediction p;
  p.device = "test";
  p.data_s = 0.001;
  p.forward_s = 0.04;
  p.backward_s = 0.08;
  p.communication_s = 0.05;
  p.optimizer_s = 0.01;
  p.step_time_s = 0.181;
  auto iteration = [](int64_t i, double comm_ms) {
    IterationMetrics it;
    it.iter = i;
    it.phase_ms = {1.0, 120.0, comm_ms, 10.0};
    it.other_ms = 1.0;
    it.dt_ms = 132.0 + comm_ms;
    return it;
  };
  // As predicted: no warning.
  PredictionCheck ok(p);
  for (int i = 0; i < 30; ++i) EXPECT_FALSE(ok.observe(iteration(i, i < 2 ? 900.0 : 50.0), 50)) << i;
  // Exposed communication at 1.2 s: one warning, naming it.
  PredictionCheck slow(p);
  int warnings = 0;
  std::string text;
  for (int i = 0; i < 30; ++i)
    if (auto w = slow.observe(iteration(i, i < 2 ? 3000.0 : 1200.0), 50)) ++warnings, text = *w;
  EXPECT_EQ(warnings, 1);
  EXPECT_NE(text.find("exposed communication 1.2 s/step where 0.05 s was expected"), std::string::npos) << text;
  EXPECT_NE(text.find("interconnect"), std::string::npos) << text;
  nlohmann::json s = {{"mean_dt_ms", 1332.0}, {"mean_communication_ms", 1200.0}};
  slow.add_to_summary(s);
  EXPECT_DOUBLE_EQ(s["predicted_step_time_s"].get<double>(), 0.181);
  EXPECT_DOUBLE_EQ(s["prediction"]["phases"]["communication_ms"]["measured_ms"].get<double>(), 1200.0);
}
