#include "llmtrain/distributed/sharding_plan.hpp"

#include "llmtrain/core/error.hpp"
#include "llmtrain/model/params.hpp"

namespace llmtrain {

const char* to_string(UnitKind k) {
  switch (k) {
    case UnitKind::embedding: return "embedding";
    case UnitKind::block: return "block";
    case UnitKind::head: return "head";
  }
  return "?";
}

int64_t ShardingUnit::padded_numel(int64_t world_size) const {
  LLMTRAIN_CHECK(world_size >= 1, "sharding plan: world size must be >= 1, got {}", world_size);
  return (numel + world_size - 1) / world_size * world_size;
}

std::vector<ShardingUnit> fsdp_sharding_plan(const ModelConfig& m) {
  std::vector<ShardingUnit> units(static_cast<size_t>(m.n_layer + 2));
  ShardingUnit& embedding = units.front();
  ShardingUnit& head = units.back();
  embedding.kind = UnitKind::embedding;
  embedding.held_through_step = m.tie_embeddings;  // the LM head reads it at the end of the forward
  head.kind = UnitKind::head;
  for (int64_t i = 0; i < m.n_layer; ++i) units[static_cast<size_t>(i + 1)].block = i;
  const auto table = parameter_table(m);
  for (size_t k = 0; k < table.size(); ++k) {
    const auto& p = table[k];
    ShardingUnit* u = nullptr;
    if (p.block >= 0) u = &units.at(static_cast<size_t>(p.block + 1));
    else if (p.role == ParamRole::token_embedding || p.role == ParamRole::position_embedding) u = &embedding;
    else if (p.role == ParamRole::final_norm || p.role == ParamRole::lm_head) u = &head;
    LLMTRAIN_CHECK(u != nullptr, "sharding plan: parameter '{}' belongs to no unit", p.name);
    u->params.push_back(static_cast<int>(k));
    u->numel += p.numel();
  }
  return units;
}

}  // namespace llmtrain
