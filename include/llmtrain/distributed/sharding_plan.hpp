// FSDP's sharding plan: which parameters are gathered together (a unit), as
// torchtitan wraps LLaMA (models/llama3/infra/parallelize.py): the token
// embedding (with the learned positions), each transformer block, and the final
// norm with the LM head. Computed once, from ModelConfig alone (no tensor is
// allocated): the FSDP strategy (distributed/fsdp.cpp) shards by it and the
// memory model (prediction/memory_model.cpp) sizes the gathered units by it,
// for any preset. There is no root unit: every parameter is in one of these
// units, so what torchtitan's model-level wrap keeps is empty here.
//
// Tied embeddings (GPT-2: lm_head is wte): the one tensor belongs to the
// embedding unit, which is then read again by the LM head at the end of the
// forward and its gradient is complete only after the embedding's backward, so
// that unit stays gathered from the embedding's forward to the end of the
// backward (held_through_step). The head unit is then the final norm alone.
#pragma once
#include <cstdint>
#include <vector>

#include "llmtrain/model/model_config.hpp"

namespace llmtrain {

enum class UnitKind { embedding, block, head };
const char* to_string(UnitKind k);  // "embedding" | "block" | "head"

struct ShardingUnit {
  UnitKind kind = UnitKind::block;
  int64_t block = -1;       // kind == block: the block's index; -1 otherwise
  std::vector<int> params;  // indices into parameter_table(m) (= named_parameters() order), ascending
  int64_t numel = 0;        // its parameters' elements, before padding
  // Gathered from its forward until its gradients are reduce-scattered at the
  // end of the backward (the embedding unit of a tied model). Otherwise a unit
  // is full only around its own forward and its own backward.
  bool held_through_step = false;
  // What each rank's flat buffers are sized by: numel padded to a multiple of
  // the world size (a rank's shard is padded_numel / world_size elements).
  int64_t padded_numel(int64_t world_size) const;
};

// In forward order: embedding, blocks 0 .. n_layer-1, head. Every parameter of
// parameter_table(m) is in exactly one unit.
std::vector<ShardingUnit> fsdp_sharding_plan(const ModelConfig& m);

}  // namespace llmtrain
