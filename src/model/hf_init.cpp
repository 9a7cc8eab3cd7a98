// init_from=hf:DIR at the config edge: DIR/config.json sets the model keys.
#include "llmtrain/model/hf_init.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/core/log.hpp"
#include "llmtrain/model/hf.hpp"

namespace llmtrain {

void apply_hf_config(Config& cfg, const std::vector<std::string>& command_line_keys) {
  if (cfg.init_from.source != InitSource::hf) return;
  const std::string dir = cfg.init_from.hf_dir;
  const HfModelKeys hf = read_hf_config(dir);
  Config want = cfg;
  std::vector<std::string> replaced;
  for (const auto& k : hf.keys) {
    want.set(k.key, k.value);  // the key's own text form, so that equal values compare equal
    const std::string ours = cfg.get(k.key), theirs = want.get(k.key);
    if (ours == theirs) continue;
    if (std::find(command_line_keys.begin(), command_line_keys.end(), k.key) != command_line_keys.end())
      throw ConfigError(fmt::format("config key '{}' = {} on the command line contradicts {} ({}, i.e. {} = {}); "
                                    "drop the key or make them agree",
                                    k.key, ours, hf.config_path, k.source, k.key, theirs));
    replaced.push_back(fmt::format("{} {} -> {}", k.key, ours, theirs));
  }
  cfg = want;
  if (!replaced.empty())
    log::info("init_from=hf:{}: config.json ({}) sets the model keys: {}", dir, to_string(hf.arch),
              fmt::join(replaced, ", "));
  if (cfg.block_size > hf.max_positions)
    throw ConfigError(fmt::format("config key 'block_size' = {} exceeds the {} positions of {} "
                                  "(max_position_embeddings / n_positions); use block_size <= {}",
                                  cfg.block_size, hf.max_positions, hf.config_path, hf.max_positions));
}

}  // namespace llmtrain
