#include "llmtrain/train/memory_check.hpp"

#include <fmt/format.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"

namespace llmtrain {

std::optional<std::string> memory_refusal(const ModelConfig& m, const MemoryInputs& in, StrategyKind strategy,
                                          const AvailableMemory& available) {
  if (available.bytes < 0) return std::nullopt;
  const double need = estimate_memory(m, in, strategy).total();
  const double have = static_cast<double>(available.bytes);
  if (need <= have) return std::nullopt;
  MemoryInputs plain = in, recompute_all = in;
  plain.recomputed_blocks = 0;
  recompute_all.recomputed_blocks = m.n_layer;
  const int64_t b_plain = max_batch_size(m, plain, strategy, have);
  const int64_t b_full = max_batch_size(m, recompute_all, strategy, have);
  return fmt::format(
      "memory_check: predicted peak {:.2f} GiB per rank ({}, batch_size {} x block_size {}, dtype {}, {} rank(s)) "
      "exceeds the {:.2f} GiB available ({}); the largest micro-batch that fits is batch_size={} without activation "
      "checkpointing, {} with full activation checkpointing (docs/memory.md; memory_check=False runs anyway)",
      gib(need), to_string(strategy), in.batch_size, m.block_size, to_string(in.dtype), in.world_size, gib(have),
      available.source, b_plain, b_full);
}

void check_memory_fits(const Config& c, const ModelConfig& m, int64_t world_size, const AvailableMemory& available) {
  if (!c.memory_check) return;
  if (auto line = memory_refusal(m, MemoryInputs::from_config(c, world_size), c.strategy(), available))
    throw ConfigError(*line);
}

}  // namespace llmtrain
