// `llmtrain --describe`: architecture, parameters by group, FLOPs per token and
// the GPU memory a run needs under DDP, ZeRO-1 and FSDP. Pure arithmetic on the
// Config: works for the full presets without allocating them.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace llmtrain {

struct Config;

// What --describe's step-time prediction assumes beyond the config.
struct PredictionInput {
  int64_t world_size = 8;       // --describe_world_size
  int64_t ranks_per_node = 0;   // --describe_ranks_per_node; 0: min(world size, 8)
  std::string device = "h100_sxm";  // --describe_device: a built-in profile name or a profile file
};
// The predicted step (prediction/cost_model.hpp) as --describe prints it, and
// as the JSON object `prediction` (step_time_s, tokens_per_s, mfu, phases, ...).
std::string describe_prediction(const Config& c, const PredictionInput& in);
nlohmann::json describe_prediction_json(const Config& c, const PredictionInput& in);

// The whole description as printed by `llmtrain --describe` (several lines).
// Throws ConfigError when vocab_size = 0 (describe does not read the data).
std::string describe_model(const Config& c, int64_t world_size);

}  // namespace llmtrain
