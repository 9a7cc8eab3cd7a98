// Config: every key of a run, declared once in config_keys.def.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "llmtrain/core/options.hpp"  // defines: the option enums and their words

namespace llmtrain {

struct Config {
#define LLMTRAIN_KEY(section, type, name, def, check, help) type name = def;
#include "llmtrain/core/config_keys.def"
#undef LLMTRAIN_KEY

  // Sets one key from its text form (as in a config file or --key=value).
  // Throws ConfigError naming the key, the value and what is allowed; an unknown
  // key names the closest known one.
  void set(const std::string& key, const std::string& value);
  // The key's current value as text (the form set() accepts).
  std::string get(const std::string& key) const;
  // Reads `key = value` lines (# comments, blank lines); errors name file:line.
  void load_file(const std::string& path);
  // Cross-key checks (e.g. min_lr <= learning_rate). Throws ConfigError.
  void validate() const;
  // Fails with a clear message when a key asks for a feature this build does not
  // have yet (NotBuiltError), instead of silently ignoring it.
  void refuse_unbuilt() const;

  // The data-parallel strategy the keys use_zero1 / use_fsdp select (validate()
  // refuses both together).
  StrategyKind strategy() const {
    return use_fsdp ? StrategyKind::fsdp : use_zero1 ? StrategyKind::zero1 : StrategyKind::ddp;
  }

  // One iteration's global batch (docs/architecture.md: gradient accumulation is per rank):
  // batch_size x gradient_accumulation_steps x world_size sequences of block_size tokens.
  int64_t global_batch_sequences(int64_t world_size) const {
    return batch_size * gradient_accumulation_steps * world_size;
  }
  int64_t tokens_per_iter(int64_t world_size) const { return global_batch_sequences(world_size) * block_size; }

  nlohmann::json to_json() const;
  static std::vector<std::string> key_names();
  static bool has_key(const std::string& key);
  // --help text grouped by section, and a Markdown table for docs/config.md.
  static std::string help_text();
  static std::string markdown_table();
};

// The command line of `llmtrain`: [config files...] [--key=value ...] [flags].
struct CommandLine {
  Config config;
  std::vector<std::string> config_files;  // positional arguments, applied in order
  std::vector<std::string> command_line_keys;  // keys given as --key=value (not from a file)
  bool help = false;
  bool describe = false;     // print the model/memory description and exit
  bool print_config = false; // print the resolved config and exit
  bool config_docs = false;  // print docs/config.md (the key table) and exit
  bool version = false;      // print the program's and libraries' versions and exit
  int64_t describe_world_size = 8;  // world size assumed by --describe
  std::string describe_format = "text";  // --describe's output: text or json
  std::string describe_device = "h100_sxm";  // --describe's device profile: built-in name or file
  int64_t describe_ranks_per_node = 0;   // 0: min(world size, 8)
  bool calibrate = false;    // measure the device profile (out_dir/device_profile.json) and exit
  std::optional<double> describe_memory_gib;  // --describe: memory per rank for the largest micro-batch
};

// Parses argv with Boost.Program_options: positional config file(s) first, then
// --key=value overrides (later wins). Throws ConfigError.
CommandLine parse_command_line(int argc, const char* const* argv);

// Levenshtein-closest of `candidates` to `word` (empty if none is close).
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace llmtrain
