// The run's predicted step (prediction/cost_model.hpp) beside the measured one:
// recorded in the run log at start (startup_info.prediction), compared phase by
// phase in the summary (summary.predicted_step_time_s, summary.prediction), and
// one warning when, after warm-up, steps run more than 25% slower than predicted,
// naming the phase that grew and what to check.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmtrain/prediction/cost_model.hpp"
#include "llmtrain/record/metrics.hpp"

namespace llmtrain {

// device_profile=calibrate: the run measures its profile (prediction/calibrate.hpp)
// just before its first step; the trainer does that, not run_device_profile.
inline constexpr const char* kCalibrateProfile = "calibrate";

// The profile a run predicts with: the device_profile key (a file or a built-in
// name), else the built-in profile of the detected device; nullopt (with the
// reason in `why`) when the device has none. A bad value throws one line naming
// the key, the value and what is allowed.
std::optional<DeviceProfile> run_device_profile(const Config& c, const std::string& device_name, std::string* why);

// Whether a CPU run of at least kSelfCalibrateMinIters iterations with no
// device_profile is to measure the rates of its own step before its first one
// (calibrate.hpp, CalibrationScope::step; a few seconds; record/run_record.cpp's
// predict_run, since 2026-11-27: docs/performance-model.md, "A CPU run
// calibrates its own step"): a CPU's speed depends on the load
// beside it and on the threads per rank, which no built-in profile knows (the
// quick start's 2-core machine ran 12x faster than the built-in cpu_dev said,
// docs/performance-model.md). Shorter runs keep the built-in profile: a few
// seconds would be a large share of them and their warning never arms.
constexpr int64_t kSelfCalibrateMinIters = 100;
bool calibrates_by_default(const Config& c, const std::string& device_name);

// Steps slower than this factor of the prediction, after warm-up, warn once.
constexpr double kSlowStepFactor = 1.25;

class PredictionCheck {
 public:
  explicit PredictionCheck(StepPrediction predicted) : p_(std::move(predicted)) {}
  const StepPrediction& predicted() const { return p_; }
  // Called after every iteration with that iteration's metrics. Returns the
  // warning (once per run) when the median of the last settled steps is more
  // than kSlowStepFactor x the prediction.
  std::optional<std::string> observe(const IterationMetrics& it, int64_t max_warmup_iters);
  // Adds summary.predicted_step_time_s and summary.prediction {phase: {measured_ms,
  // predicted_ms}, ratio} to a Metrics::summary().
  void add_to_summary(nlohmann::json& summary) const;

 private:
  StepPrediction p_;
  std::vector<double> dt_ms_;
  std::vector<IterationMetrics> recent_;
  std::optional<int64_t> settled_after_;
  bool warned_ = false;
};

// The warning's text for measured phases against the prediction (pure: tests call it).
std::string slow_step_message(const StepPrediction& p, double measured_ms, const std::array<double, kNumPhases>& phase_ms,
                              double other_ms);

}  // namespace llmtrain
