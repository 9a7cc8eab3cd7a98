// Refuse before an out-of-memory: at start-up, before the model is allocated,
// the predicted peak of the run's strategy (prediction/memory_model.hpp) is
// compared with what the rank's device has (record/device_memory.hpp). A run
// that cannot fit stops with one line; memory_check=false lets it run.
#pragma once
#include <optional>
#include <string>

#include "llmtrain/model/model_config.hpp"
#include "llmtrain/prediction/memory_model.hpp"
#include "llmtrain/record/device_memory.hpp"

namespace llmtrain {

struct Config;

// The refusal line when the predicted peak of `strategy` exceeds
// `available.bytes`, nullopt when it fits or the available memory is unknown
// (bytes < 0). It names the prediction, what is available and where that came
// from, and the largest micro-batch that fits without and with full activation
// checkpointing. Pure: the tests give it numbers.
std::optional<std::string> memory_refusal(const ModelConfig& m, const MemoryInputs& in, StrategyKind strategy,
                                          const AvailableMemory& available);

// Throws ConfigError with memory_refusal's line when the run cannot fit.
void check_memory_fits(const Config& c, const ModelConfig& m, int64_t world_size, const AvailableMemory& available);

}  // namespace llmtrain
