#include "distributed/sharded_adamw.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "distributed/fused_adamw.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/distributed/collectives.hpp"

namespace llmtrain {

std::vector<ShardRange> shard_ranges(const std::vector<FlatEntry>& entries, int64_t shard_begin,
                                     int64_t shard_numel) {
  std::vector<ShardRange> out;
  const int64_t lo = shard_begin, hi = shard_begin + shard_numel;
  for (const auto& e : entries) {
    const int64_t a = std::max(lo, e.offset), b = std::min(hi, e.offset + e.numel);
    if (a < b) out.push_back({e.param, a - e.offset, a - lo, b - a, e.decay});
  }
  return out;
}

std::vector<bool> decay_flags(const ParamGroups& g) {
  std::unordered_set<const void*> no_decay;
  for (const auto& p : g.no_decay) no_decay.insert(p.unsafeGetTensorImpl());
  std::vector<bool> decay;
  for (const auto& p : g.params) decay.push_back(no_decay.count(p.unsafeGetTensorImpl()) == 0);
  return decay;
}

void broadcast_params(const std::vector<torch::Tensor>& params, Collectives& comm) {
  torch::NoGradGuard no_grad;
  for (const auto& p : params) {
    auto t = p.detach();
    comm.broadcast(t, 0);
  }
}

size_t ShardedAdamW::add_shard(torch::Tensor param, torch::Tensor grad, std::vector<ShardRange> ranges,
                               torch::Tensor master_init) {
  torch::NoGradGuard no_grad;
  LLMTRAIN_CHECK(param.dim() == 1 && (!grad.defined() || (grad.dim() == 1 && param.numel() == grad.numel())),
                 "sharded AdamW: shard of {} parameters with {} gradient elements", param.numel(), grad.numel());
  Shard s;
  const auto fp32 = torch::TensorOptions().dtype(torch::kFloat).device(param.device());
  s.param = param;
  s.grad = grad;
  if (param.scalar_type() != torch::kFloat) {
    LLMTRAIN_CHECK(!master_init.defined() || (master_init.scalar_type() == torch::kFloat &&
                                              master_init.numel() == param.numel()),
                   "sharded AdamW: the master copy of a shard of {} parameters is not {} fp32 values",
                   param.numel(), param.numel());
    s.master = master_init.defined() ? master_init.contiguous() : param.to(torch::kFloat);
  }
  s.exp_avg = torch::zeros({param.numel()}, fp32);
  s.exp_avg_sq = torch::zeros({param.numel()}, fp32);
  s.ranges = std::move(ranges);
  if (!step_.defined()) step_ = torch::zeros({}, fp32);
  shards_.push_back(std::move(s));
  return shards_.size() - 1;
}

void ShardedAdamW::set_shard_grad(size_t i, torch::Tensor grad) {
  auto& s = shards_.at(i);
  LLMTRAIN_CHECK(!grad.defined() || (grad.dim() == 1 && grad.numel() == s.param.numel()),
                 "sharded AdamW: shard {} of {} parameters given {} gradient elements", i, s.param.numel(),
                 grad.defined() ? grad.numel() : 0);
  s.grad = std::move(grad);
}

torch::Tensor ShardedAdamW::grad_sq() {
  const auto device = shards_.empty() ? torch::Device(torch::kCPU) : shards_.front().grad.device();
  auto sq = torch::zeros({1}, torch::TensorOptions().dtype(torch::kDouble).device(device));
  if (!shards_.empty()) {
    std::vector<torch::Tensor> grads;
    for (const auto& s : shards_) grads.push_back(s.grad);
    // A 16-bit gradient's norm in fp32: bf16 would keep 3 digits of it.
    const auto norms = at::_foreach_norm(grads, 2, torch::kFloat);  // one fp32 norm per shard
    sq.add_(at::stack(norms).to(torch::kDouble).square().sum());
  }
  // Replicated: identical on every rank, no traffic. Sharded: NCCL reduces device memory only.
  if (sharding_ != Sharding::replicated) comm_.allreduce_sum(sq);
  return sq;
}

// The gradients hold sums over ranks: the norm of the average is the norm of
// the sum over the world size (one division of a scalar, no pass over them).
double ShardedAdamW::grad_norm() { return std::sqrt(grad_sq().item<double>()) / world(); }

// In double, as grad_norm(): the clip coefficient made from it on the device is
// the host's to the bit (IEEE sqrt, add and divide round alike everywhere).
torch::Tensor ShardedAdamW::grad_norm_tensor() { return grad_sq().sqrt().div(world()).reshape({}); }

void ShardedAdamW::step(double lr, double grad_scale, const std::function<void(size_t)>& after_shard) {
  torch::NoGradGuard no_grad;
  if (shards_.empty()) return;
  step_.add_(1);
  AdamWStepArgs a;
  a.step = step_;
  a.lr = lr;
  const double scale = grad_scale / world();  // the gradients hold sums over ranks
  if (scale != 1.0) a.divisor = torch::full({}, 1.0 / scale, step_.options());
  update(a, after_shard);
}

void ShardedAdamW::step(const torch::Tensor& lr, const torch::Tensor& grad_scale, const torch::Tensor& found_inf,
                        const std::function<void(size_t)>& after_shard) {
  step_on_device(lr, 0.0, grad_scale, found_inf, after_shard);
}

void ShardedAdamW::step(double lr, const torch::Tensor& grad_scale, const torch::Tensor& found_inf,
                        const std::function<void(size_t)>& after_shard) {
  step_on_device(torch::Tensor(), lr, grad_scale, found_inf, after_shard);
}

void ShardedAdamW::step_on_device(const torch::Tensor& lr_tensor, double lr, const torch::Tensor& grad_scale,
                                  const torch::Tensor& found_inf, const std::function<void(size_t)>& after_shard) {
  torch::NoGradGuard no_grad;
  if (shards_.empty()) return;
  step_.add_(1);
  AdamWStepArgs a;
  a.step = step_;
  a.lr = lr;
  // On CUDA the kernel reads the learning rate as fp32 device memory; the CPU
  // kernel reads it with item() into a double, so a double tensor there keeps
  // the host's double (the captured step's CPU twin: train/graph_step.hpp).
  if (lr_tensor.defined())
    a.lr_tensor = (lr_tensor.is_cpu() && lr_tensor.scalar_type() == torch::kDouble ? lr_tensor
                                                                                    : lr_tensor.to(step_.options()))
                      .reshape({});
  // The divisor in double, then fp32: the host step's (float)(1.0 / (grad_scale
  // / world)) to the bit. Without clipping on one rank it is 1, and x / 1 = x.
  // The gradients hold sums over ranks: 1/world folded in here.
  a.divisor = grad_scale.to(torch::kDouble).reshape({}).div(world()).reciprocal().to(torch::kFloat);
  a.found_inf = found_inf.to(step_.options()).reshape({});
  update(a, after_shard);
  step_.sub_(*a.found_inf);  // a skipped step is not counted (torch.optim does the same)
}

void ShardedAdamW::update(const AdamWStepArgs& a, const std::function<void(size_t)>& after_shard) {
  // The fused kernel wants the gradient in the dtype of what it updates.
  auto add_ranges = [&](Shard& s, AdamWLists& dec, AdamWLists& nodec) {
    auto& p = s.master.defined() ? s.master : s.param;
    auto g = s.grad.scalar_type() == p.scalar_type() ? s.grad : s.grad.to(p.scalar_type());
    for (const auto& r : s.ranges)
      (r.decay ? dec : nodec)
          .add(p.narrow(0, r.shard_offset, r.numel), g.narrow(0, r.shard_offset, r.numel),
               s.exp_avg.narrow(0, r.shard_offset, r.numel), s.exp_avg_sq.narrow(0, r.shard_offset, r.numel));
  };
  // One fused call per weight-decay group over every shard (issue 46: one
  // launch sequence per group, not two per shard), then each shard's master
  // copied back and its callback, in shard order.
  AdamWLists dec, nodec;
  for (auto& s : shards_) add_ranges(s, dec, nodec);
  fused_adamw_step(dec, hyper_, a, hyper_.weight_decay);
  fused_adamw_step(nodec, hyper_, a, 0.0);
  for (size_t i = 0; i < shards_.size(); ++i) {
    auto& s = shards_[i];
    if (s.master.defined()) s.param.copy_(s.master);
    if (after_shard) after_shard(i);
  }
}

int64_t ShardedAdamW::steps() const {
  return step_.defined() ? static_cast<int64_t>(step_.item<float>()) : 0;
}

double ShardedAdamW::world() const { return static_cast<double>(comm_.world_size()); }

int64_t ShardedAdamW::state_bytes() const {
  int64_t b = 0;
  for (const auto& s : shards_)
    b += s.exp_avg.nbytes() + s.exp_avg_sq.nbytes() + (s.master.defined() ? s.master.nbytes() : 0);
  return b;
}

std::vector<StateSlice> ShardedAdamW::save_slices(StateTensor what) const {
  // Replicated: every rank holds the same state; rank 0's covers every element once.
  if (sharding_ == Sharding::replicated && comm_.rank() != 0) return {};
  return slices(what);
}

std::vector<StateSlice> ShardedAdamW::slices(StateTensor what) const {
  std::vector<StateSlice> out;
  for (const auto& s : shards_) {
    const torch::Tensor& src = what == StateTensor::exp_avg      ? s.exp_avg
                               : what == StateTensor::exp_avg_sq ? s.exp_avg_sq
                               : s.master.defined()              ? s.master
                                                                 : s.param;
    LLMTRAIN_CHECK(src.scalar_type() == torch::kFloat, "sharded AdamW: {} of a shard is {}, expected float32",
                   to_string(what), c10::toString(src.scalar_type()));
    for (const auto& r : s.ranges) out.push_back({r.param, r.param_offset, src.narrow(0, r.shard_offset, r.numel)});
  }
  return out;
}

void ShardedAdamW::finish_load(int64_t steps) {
  torch::NoGradGuard no_grad;
  for (auto& s : shards_)
    if (s.master.defined()) s.param.copy_(s.master);
  if (step_.defined()) step_.fill_(static_cast<double>(steps));
}

}  // namespace llmtrain
