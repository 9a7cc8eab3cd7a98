#include "llmtrain/distributed/strategy.hpp"

#include <functional>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include "distributed/fsdp.hpp"
#include "distributed/grad_buckets.hpp"
#include "distributed/sharded_adamw.hpp"
#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/distributed/collectives.hpp"

namespace llmtrain {

const char* to_string(StateTensor t) {
  switch (t) {
    case StateTensor::weights: return "weights";
    case StateTensor::exp_avg: return "exp_avg";
    case StateTensor::exp_avg_sq: return "exp_avg_sq";
  }
  return "?";
}

StrategyOptions StrategyOptions::from_config(const Config& c) {
  StrategyOptions o;
  o.kind = c.strategy();
  o.bucket_bytes = c.ddp_bucket_mb * 1024.0 * 1024.0;
  o.fsdp_prefetch = c.fsdp_prefetch;
  o.param_dtype = c.param_dtype == ParamDtype::bfloat16 ? torch::kBFloat16 : torch::kFloat;
  o.reduce_dtype = c.reduce_dtype == ReduceDtype::bfloat16 ? torch::kBFloat16 : torch::kFloat;
  o.persistent_grads = c.use_cuda_graphs;  // the captured step needs fixed addresses
  o.adamw.beta1 = c.beta1;
  o.adamw.beta2 = c.beta2;
  o.adamw.weight_decay = c.weight_decay;
  return o;
}

namespace {

// Each bucket becomes one shard of the AdamW: this rank's shard of it (all of
// it under DDP's allreduce, 1/world of it under ZeRO-1's reduce-scatter), its
// parameters' ranges in it and their decay flags.
void add_bucket_shards(GradBuckets& buckets, ShardedAdamW& adam) {
  const auto& slots = buckets.slots();
  for (const auto& b : buckets.buckets()) {
    std::vector<FlatEntry> entries;
    for (int si : b.slots) entries.push_back({slots[si].index, slots[si].offset, slots[si].numel, slots[si].decay});
    const int64_t lo = buckets.shard_begin(b), n = buckets.shard_numel(b);
    // Parameters stored below fp32: the master copy starts from their fp32 values.
    auto master = b.master_init.defined() ? b.master_init.narrow(0, lo, n).clone() : torch::Tensor();
    adam.add_shard(b.param.narrow(0, lo, n), buckets.shard_grad(b), shard_ranges(entries, lo, n), master);
  }
  buckets.release_master_init();
}

// The optimizer's view of the buckets' gradients: after finish() the step's
// buffers, after zero() undefined (not persistent: the buffers are dropped,
// and the optimizer must not keep them alive through the next forward).
void share_bucket_grads(GradBuckets& buckets, ShardedAdamW& adam) {
  const auto& bs = buckets.buckets();
  for (size_t i = 0; i < bs.size(); ++i) adam.set_shard_grad(i, buckets.shard_grad(bs[i]));
}

int64_t held_bytes(const torch::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

GradBuckets::Precision bucket_precision(const StrategyOptions& o) { return {o.param_dtype, o.reduce_dtype}; }

// ---- plain data parallel ---------------------------------------------------------
// The distributed optimizer with a shard group of one (Megatron's DDP): buckets
// as in ZeRO-1, all-reduced instead of reduce-scattered, and every rank owns
// every bucket whole (ShardedAdamW::Sharding::replicated). The gradients are
// identical on every rank after the allreduce, so every rank takes the same
// step and nothing is gathered afterwards.

class DdpStrategy final : public Strategy {
 public:
  DdpStrategy(const StrategyOptions& o, const ParamGroups& g, Collectives& comm)
      : params_(g.params),
        // Rank 0's values reach every rank before the buckets copy them.
        buckets_((broadcast_params(g.params, comm), g.params), decay_flags(g), o.bucket_bytes, comm,
                 GradBuckets::Reduce::allreduce, /*flatten_params=*/true, bucket_precision(o),
                 o.persistent_grads),
        adam_(o.adamw, comm, ShardedAdamW::Sharding::replicated) {
    add_bucket_shards(buckets_, adam_);
  }

  std::string name() const override { return "ddp"; }
  void backward(const torch::Tensor& loss, bool last_micro) override { buckets_.backward(loss, last_micro); }
  void finish_gradients() override {
    buckets_.finish();
    share_bucket_grads(buckets_, adam_);
  }
  double grad_norm() override { return adam_.grad_norm(); }  // no traffic: the gradients are the same everywhere

  // The clip coefficient goes into the fused kernel, which scales the
  // gradients as it reads them.
  void step(double lr, double clip_coef) override {
    adam_.step(lr, clip_coef, /*after_shard=*/nullptr);
    zero();
  }
  void skip_step() override { zero(); }
  torch::Tensor grad_norm_tensor() override { return adam_.grad_norm_tensor(); }
  void step(const torch::Tensor& lr, const torch::Tensor& grad_scale, const torch::Tensor& found_inf) override {
    adam_.step(lr, grad_scale, found_inf, /*after_shard=*/nullptr);
    zero();
  }
  void step(double lr, const torch::Tensor& grad_scale, const torch::Tensor& found_inf) override {
    adam_.step(lr, grad_scale, found_inf, /*after_shard=*/nullptr);
    zero();
  }

  // Every rank holds the same state: rank 0 saves all of it, every rank loads all of it.
  std::vector<StateSlice> save_slices(StateTensor what) override { return adam_.save_slices(what); }
  std::vector<StateSlice> load_slices(StateTensor what) override { return adam_.load_slices(what); }
  void finish_load(int64_t optimizer_steps) override { adam_.finish_load(optimizer_steps); }
  int64_t optimizer_steps() const override { return adam_.steps(); }

  int64_t optimizer_state_bytes() const override { return adam_.state_bytes(); }
  int64_t persistent_state_bytes() const override {
    int64_t b = adam_.state_bytes();
    for (const auto& bk : buckets_.buckets()) b += bk.param.nbytes() + held_bytes(bk.grad);  // gradients: persistent only
    for (const auto& p : params_)
      if (!p.requires_grad()) b += p.nbytes();  // not in a bucket
    return b;
  }

 private:
  void zero() {
    buckets_.zero();
    share_bucket_grads(buckets_, adam_);
  }

  std::vector<torch::Tensor> params_;
  GradBuckets buckets_;
  ShardedAdamW adam_;
};

// ---- ZeRO-1 ---------------------------------------------------------------------
// Buckets as in DDP, reduce-scattered instead of all-reduced: rank r owns
// [r*n/W, (r+1)*n/W) of every (padded) bucket; the sharded AdamW keeps the
// moments (and an fp32 master copy when parameters are stored in a lower
// precision) for that range only and updates it, and the bucket's parameters
// are all-gathered in place.

class Zero1Strategy final : public Strategy {
 public:
  Zero1Strategy(const StrategyOptions& o, const ParamGroups& g, Collectives& comm)
      : comm_(comm),
        buckets_((broadcast_params(g.params, comm), g.params), decay_flags(g), o.bucket_bytes, comm,
                 GradBuckets::Reduce::reduce_scatter, /*flatten_params=*/true, bucket_precision(o),
                 o.persistent_grads),
        adam_(o.adamw, comm) {
    add_bucket_shards(buckets_, adam_);
  }

  std::string name() const override { return "zero1"; }
  void backward(const torch::Tensor& loss, bool last_micro) override { buckets_.backward(loss, last_micro); }
  void finish_gradients() override {
    buckets_.finish();
    share_bucket_grads(buckets_, adam_);
  }
  double grad_norm() override { return adam_.grad_norm(); }

  // One fused AdamW call per weight-decay group updates every shard, then
  // each bucket's parameter all-gather starts; the wait at the end is the
  // exposed part.
  void step(double lr, double clip_coef) override {
    step_and_gather([&](const std::function<void(size_t)>& after) { adam_.step(lr, clip_coef, after); });
  }
  void skip_step() override { zero(); }
  torch::Tensor grad_norm_tensor() override { return adam_.grad_norm_tensor(); }
  // A skipped step (found_inf = 1) gathers the unchanged shards: the same
  // collectives on every rank either way, and no host read to choose.
  void step(const torch::Tensor& lr, const torch::Tensor& grad_scale, const torch::Tensor& found_inf) override {
    step_and_gather(
        [&](const std::function<void(size_t)>& after) { adam_.step(lr, grad_scale, found_inf, after); });
  }
  void step(double lr, const torch::Tensor& grad_scale, const torch::Tensor& found_inf) override {
    step_and_gather(
        [&](const std::function<void(size_t)>& after) { adam_.step(lr, grad_scale, found_inf, after); });
  }

  // `adam_step(after_shard)` runs the AdamW step (one fused call per
  // weight-decay group over every shard); each bucket's parameter all-gather
  // starts after it, in bucket order, and they travel together.
  template <typename AdamStep>
  void step_and_gather(const AdamStep& adam_step) {
    torch::NoGradGuard no_grad;
    auto& bs = buckets_.buckets();
    std::vector<std::unique_ptr<CommWork>> gathers;
    adam_step([&](size_t i) {
      for (auto& w : gathers) w->test();  // MPI progresses nonblocking collectives inside its calls
      auto shard = adam_.param_shard(i);
      gathers.push_back(comm_.all_gather_async(shard, bs[i].param));  // in place: the shard sits in the bucket
    });
    for (auto& w : gathers) w->wait();
    zero();
  }
  void zero() {
    buckets_.zero();
    share_bucket_grads(buckets_, adam_);
  }

  std::vector<StateSlice> save_slices(StateTensor what) override { return adam_.save_slices(what); }
  std::vector<StateSlice> load_slices(StateTensor what) override { return adam_.load_slices(what); }
  void finish_load(int64_t optimizer_steps) override {
    torch::NoGradGuard no_grad;
    adam_.finish_load(optimizer_steps);
    auto& bs = buckets_.buckets();
    for (size_t i = 0; i < bs.size(); ++i) {  // every rank's full parameters from the owners' shards
      auto shard = adam_.param_shard(i);
      comm_.all_gather(shard, bs[i].param);
    }
  }
  int64_t optimizer_steps() const override { return adam_.steps(); }

  int64_t optimizer_state_bytes() const override { return adam_.state_bytes(); }
  int64_t persistent_state_bytes() const override {
    int64_t b = adam_.state_bytes();
    for (auto& bk : buckets_.buckets())
      b += bk.param.nbytes() + held_bytes(bk.grad) + held_bytes(bk.grad_shard);  // gradients: persistent only
    return b;
  }

 private:
  Collectives& comm_;
  GradBuckets buckets_;
  ShardedAdamW adam_;
};

}  // namespace

double clip_coefficient(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

torch::Tensor clip_coefficient(const torch::Tensor& norm, double max_norm) {
  torch::NoGradGuard no_grad;
  const auto n = norm.to(torch::kDouble);
  if (!(max_norm > 0)) return torch::ones({}, n.options());
  // A true division (max_norm * reciprocal would round differently); a NaN
  // norm is not > max_norm and gives 1 (its step is skipped anyway).
  const auto coef = torch::full({}, max_norm, n.options()).div(n + 1e-6);
  return torch::where(n > max_norm, coef, 1.0);
}

std::unique_ptr<Strategy> make_strategy(const StrategyOptions& options, const ParamGroups& groups, Collectives& comm) {
  switch (options.kind) {
    case StrategyOptions::Kind::fsdp: return make_fsdp_strategy(options, groups, comm, /*hooks=*/nullptr);
    case StrategyOptions::Kind::zero1: return std::make_unique<Zero1Strategy>(options, groups, comm);
    case StrategyOptions::Kind::ddp: break;
  }
  return std::make_unique<DdpStrategy>(options, groups, comm);
}

}  // namespace llmtrain
