// Opening a run's record at start-up: the constants the metrics derive MFU
// from, the environment block of the run log and the console, the run log
// itself with its followers (TensorBoard), and the predicted step
// (prediction_check.hpp). The trainer calls these once, after the model and
// the strategy exist; none of them knows the loop.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "llmtrain/record/metrics.hpp"           // defines: MetricsSetup
#include "llmtrain/record/prediction_check.hpp"  // defines: PredictionCheck
#include "llmtrain/record/run_log.hpp"           // defines: RunLog, RunEnvironment

namespace llmtrain {

struct Config;
struct ModelConfig;
class Runtime;

// FLOPs per token (6N + 12LHQT and 6N), global tokens per iteration, devices,
// and the device's dense peak for the compute dtype (`tf32_matmuls`: float32
// matmuls run as TF32, whose peak is the TF32 one).
MetricsSetup make_metrics_setup(const Config& cfg, const ModelConfig& mcfg, const Runtime& rt, torch::Device device,
                                bool tf32_matmuls);

// What the run chose at start-up, as the environment block says it.
struct RunChoices {
  std::string attention_backend;  // after the fallback chain
  std::string attention_kernel;   // e.g. "sdpa (SDPA flash (CPU))"
  bool loss_scaling = false;      // float16's dynamic loss scaling
  std::string tf32;               // enable_tf32's description
  std::string parallelism;        // e.g. "DDP over MPI allreduce (123 B optimizer state on rank 0)"
};
RunEnvironment make_run_environment(const Config& cfg, const Runtime& rt, torch::Device device,
                                    const RunChoices& choices);

// The run log (rank 0 writes), with a TensorBoard follower when tensorboard_dir is set.
std::unique_ptr<RunLog> open_run_log(const Config& cfg, bool is_root);

// The predicted step for this run's layout and device profile, printed and
// kept in startup["prediction"]; nullopt when the device has no profile (the
// reason is recorded instead). device_profile=calibrate measures the profile
// here, with every rank, just before the first step.
std::optional<PredictionCheck> predict_run(const Config& cfg, const ModelConfig& mcfg, Runtime& rt,
                                           nlohmann::json& startup);

}  // namespace llmtrain
