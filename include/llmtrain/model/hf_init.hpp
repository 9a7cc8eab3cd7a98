// init_from=hf:DIR before the run starts: the transformers directory's
// config.json (model/hf.hpp's read_hf_config) sets the run's model keys.
#pragma once
#include <string>
#include <vector>

namespace llmtrain {

struct Config;

// init_from=hf:DIR: the architecture and shapes come from DIR/config.json. Model
// keys that differ from it and came from a config file are replaced (one line
// printed on rank 0 lists them); a key given on the command line
// (`command_line_keys`) that contradicts it is a ConfigError naming both values.
// block_size must not exceed the checkpoint's positions. No-op for other init_from.
void apply_hf_config(Config& cfg, const std::vector<std::string>& command_line_keys);

}  // namespace llmtrain
