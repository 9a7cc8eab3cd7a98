// Private: the one AdamW of every strategy (Megatron-LM's DistributedOptimizer,
// core/optimizer/distrib_optimizer.py, is the model).
//
// Every strategy lays parameters back to back in flat buffers. ZeRO-1 and FSDP
// pad them to a multiple of the world size W and rank r owns the slice
// [r n/W, (r+1) n/W) of each buffer: a *shard*. DDP is the same optimizer with
// a shard group of one (Megatron's DDP): every rank owns every buffer whole
// (Sharding::replicated), holds the same gradients after the allreduce and
// takes the same step. A ShardRange says where one parameter overlaps this
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
struct AdamWStepArgs;  // distributed/fused_adamw.hpp

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
  // across_ranks (ZeRO-1, FSDP): each rank's shards are its part of the state.
  // replicated (DDP): every rank's shards are all of it, the same on every rank.
  enum class Sharding { across_ranks, replicated };

  ShardedAdamW(const AdamWHyper& hyper, Collectives& comm, Sharding sharding = Sharding::across_ranks)
      : hyper_(hyper), comm_(comm), sharding_(sharding) {}

  // One shard: `param` (n,) this rank's parameters (a view into a flat buffer,
  // or a tensor of its own), `grad` (n,) its gradient summed over the ranks (any float
  // dtype; the update reads it in fp32), or undefined until set_shard_grad. Where `param` is below fp32 the shard
  // keeps an fp32 master copy: `master_init` (n,) fp32 when given (the values
  // before they were rounded to param's dtype), else param's values.
  // Returns the shard's index.
  size_t add_shard(torch::Tensor param, torch::Tensor grad, std::vector<ShardRange> ranges,
                   torch::Tensor master_init = {});

  // Global L2 norm of the gradient: the norms of all shards in one
  // _foreach_norm (fp32), their squares summed in double, then over ranks (one
  // allreduce; none when replicated, where every rank holds the whole summed
  // gradient), divided by the world size: the norm of the average over ranks,
  // which the gradients hold as sums. grad_norm() reads it on the host; grad_norm_tensor() leaves it
  // on the device, a 0-dim double tensor (the same value to the bit).
  double grad_norm();
  torch::Tensor grad_norm_tensor();
  // One AdamW step on every shard with gradients scaled by `grad_scale` (the
  // clip coefficient, divided by float16's loss scale) and by 1/world (the
  // gradients are sums over ranks; the kernel's divisor): update the fp32 master
  // or the parameter, copy the master back, then `after_shard(i)` (ZeRO-1
  // starts that shard's all-gather there; FSDP refreshes a gathered unit).
  // One fused call per weight-decay group over every shard; the callbacks
  // follow it, in shard order.
  void step(double lr, double grad_scale, const std::function<void(size_t)>& after_shard);
  // The same with the learning rate and gradient scale as 0-dim fp32 tensors
  // on the shards' device, and `found_inf` (0-dim fp32, 1 = skip): a skipped
  // step leaves parameters, moments and the step count as they were, decided
  // on the device (no host read).
  void step(const torch::Tensor& lr, const torch::Tensor& grad_scale, const torch::Tensor& found_inf,
            const std::function<void(size_t)>& after_shard);
  // The same with the learning rate from the host: a kernel argument, no
  // copy (the CPU kernel reads a tensor learning rate with item()). The
  // gradient scale is best given in double (the divisor is made in double).
  void step(double lr, const torch::Tensor& grad_scale, const torch::Tensor& found_inf,
            const std::function<void(size_t)>& after_shard);

  torch::Tensor param_shard(size_t i) const { return shards_.at(i).param; }
  // Shard i's gradient from now on: GradBuckets makes its buffers during each
  // backward and drops them after the step (undefined then), so DDP and ZeRO-1
  // hand the optimizer the step's gradient after finish() and take it back
  // after the step. `grad` (n,) as in add_shard, or undefined.
  void set_shard_grad(size_t i, torch::Tensor grad);
  // Steps taken: read from the device's step count (a host wait on a GPU;
  // checkpoints ask).
  int64_t steps() const;
  int64_t state_bytes() const;
  size_t num_shards() const { return shards_.size(); }

  // Checkpoints: one slice per range of every shard, a view of the fp32
  // weights (the master copy, or the parameters where they are fp32) or of a
  // moment. The same views serve saving and loading (replicated: rank 0 saves,
  // every rank loads); finish_load(steps) then copies masters into the
  // parameters and sets the step count.
  std::vector<StateSlice> save_slices(StateTensor what) const;
  std::vector<StateSlice> load_slices(StateTensor what) const { return slices(what); }
  void finish_load(int64_t steps);

 private:
  struct Shard {
    torch::Tensor param, grad, master, exp_avg, exp_avg_sq;
    std::vector<ShardRange> ranges;
  };
  std::vector<StateSlice> slices(StateTensor what) const;
  torch::Tensor grad_sq();  // (1) double: the squared global norm of the sums over ranks
  double world() const;     // the gradients hold sums over this many ranks
  void update(const AdamWStepArgs& a, const std::function<void(size_t)>& after_shard);
  void step_on_device(const torch::Tensor& lr_tensor, double lr, const torch::Tensor& grad_scale,
                      const torch::Tensor& found_inf, const std::function<void(size_t)>& after_shard);

  AdamWHyper hyper_;
  Collectives& comm_;
  Sharding sharding_;
  std::vector<Shard> shards_;
  // 0-dim fp32 on the shards' device: AdamW's step count, which the fused
  // kernel reads (incremented on the device, so a step needs no new tensor).
  torch::Tensor step_;
};

}  // namespace llmtrain
