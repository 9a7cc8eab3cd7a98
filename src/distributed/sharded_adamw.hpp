// Private: the one sharded AdamW of ZeRO-1 and FSDP (Megatron-LM's
// DistributedOptimizer, core/optimizer/distrib_optimizer.py, is the model).
//
// Both strategies lay parameters back to back in flat buffers padded to a
// multiple of the world size W; rank r owns the slice [r n/W, (r+1) n/W) of
// each buffer: a *shard*. A ShardRange says where one parameter overlaps this
// rank's shard, and everything sharded reads it: the decay split, the fp32
// master copy, the gradient norm, and the optimizer state that checkpoints
// write back into whole tensors.
//
// Per shard this rank keeps the AdamW moments (fp32) and, where parameters are
// stored below fp32, an fp32 master copy. The update is the fused kernel's
// (distributed/fused_adamw.hpp), as in DDP: decoupled decay p *= 1 - lr*wd on
// the decayed ranges, then the bias-corrected Adam step with eps added after
// the corrected sqrt.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

#include "llmtrain/distributed/strategy.hpp"

namespace llmtrain {

class Collectives;

// Where parameter `param` (an index into the strategy's ParamGroups::params)
// overlaps a shard: elements [param_offset, param_offset + numel) of the
// flattened parameter sit at [shard_offset, shard_offset + numel) of the shard.
struct ShardRange {
  int param = 0;
  int64_t param_offset = 0;
  int64_t shard_offset = 0;
  int64_t numel = 0;
  bool decay = true;
};

// A flat buffer of parameters: parameter k at `offsets[k]`, `numels[k]` long.
// Returns the ranges of those that overlap [shard_begin, shard_begin + shard_numel).
struct FlatEntry {
  int param = 0;
  int64_t offset = 0, numel = 0;
  bool decay = true;
};
std::vector<ShardRange> shard_ranges(const std::vector<FlatEntry>& entries, int64_t shard_begin, int64_t shard_numel);

// Per parameter of `g.params`: does AdamW decay it (not in g.no_decay)?
std::vector<bool> decay_flags(const ParamGroups& g);
// Every rank starts from rank 0's values (a broadcast per parameter).
void broadcast_params(const std::vector<torch::Tensor>& params, Collectives& comm);

class ShardedAdamW {
 public:
  ShardedAdamW(const AdamWHyper& hyper, Collectives& comm) : hyper_(hyper), comm_(comm) {}

  // One shard: `param` (n,) this rank's parameters (a view into a flat buffer,
  // or a tensor of its own), `grad` (n,) its averaged gradient (same dtype).
  // Returns the shard's index.
  size_t add_shard(torch::Tensor param, torch::Tensor grad, std::vector<ShardRange> ranges);

  // Global L2 norm of every rank's shards of the gradient (one allreduce).
  double grad_norm();
  // One AdamW step on every shard with gradients scaled by `grad_scale` (the
  // clip coefficient, divided by float16's loss scale): update the fp32 master
  // or the parameter, copy the master back, then `after_shard(i)` (ZeRO-1
  // starts that shard's all-gather there; FSDP refreshes a gathered unit).
  void step(double lr, double grad_scale, const std::function<void(size_t)>& after_shard);

  torch::Tensor param_shard(size_t i) const { return shards_.at(i).param; }
  int64_t steps() const { return step_; }
  int64_t state_bytes() const;
  size_t num_shards() const { return shards_.size(); }

  // Checkpoints: one slice per range of every shard, a view of the fp32
  // weights (the master copy, or the parameters where they are fp32) or of a
  // moment. The same views serve saving and loading; finish_load(steps) then
  // copies masters into the parameters and sets the step count.
  std::vector<StateSlice> slices(StateTensor what) const;
  void finish_load(int64_t steps);

 private:
  struct Shard {
    torch::Tensor param, grad, master, exp_avg, exp_avg_sq;
    std::vector<ShardRange> ranges;
  };
  AdamWHyper hyper_;
  Collectives& comm_;
  std::vector<Shard> shards_;
  int64_t step_ = 0;
};

}  // namespace llmtrain
