// `llmtrain --describe`: architecture, parameters by group, FLOPs per token and
// the memory a run needs per rank under DDP, ZeRO-1 and FSDP. Pure arithmetic
// on the Config: works for the full presets without allocating them.
// --describe_format=json prints describe_json(); the text is rendered from the
// same object, so every number the text shows is in the JSON.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

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

// What --describe assumes beyond the config.
struct DescribeOptions {
  int64_t world_size = 8;                 // --describe_world_size
  std::optional<double> memory_bytes;     // --describe_memory_gib: memory per rank for memory.max_batch_size
  int64_t ranks_per_node = 0;             // --describe_ranks_per_node; 0: min(world size, 8)
  std::string device = "h100_sxm";        // --describe_device: a built-in profile name or a profile file
};

// One top-level section of the description: its key and what computes it.
// A new section (e.g. a performance prediction) is one more entry of
// describe_sections() in describe.cpp.
struct DescribeSection {
  const char* key;
  std::function<nlohmann::json(const Config&, const DescribeOptions&)> build;
};

// {"model": ..., "parameters": ..., "flops": ..., "memory": ..., "prediction": ...}: every
// section of describe_sections(), in order. `memory.peak_bytes_per_rank` is the
// configured strategy's predicted peak at `world_size` ranks; with
// memory_bytes, `memory.max_batch_size` (and `_full_checkpointing`) the largest
// micro-batch that fits in it. Throws ConfigError when vocab_size = 0
// (describe does not read the data).
nlohmann::json describe_json(const Config& c, const DescribeOptions& o);

// The whole description as printed by `llmtrain --describe` (several lines),
// rendered from describe_json().
std::string describe_model(const Config& c, const DescribeOptions& o);
std::string describe_model(const Config& c, int64_t world_size);

}  // namespace llmtrain
