#include "llmtrain/prediction/memory_model.hpp"

#include <algorithm>
#include <map>

#include "llmtrain/core/error.hpp"
#include "llmtrain/distributed/sharding_plan.hpp"
#include "llmtrain/model/activations.hpp"

namespace llmtrain {

std::vector<MemoryEstimate> estimate_memory(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size,
                                            int64_t world_size, AttentionBackend attention) {
  LLMTRAIN_CHECK(world_size >= 1, "world size must be >= 1, got {}", world_size);
  const double e = dtype_bytes(dtype);
  const double P = static_cast<double>(m.num_params());
  const double W = static_cast<double>(world_size);
  // AdamW: exp_avg + exp_avg_sq in fp32, plus fp32 master weights for 16-bit compute.
  const double opt_per_param = 8.0 + (e < 4.0 ? 4.0 : 0.0);
  const double act = activation_bytes(m, dtype, batch_size, attention);

  MemoryEstimate ddp{StrategyKind::ddp, P * e, P * e, P * opt_per_param, act};
  MemoryEstimate zero1{StrategyKind::zero1, P * e, P * e, P * opt_per_param / W, act};
  // FSDP units: the plan the strategy shards by (distributed/sharding_plan.hpp).
  // Each rank keeps 1/W of everything, plus the gathered weights of the unit in
  // use and the next (prefetched) one, and the full gradients of one unit
  // before its reduce-scatter: sized by the largest unit.
  double unit = 0;
  for (const auto& u : fsdp_sharding_plan(m)) unit = std::max(unit, static_cast<double>(u.numel));
  MemoryEstimate fsdp{StrategyKind::fsdp, P * e / W + (W > 1 ? 2 * unit * e : 0.0), P * e / W + (W > 1 ? unit * e : 0.0),
                      P * opt_per_param / W, act};
  return {ddp, zero1, fsdp};
}

}  // namespace llmtrain
