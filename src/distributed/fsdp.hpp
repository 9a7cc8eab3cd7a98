// Private: FSDP, parameters, gradients and optimizer state sharded by unit.
//
// The units are the sharding plan's (llmtrain/distributed/sharding_plan.hpp):
// the token embedding, each transformer block, the final norm with the LM head.
// Per unit and rank:
//   shard      (n/W,)  this rank's parameters (n padded to a multiple of W), in
//                      param_dtype
//   grad_shard (n/W,)  fp32: sum over micro-steps of the reduce-scattered gradient
//   AdamW moments and, below fp32, an fp32 master copy (sharded_adamw.hpp)
//   full       (n,)    the parameters point at views of it; its storage has
//                      0 bytes except while the unit is gathered.
// A unit is gathered just before its forward and freed after it, gathered again
// before its backward and, once its backward is done, its gradients are
// reduce-scattered (in reduce_dtype) and everything full is freed (custom
// autograd Functions around the block; recompute-free: autograd's saved views
// share the full buffer's storage, which is resized, never replaced). The head
// unit is not freed between its forward and its backward, which comes right
// after it (torchtitan does not reshard it either). The embedding unit is freed
// after its forward and not gathered for its backward, which reads no weights;
// its gradients are reduce-scattered when the backward ends. Tied to the LM
// head, it stays gathered from its forward to the end of the backward.
// With fsdp_prefetch the gather of the unit that runs next is started when
// the current unit's parameters are ready (forward: k+1, backward: the block
// before), so at most two units are full at a time and the transfer overlaps
// compute.
#pragma once
#include <memory>

#include "llmtrain/distributed/strategy.hpp"

namespace llmtrain {

// `hooks`: when non-null, receives the ForwardHooks to install on the model,
// and the units are groups.units (which must cover every parameter once). When
// null (no model to hook), every parameter is one unit whose full parameters
// stay resident (gradients and optimizer state are still sharded).
std::unique_ptr<Strategy> make_fsdp_strategy(const StrategyOptions& options, const ParamGroups& groups,
                                             Collectives& comm, std::shared_ptr<ForwardHooks>* hooks);

}  // namespace llmtrain
