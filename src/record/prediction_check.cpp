#include "llmtrain/record/prediction_check.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"

namespace llmtrain {
namespace {

// Predicted seconds of each run-log phase (Phase order), and of "other".
std::array<double, kNumPhases + 1> predicted_phases(const StepPrediction& p) {
  std::array<double, kNumPhases + 1> a{};
  a[static_cast<int>(Phase::data)] = p.data_s;
  a[static_cast<int>(Phase::forward_backward)] = p.forward_backward_s();
  a[static_cast<int>(Phase::communication)] = p.communication_s;
  a[static_cast<int>(Phase::optimizer)] = p.optimizer_s;
  a[kNumPhases] = 0.0;
  return a;
}

const char* phase_label(int i) {
  switch (i) {
    case static_cast<int>(Phase::data): return "data loading";
    case static_cast<int>(Phase::forward_backward): return "forward + backward";
    case static_cast<int>(Phase::communication): return "exposed communication";
    case static_cast<int>(Phase::optimizer): return "optimizer step";
  }
  return "time outside the phases";
}

const char* phase_advice(int i) {
  switch (i) {
    case static_cast<int>(Phase::data):
      return "the storage under data_dir and the loader (use_dataloader=True prefetches)";
    case static_cast<int>(Phase::forward_backward):
      return "the device: other processes on it, clocks or thermal throttling, the attention kernel in use "
             "(start-up line), num_threads on CPU; and whether the profile's rates are this machine's "
             "(device_profile=calibrate measures them before the first step)";
    case static_cast<int>(Phase::communication):
      return "the interconnect between the ranks (NCCL_DEBUG=INFO names the transport; nccl-tests' bus bandwidth "
             "against the device profile's), ddp_bucket_mb, and that the ranks per node match the hardware";
    case static_cast<int>(Phase::optimizer):
      return "memory bandwidth of the device and other processes on it";
  }
  return "synchronization, logging and gradient-norm logging (gradient_log_interval)";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

std::optional<DeviceProfile> run_device_profile(const Config& c, const std::string& device_name, std::string* why) {
  if (!c.device_profile.empty()) {
    try {
      return load_device_profile(c.device_profile);
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("config key 'device_profile': {}; or '{}' (the run measures its own profile "
                                    "before its first step)",
                                    e.what(), kCalibrateProfile));
    }
  }
  if (const DeviceProfile* p = builtin_profile_for_device(device_name)) return *p;
  if (why)
    *why = fmt::format("no built-in device profile for '{}' (llmtrain --calibrate measures one; device_profile=FILE)",
                       device_name);
  return std::nullopt;
}

bool calibrates_by_default(const Config& c, const std::string& device_name) {
  return c.device_profile.empty() && device_name.rfind("cpu", 0) == 0 && c.max_iters >= kSelfCalibrateMinIters;
}

std::string slow_step_message(const StepPrediction& p, double measured_ms,
                              const std::array<double, kNumPhases>& phase_ms, double other_ms) {
  const auto pred = predicted_phases(p);
  int worst = 0;
  double worst_excess = -1e300;
  for (int i = 0; i <= kNumPhases; ++i) {
    const double m = i < kNumPhases ? phase_ms[i] : other_ms;
    const double excess = m - pred[i] * 1e3;
    if (excess > worst_excess) worst_excess = excess, worst = i;
  }
  const double m = worst < kNumPhases ? phase_ms[worst] : other_ms;
  return fmt::format(
      "steps take {:.4g} ms, {:.0f}% slower than the {:.4g} ms predicted for device profile '{}': {} {:.4g} s/step "
      "where {:.4g} s was expected; check {}",
      measured_ms, 100.0 * (measured_ms / (p.step_time_s * 1e3) - 1.0), p.step_time_s * 1e3, p.device,
      phase_label(worst), m / 1e3, pred[worst], phase_advice(worst));
}

std::optional<std::string> PredictionCheck::observe(const IterationMetrics& it, int64_t max_warmup_iters) {
  if (warned_ || p_.step_time_s <= 0) return std::nullopt;
  dt_ms_.push_back(it.dt_ms);
  recent_.push_back(it);
  if (recent_.size() > 5) recent_.erase(recent_.begin());
  // After warm-up (find_warmup: the step time has settled) and with a few steps
  // past it, the median of the last ones: one slow step (a page fault, a
  // neighbour's burst) does not warn.
  // Searched for over the first 1000 steps only (find_warmup reads them all).
  if (!settled_after_ && dt_ms_.size() <= 1000) settled_after_ = find_warmup(dt_ms_, max_warmup_iters).settled_after;
  if (!settled_after_ || static_cast<int64_t>(dt_ms_.size()) < *settled_after_ + 3 || recent_.size() < 3)
    return std::nullopt;
  std::vector<double> dts;
  for (const auto& r : recent_) dts.push_back(r.dt_ms);
  const double med = median(dts);
  if (med <= kSlowStepFactor * p_.step_time_s * 1e3) return std::nullopt;
  std::array<double, kNumPhases> phases{};
  std::vector<double> others;
  for (int i = 0; i < kNumPhases; ++i) {
    std::vector<double> v;
    for (const auto& r : recent_) v.push_back(r.phase_ms[i]);
    phases[i] = median(v);
  }
  for (const auto& r : recent_) others.push_back(r.other_ms);
  warned_ = true;
  return slow_step_message(p_, med, phases, median(others));
}

void PredictionCheck::add_to_summary(nlohmann::json& s) const {
  s["predicted_step_time_s"] = p_.step_time_s;
  const auto pred = predicted_phases(p_);
  nlohmann::json cmp = nlohmann::json::object();
  for (int i = 0; i <= kNumPhases; ++i) {
    const std::string key = i < kNumPhases ? phase_name(static_cast<Phase>(i)) : "other_ms";
    const std::string mean = "mean_" + key;
    cmp[key] = {{"predicted_ms", pred[i] * 1e3}, {"measured_ms", s.value(mean, 0.0)}};
  }
  nlohmann::json j = {{"device", p_.device}, {"step_time_s", p_.step_time_s}, {"phases", cmp}};
  if (s.contains("mean_dt_ms") && p_.step_time_s > 0)
    j["measured_over_predicted"] = s["mean_dt_ms"].get<double>() / (p_.step_time_s * 1e3);
  s["prediction"] = j;
}

}  // namespace llmtrain
