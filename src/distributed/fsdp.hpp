// Private: FSDP, parameters, gradients and optimizer state sharded by unit.
//
// A unit is a transformer block (ParamGroups::units) or the rest of the
// parameters (embeddings, final norm, head: the root unit). Per unit and rank:
//   shard      (n/W,)  this rank's parameters (n padded to a multiple of W)
//   grad_shard (n/W,)  sum over micro-steps of the reduce-scattered gradient
//   AdamW moments and, below fp32, an fp32 master copy (sharded_adamw.hpp)
//   full       (n,)    the parameters point at views of it; its storage has
//                      0 bytes except while the unit is gathered.
// Block units are gathered just before the block's forward and freed after it,
// gathered again before its backward and, once the block's backward is done,
// their gradients are reduce-scattered and everything full is freed (custom
// autograd Functions around the block; recompute-free: autograd's saved views
// share the full buffer's storage, which is resized, never replaced).
// With fsdp_prefetch the gather of the block that runs next is started when
// the current block's parameters are ready (forward: i+1, backward: i-1), so
// at most two blocks are full at a time and the transfer overlaps compute.
#pragma once
#include <memory>

#include "llmtrain/distributed/strategy.hpp"

namespace llmtrain {

// `hooks`: when non-null, receives the ForwardHooks to install on the model;
// block units are then sharded and the root unit is gathered in
// before_forward() and freed after each backward. When null (no model to hook),
// every parameter is one root unit whose full parameters stay resident
// (gradients and optimizer state are still sharded).
std::unique_ptr<Strategy> make_fsdp_strategy(const StrategyOptions& options, const ParamGroups& groups,
                                             Collectives& comm, std::shared_ptr<ForwardHooks>* hooks);

}  // namespace llmtrain
