// Private: gradients and parameters laid out in flat buckets whose reductions
// start during the backward of the last micro-step (Megatron's
// param_and_grad_buffer: one bucketed buffer serves DDP's allreduce and
// ZeRO-1's reduce-scatter).
//
// Layout (bucket_layout.hpp, which the performance model reads too): parameters in reverse forward order (backward produces the last
// layers' gradients first), cut into buckets of about `bucket_bytes` of
// gradient, split where the dtype changes. Parameters are stored in
// Precision::param (float32: as given) and gradients in Precision::grad, the
// dtype of the collectives: with bf16 parameters and fp32 gradients, autograd's
// bf16 gradients are accumulated into fp32 buckets (Megatron's main_grad). Each bucket is padded to a multiple of `pad_to`
// (world size for reduce-scatter, so rank r owns [r*n/W, (r+1)*n/W); with
// allreduce every rank owns the whole bucket).
//
// Gradient flow (every micro-step goes through the hooks):
//   before each backward every param's .grad is undefined. A hook
//   (Tensor::register_hook, a pre-hook of the param's AccumulateGrad: it sees
//   the incoming gradient before accumulation) copies that gradient into the
//   bucket slot on its first arrival in the step and adds it after (earlier
//   micro-steps), and hands autograd the slot's view in its place, which
//   AccumulateGrad stores as .grad (16-bit gradients into fp32 buckets:
//   autograd keeps its own until the next backward or finish()). In the last
//   micro-step, when every slot of a bucket has arrived, the bucket's
//   collective starts (buckets start strictly in index order, so every rank
//   issues the same sequence); nothing is sent before it.
//   finish(): zeroes the slots that got no gradient anywhere in the step
//     (unused parameters) and starts their buckets, waits (the Collectives
//     time the waits), points .grad back at the bucket views. They hold the
//     sum over ranks: the optimizer folds 1/world into its gradient scale (no
//     division pass).
//   zero() (after the optimizer step, or a skipped one) launches nothing.
//
// Memory (issue 46; docs/memory.md): by default the buckets live from the
// first gradient of the step to zero(). A bucket's buffer (and ZeRO-1's
// grad_shard) is made (torch::empty) when its first gradient arrives
// (grad_shard: when its reduce-scatter starts), its padding tail zeroed then
// (it is reduced and enters the norm); zero() drops them and the params'
// .grad, so the forward and the start of the backward (all activations
// alive) hold no gradient memory, as PyTorch eager with
// zero_grad(set_to_none=True). `persistent` (use_cuda_graphs=True: the
// captured step needs fixed addresses) makes them once, zeroed, and keeps
// them: the same values to the bit.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "llmtrain/distributed/collectives.hpp"

namespace llmtrain {

class GradBuckets {
 public:
  enum class Reduce { allreduce, reduce_scatter };

  struct Slot {
    torch::Tensor param;
    int index = 0;       // position of the parameter in the constructor's `params`
    int bucket = 0;
    int64_t offset = 0;  // elements into the bucket
    int64_t numel = 0;
    bool decay = true;
  };
  struct Bucket {
    torch::ScalarType dtype = torch::kFloat;       // the parameters'
    torch::ScalarType grad_dtype = torch::kFloat;  // the gradients' and the collectives'
    torch::Tensor master_init;  // (numel,) fp32: the values before param_dtype rounded them (flattened, 16-bit)
    int64_t numel = 0;        // padded
    torch::Tensor grad;       // (numel,) the local sum, then (allreduce) the sum over ranks; undefined between steps unless persistent
    torch::Tensor grad_shard; // (numel / world,) reduce_scatter: this rank's shard of the sum over ranks (idem)
    torch::Tensor param;      // (numel,) when params are flattened
    std::vector<int> slots;
    int pending = 0;
    bool launched = false;
    std::unique_ptr<CommWork> work;
  };

  struct Precision {
    torch::ScalarType param = torch::kFloat;  // float32: the parameters' own dtype
    torch::ScalarType grad = torch::kFloat;   // the gradient buckets' (reduce_dtype)
  };
  // `flatten_params`: the parameters' storage moves into bucket.param (values
  // kept, in precision.param), so an all-gather into bucket.param updates the
  // model.
  // `persistent`: the gradient buffers are made once and kept (fixed
  // addresses); otherwise they live from a step's first gradient to zero().
  GradBuckets(const std::vector<torch::Tensor>& params, const std::vector<bool>& decay, double bucket_bytes,
              Collectives& comm, Reduce reduce, bool flatten_params, Precision precision, bool persistent);
  // Drops the buckets' master_init (once the optimizer has taken it).
  void release_master_init();
  ~GradBuckets();
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  void backward(const torch::Tensor& loss, bool last_micro);
  // Waits for the reductions; afterwards this rank's shard of every bucket
  // holds the sum over ranks (ShardedAdamW folds in 1/world).
  void finish();
  // The step's gradients are done with (after the optimizer step or a skipped
  // one): not persistent, the buffers and the params' .grad are dropped.
  void zero();
  bool persistent() const { return persistent_; }

  std::vector<Bucket>& buckets() { return buckets_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const std::vector<Slot>& slots() const { return slots_; }
  // This rank's shard of a bucket: elements [shard_begin, shard_begin +
  // shard_numel), 1/world of it after a reduce-scatter, all of it after an
  // allreduce; shard_grad is its averaged gradient (after finish()).
  int64_t shard_numel(const Bucket& b) const {
    return reduce_ == Reduce::allreduce ? b.numel : b.numel / comm_.world_size();
  }
  int64_t shard_begin(const Bucket& b) const { return reduce_ == Reduce::allreduce ? 0 : shard_numel(b) * comm_.rank(); }
  const torch::Tensor& shard_grad(const Bucket& b) const {
    return reduce_ == Reduce::allreduce ? b.grad : b.grad_shard;
  }

 private:
  void flatten(Bucket& b, torch::ScalarType param_dtype, torch::Device device);
  // Makes b.grad (not persistent: at the first gradient of a step), its padding tail zeroed.
  void make_grad(Bucket& b);
  // The slot's view to store as .grad in place of `grad`, or undefined (keep it).
  torch::Tensor on_grad(int slot, const torch::Tensor& grad);
  void launch_ready();
  void launch(Bucket& b);
  void point_grads_at_buckets();

  Collectives& comm_;
  Reduce reduce_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<unsigned> hook_ids_;
  bool persistent_ = false;
  bool in_last_ = false;
  bool in_step_ = false;      // a backward since zero(): got_ is this step's
  std::vector<char> got_;     // per slot: a gradient arrived in some micro-step of this step
  size_t next_launch_ = 0;
};

}  // namespace llmtrain
