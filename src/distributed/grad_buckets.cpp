#include "distributed/grad_buckets.hpp"

#include "llmtrain/distributed/bucket_layout.hpp"

#include <fmt/format.h>

#include "llmtrain/core/error.hpp"

namespace llmtrain {

GradBuckets::GradBuckets(const std::vector<torch::Tensor>& params, const std::vector<bool>& decay,
                         double bucket_bytes, Collectives& comm, Reduce reduce, bool flatten_params,
                         Precision precision, bool persistent)
    : comm_(comm), reduce_(reduce), persistent_(persistent) {
  const int64_t grad_size = c10::elementSize(precision.grad);
  const int64_t pad_to = reduce == Reduce::reduce_scatter ? comm.world_size() : 1;
  std::vector<BucketParam> sizes;
  for (size_t k = 0; k < params.size(); ++k) {
    const auto& p = params[k];
    LLMTRAIN_CHECK(!p.requires_grad() || p.is_contiguous(), "parameter {} is not contiguous", k);
    // Buckets are cut by their gradients' bytes (the collectives' dtype), split where the parameters' dtype changes.
    sizes.push_back({p.numel(), static_cast<int>(grad_size), static_cast<int>(p.scalar_type()), p.requires_grad()});
  }
  const BucketLayout layout = plan_bucket_layout(sizes, bucket_bytes, pad_to);
  for (const auto& lb : layout.buckets) {
    buckets_.emplace_back();
    buckets_.back().dtype = static_cast<torch::ScalarType>(lb.dtype);
    buckets_.back().grad_dtype = precision.grad;
    buckets_.back().numel = lb.numel;  // padded to a multiple of pad_to
    buckets_.back().slots = lb.slots;
  }
  for (const auto& ls : layout.slots)
    slots_.push_back({params[ls.param], ls.param, ls.bucket, ls.offset, ls.numel, static_cast<bool>(decay[ls.param])});
  const auto device = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
  torch::NoGradGuard no_grad;
  for (auto& b : buckets_) {
    if (persistent_) {
      const auto grad_opts = torch::TensorOptions().dtype(b.grad_dtype).device(device);
      b.grad = torch::zeros({b.numel}, grad_opts);
      if (reduce_ == Reduce::reduce_scatter) b.grad_shard = torch::zeros({b.numel / pad_to}, grad_opts);
    }
    if (flatten_params) flatten(b, precision.param, device);
  }
  if (persistent_) point_grads_at_buckets();
  got_.assign(slots_.size(), 0);
  for (size_t i = 0; i < slots_.size(); ++i) {
    const int si = static_cast<int>(i);
    hook_ids_.push_back(
        slots_[i].param.register_hook([this, si](const torch::Tensor& g) -> torch::Tensor { return on_grad(si, g); }));
  }
}

// The bucket's parameters into one flat buffer, stored in `param_dtype`
// (float32: their own); rounded below fp32, their fp32 values stay in
// master_init for the optimizer's master copy.
void GradBuckets::flatten(Bucket& b, torch::ScalarType param_dtype, torch::Device device) {
  auto values = torch::zeros({b.numel}, torch::TensorOptions().dtype(b.dtype).device(device));
  for (int si : b.slots) values.narrow(0, slots_[si].offset, slots_[si].numel).copy_(slots_[si].param.reshape({-1}));
  if (param_dtype != torch::kFloat && param_dtype != b.dtype) {
    if (b.dtype == torch::kFloat) b.master_init = values;
    values = values.to(param_dtype);
    b.dtype = param_dtype;
  }
  b.param = values;
  for (int si : b.slots) {
    auto& s = slots_[si];
    s.param.set_data(b.param.narrow(0, s.offset, s.numel).view(s.param.sizes()));  // lives in the flat buffer
  }
}

void GradBuckets::release_master_init() {
  for (auto& b : buckets_) b.master_init = torch::Tensor();
}

GradBuckets::~GradBuckets() {
  for (auto& b : buckets_)
    if (b.work) b.work->wait();
  for (size_t i = 0; i < slots_.size(); ++i) slots_[i].param.remove_hook(hook_ids_[i]);
}

void GradBuckets::point_grads_at_buckets() {
  for (auto& s : slots_)
    s.param.mutable_grad() = buckets_[s.bucket].grad.narrow(0, s.offset, s.numel).view(s.param.sizes());
}

void GradBuckets::make_grad(Bucket& b) {
  if (b.grad.defined()) return;
  const auto& p = slots_[b.slots.front()].param;
  b.grad = torch::empty({b.numel}, torch::TensorOptions().dtype(b.grad_dtype).device(p.device()));
  // The padding tail (numel rounded up to the world size) is reduced with the
  // bucket and enters the norm: zero. The slots are written by their hooks
  // (or zeroed by finish()).
  const auto& last = slots_[b.slots.back()];
  const int64_t end = last.offset + last.numel;
  if (end < b.numel) b.grad.narrow(0, end, b.numel - end).zero_();
}

void GradBuckets::backward(const torch::Tensor& loss, bool last_micro) {
  in_last_ = last_micro;
  if (!in_step_) {
    got_.assign(slots_.size(), 0);
    in_step_ = true;
  }
  // Autograd's own accumulation never touches the buckets: .grad is undefined
  // until each hook hands autograd its bucket view to store (no second copy),
  // and the hooks copy or add (a collective may be reducing a bucket in the
  // last micro-step).
  for (auto& s : slots_) s.param.mutable_grad() = torch::Tensor();
  if (last_micro) {
    for (auto& b : buckets_) {
      b.pending = static_cast<int>(b.slots.size());
      b.launched = false;
    }
    next_launch_ = 0;
  }
  loss.backward();
}

torch::Tensor GradBuckets::on_grad(int si, const torch::Tensor& g) {
  auto& s = slots_[si];
  auto& b = buckets_[s.bucket];
  torch::NoGradGuard no_grad;
  make_grad(b);
  auto slot = b.grad.narrow(0, s.offset, s.numel);
  // The first gradient of the step overwrites the slot (what the last step
  // left there, or torch::empty's bytes, needs no zeroing); later micro-steps add.
  if (got_[si])
    slot.add_(g.reshape({-1}));
  else
    slot.copy_(g.reshape({-1}));
  got_[si] = 1;
  if (in_last_) {
    if (--b.pending == 0) launch_ready();
    // Open MPI progresses nonblocking collectives only inside MPI calls: poll the
    // ones in flight from the backward that runs alongside them. NCCL needs no
    // polling (and each test() would be a cudaEventQuery).
    if (!b.grad.is_cuda())
      for (size_t i = 0; i < next_launch_; ++i)
        if (buckets_[i].work) buckets_[i].work->test();
  }
  // The bucket view replaces autograd's gradient: AccumulateGrad stores it as
  // .grad (it steals a tensor nobody else holds) and autograd's own gradient is
  // freed now, not kept as a second copy until finish(). A hook may not change
  // the dtype: with 16-bit gradients into fp32 buckets autograd keeps its own.
  if (g.scalar_type() != slot.scalar_type() || g.device() != slot.device()) return {};
  return slot.view(s.param.sizes());
}

void GradBuckets::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(buckets_[next_launch_++]);
}

void GradBuckets::launch(Bucket& b) {
  b.launched = true;
  if (reduce_ == Reduce::allreduce) {
    b.work = comm_.allreduce_sum_async(b.grad);
  } else {
    // The reduce-scatter writes the shard whole: made here, not zeroed.
    if (!b.grad_shard.defined()) b.grad_shard = torch::empty({b.numel / comm_.world_size()}, b.grad.options());
    b.work = comm_.reduce_scatter_sum_async(b.grad, b.grad_shard);
  }
}

void GradBuckets::finish() {
  LLMTRAIN_CHECK(in_last_, "finish_gradients() called without a backward(loss, last_micro=true) before it");
  // Buckets whose parameters got no gradient in this backward (unused
  // parameters) start now, still in index order.
  torch::NoGradGuard no_grad;
  while (next_launch_ < buckets_.size()) {
    // Slots that received a gradient in no micro-step of this step (unused
    // parameters) hold what the last step left, or nothing yet: zeroed here.
    auto& b = buckets_[next_launch_++];
    make_grad(b);
    for (int si : b.slots)
      if (!got_[si]) b.grad.narrow(0, slots_[si].offset, slots_[si].numel).zero_();
    launch(b);
  }
  for (auto& b : buckets_) {
    b.work->wait();
    b.work.reset();
  }
  // The buckets hold the sum over ranks: the optimizer folds 1/world into its
  // gradient scale and the norm divides once (ShardedAdamW), instead of a pass
  // over every gradient here.
  point_grads_at_buckets();
  in_last_ = false;
}

void GradBuckets::zero() {
  // No pass over the buckets here: the next step's first gradient of each slot
  // overwrites it, and finish() zeroes the slots that get none.
  in_step_ = false;
  if (persistent_) return;
  // The gradients are done with: nothing of them lives through the next
  // forward (the params' .grad views would keep the buffers alive).
  for (auto& s : slots_) s.param.mutable_grad() = torch::Tensor();
  for (auto& b : buckets_) {
    b.grad = torch::Tensor();
    b.grad_shard = torch::Tensor();
  }
}

}  // namespace llmtrain
