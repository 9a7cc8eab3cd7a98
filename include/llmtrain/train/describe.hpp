// `llmtrain --describe`: architecture, parameters by group, FLOPs per token and
// the GPU memory a run needs under DDP, ZeRO-1 and FSDP. Pure arithmetic on the
// Config: works for the full presets without allocating them.
#pragma once
#include <cstdint>
#include <string>

namespace llmtrain {

struct Config;

// The whole description as printed by `llmtrain --describe` (several lines).
// Throws ConfigError when vocab_size = 0 (describe does not read the data).
std::string describe_model(const Config& c, int64_t world_size);

}  // namespace llmtrain
