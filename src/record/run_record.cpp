#include "llmtrain/record/run_record.hpp"

#include <chrono>

#include <fmt/format.h>

#include "llmtrain/core/config.hpp"                  // defines: Config
#include "llmtrain/core/log.hpp"                     // defines: log::info (rank 0 only)
#include "llmtrain/distributed/runtime.hpp"          // defines: Runtime (ranks, hosts, devices)
#include "llmtrain/distributed/watchdog.hpp"         // defines: Watchdog::activity
#include "llmtrain/model/model_config.hpp"           // defines: ModelConfig::flops_per_token
#include "llmtrain/prediction/calibrate.hpp"         // defines: calibrate_device_profile, CalibrationScope
#include "llmtrain/record/prediction_check.hpp"      // defines: calibrates_by_default, kCalibrateProfile
#include "llmtrain/record/tensorboard.hpp"           // defines: make_tensorboard_follower

namespace llmtrain {

MetricsSetup make_metrics_setup(const Config& cfg, const ModelConfig& mcfg, const Runtime& rt, torch::Device device,
                                bool tf32_matmuls) {
  MetricsSetup setup;
  setup.flops_per_token = mcfg.flops_per_token();
  setup.flops_per_token_6n = mcfg.flops_per_token_6n();
  setup.tokens_per_iter = cfg.tokens_per_iter(rt.world_size());
  setup.num_devices = rt.world_size();
  setup.peak = resolve_peak(rt.device_name(), cfg.dtype, cfg.peak_tflops,
                            tf32_matmuls ? Fp32Matmuls::tf32 : Fp32Matmuls::ieee);
  setup.device = device;
  return setup;
}

RunEnvironment make_run_environment(const Config& cfg, const Runtime& rt, torch::Device device,
                                    const RunChoices& choices) {
  RunEnvironment env;
  env.world_size = rt.world_size();
  env.num_nodes = rt.num_nodes();
  env.hostname = rt.hostname();
  env.hostnames = rt.all_hostnames();
  env.device_names = rt.all_device_names();
  env.device_type = device.is_cuda() ? "cuda" : "cpu";
  env.threads_per_rank = rt.num_threads();
  env.attention_backend_used = choices.attention_backend;
  env.attention_kernel = choices.attention_kernel;
  env.precision = fmt::format("{}{}; {}{}{}", to_string(cfg.dtype),
                              choices.loss_scaling ? " with dynamic loss scaling" : "", choices.tf32,
                              cfg.param_dtype == ParamDtype::bfloat16
                                  ? "; bfloat16 parameters and gradients, fp32 master weights"
                                  : "",
                              cfg.reduce_dtype == ReduceDtype::bfloat16 ? "; bfloat16 gradient reductions" : "");
  env.parallelism = choices.parallelism;
  return env;
}

std::unique_ptr<RunLog> open_run_log(const Config& cfg, bool is_root) {
  auto run_log = std::make_unique<RunLog>(cfg.out_dir, is_root);
  if (!cfg.tensorboard_dir.empty() && is_root) run_log->add_follower(make_tensorboard_follower(cfg.tensorboard_dir));
  return run_log;
}

std::optional<PredictionCheck> predict_run(const Config& cfg, const ModelConfig& mcfg, Runtime& rt,
                                           nlohmann::json& startup) {
  std::string why;
  std::optional<DeviceProfile> profile;
  const bool asked = cfg.device_profile == kCalibrateProfile;
  if (asked || calibrates_by_default(cfg, rt.device_name())) {
    // device_profile=calibrate: the machine as this run finds it, measured
    // by every rank together just before the first step. A CPU run without
    // device_profile: its step's rates only, briefly (CalibrationScope::step).
    //
    // The watchdog: the calibration's length is the machine's (seconds on a
    // CPU, up to a minute on a GPU), not the run's, while collective_timeout_s
    // is set for the run's steps (10 s in the Slurm tests). So the calibration
    // is idle to the heartbeats and each rank bounds it with a check of its
    // own: past twice the limit the job ends naming this rank. (A peer stopped
    // during it is still named by its silence at the limit: the watchdog judges
    // a peer gone quiet by its silence, not by its last activity.)
    const std::string what = asked ? "device_profile=calibrate" : "a CPU run without device_profile";
    rt.watchdog().idle();
    const auto started = std::chrono::steady_clock::now();
    Watchdog& dog = rt.watchdog();
    const int check = dog.add_check(
        [&dog, started, what, rank = rt.rank()]() -> std::string {
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
          if (s <= 2.0 * dog.limit_s()) return "";
          return fmt::format("rank {} did not finish calibrating the device profile ({}) in {:.0f} s, twice the "
                             "limit: it, or a rank it waits for in the calibration's collectives, is stuck",
                             rank, what, s);
        },
        nullptr);
    DeviceProfile measured;
    std::string file;
    try {
      file = calibrate_device_profile(cfg, rt, &measured, asked ? CalibrationScope::full : CalibrationScope::step);
    } catch (...) {
      dog.remove_check(check);
      throw;
    }
    dog.remove_check(check);
    rt.watchdog().activity("start-up: after calibrating the device profile");
    measured.source = fmt::format("calibrate: measured by this run before its first step{}{}",
                                  asked ? "" : " (a CPU run without device_profile: its step's rates)",
                                  file.empty() ? std::string() : fmt::format(" (written to {})", file));
    profile = std::move(measured);
    log::info("device profile measured by this run ({}): {}", what, profile->name);
  } else {
    profile = run_device_profile(cfg, rt.device_name(), &why);
  }
  if (!profile) {
    startup["prediction"] = {{"unknown", why}};
    log::info("predicted step: unknown ({})", why);
    return std::nullopt;
  }
  const WorldLayout world{rt.world_size(), rt.local_size()};
  PredictionCheck check(predict_step(RunShape::from_config(cfg, mcfg), world, *profile));
  startup["prediction"] = prediction_json(check.predicted());
  startup["prediction"]["profile"] = device_profile_json(*profile);
  startup["prediction"]["profile"]["source"] = profile->source;
  log::info("{}", format_prediction(check.predicted(), world));
  return check;
}

}  // namespace llmtrain
