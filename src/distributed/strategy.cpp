#include "llmtrain/distributed/strategy.hpp"

#include <array>
#include <cmath>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include "distributed/fsdp.hpp"
#include "distributed/fused_adamw.hpp"
#include "distributed/grad_buckets.hpp"
#include "distributed/sharded_adamw.hpp"
#include "distributed/timed_wait.hpp"
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
  o.adamw.beta1 = c.beta1;
  o.adamw.beta2 = c.beta2;
  o.adamw.weight_decay = c.weight_decay;
  return o;
}

namespace {

// ---- plain data parallel ---------------------------------------------------------

class DdpStrategy final : public Strategy {
 public:
  DdpStrategy(const StrategyOptions& o, const ParamGroups& g, Collectives& comm)
      : comm_(comm),
        params_(g.params),
        decay_(decay_flags(g)),
        hyper_(o.adamw),
        // Rank 0's values reach every rank before the buckets copy them.
        buckets_((broadcast_params(g.params, comm), g.params), decay_, o.bucket_bytes, comm,
                 GradBuckets::Reduce::allreduce, /*flatten_params=*/false) {
    torch::NoGradGuard no_grad;
    for (const auto& p : params_) {
      exp_avg_.push_back(p.requires_grad() ? torch::zeros_like(p) : torch::Tensor());
      exp_avg_sq_.push_back(p.requires_grad() ? torch::zeros_like(p) : torch::Tensor());
      if (p.requires_grad()) state_bytes_ += 2 * p.numel() * p.element_size();
    }
  }

  std::string name() const override { return "ddp"; }
  void backward(const torch::Tensor& loss, bool last_micro) override { buckets_.backward(loss, last_micro); }
  void finish_gradients() override { exposed_ += buckets_.finish(); }

  double grad_norm() override {
    // Gradients are identical on every rank after the allreduce: no traffic.
    double sq = 0;
    for (auto& b : buckets_.buckets()) {
      const double n = b.grad.norm().item<double>();
      sq += n * n;
    }
    return std::sqrt(sq);
  }

  // The clip coefficient goes into the fused kernel, which scales the
  // gradients as it reads them.
  void step(double lr, double clip_coef) override {
    torch::NoGradGuard no_grad;
    ++steps_;
    AdamWLists dec, nodec;
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i];
      if (!p.requires_grad() || !p.grad().defined()) continue;
      (decay_[i] ? dec : nodec).add(p.detach(), p.grad(), exp_avg_[i], exp_avg_sq_[i]);
    }
    fused_adamw_step(dec, hyper_, lr, hyper_.weight_decay, steps_, clip_coef);
    fused_adamw_step(nodec, hyper_, lr, 0.0, steps_, clip_coef);
    buckets_.zero();
  }
  void skip_step() override { buckets_.zero(); }

  // Every rank holds the same state: rank 0 saves all of it, every rank loads all of it.
  std::vector<StateSlice> save_slices(StateTensor what) override {
    std::vector<StateSlice> out;
    if (comm_.rank() != 0) return out;
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& p = params_[i];
      torch::Tensor v;
      if (what == StateTensor::weights) {
        v = p.detach();
      } else if (p.requires_grad()) {
        v = what == StateTensor::exp_avg ? exp_avg_[i] : exp_avg_sq_[i];  // zeros before the first step
      } else {
        v = torch::zeros_like(p);
      }
      out.push_back({static_cast<int>(i), 0, v.reshape({-1}).to(torch::kFloat).contiguous()});
    }
    return out;
  }
  std::vector<StateSlice> load_slices(StateTensor what) override {
    auto& bufs = loading_[static_cast<int>(what)];
    bufs.clear();
    std::vector<StateSlice> out;
    for (size_t i = 0; i < params_.size(); ++i) {
      bufs.push_back(torch::empty({params_[i].numel()}, torch::TensorOptions().dtype(torch::kFloat)
                                                            .device(params_[i].device())));
      out.push_back({static_cast<int>(i), 0, bufs.back()});
    }
    return out;
  }
  void finish_load(int64_t optimizer_steps) override {
    torch::NoGradGuard no_grad;
    const auto& w = loading_[static_cast<int>(StateTensor::weights)];
    const auto& m = loading_[static_cast<int>(StateTensor::exp_avg)];
    const auto& v = loading_[static_cast<int>(StateTensor::exp_avg_sq)];
    LLMTRAIN_CHECK(w.size() == params_.size() && m.size() == params_.size() && v.size() == params_.size(),
                   "DDP: finish_load without every load slice");
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i];
      p.detach().copy_(w[i].view(p.sizes()));
      if (p.requires_grad()) {
        exp_avg_[i].copy_(m[i].view(p.sizes()));
        exp_avg_sq_[i].copy_(v[i].view(p.sizes()));
      }
    }
    steps_ = optimizer_steps;
    for (auto& l : loading_) l.clear();
  }
  int64_t optimizer_steps() const override { return steps_; }

  double take_exposed_comm_seconds() override { return std::exchange(exposed_, 0.0); }
  int64_t optimizer_state_bytes() const override { return state_bytes_; }
  int64_t persistent_state_bytes() const override {
    int64_t b = state_bytes_;
    for (const auto& p : params_) b += p.nbytes();
    for (auto& bk : buckets_.buckets()) b += bk.grad.nbytes();
    return b;
  }

 private:
  Collectives& comm_;
  std::vector<torch::Tensor> params_;
  std::vector<bool> decay_;  // per parameter: AdamW decays it
  AdamWHyper hyper_;
  GradBuckets buckets_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;  // per parameter, like it (undefined without grad)
  int64_t steps_ = 0;
  std::array<std::vector<torch::Tensor>, 3> loading_;  // fp32 buffers of load_slices, per StateTensor
  double exposed_ = 0;
  int64_t state_bytes_ = 0;
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
                 GradBuckets::Reduce::reduce_scatter, /*flatten_params=*/true),
        adam_(o.adamw, comm) {
    const auto& slots = buckets_.slots();
    for (auto& b : buckets_.buckets()) {
      std::vector<FlatEntry> entries;
      for (int si : b.slots) entries.push_back({slots[si].index, slots[si].offset, slots[si].numel, slots[si].decay});
      const int64_t lo = buckets_.shard_begin(b), n = buckets_.shard_numel(b);
      adam_.add_shard(b.param.narrow(0, lo, n), b.grad_shard, shard_ranges(entries, lo, n));
    }
  }

  std::string name() const override { return "zero1"; }
  void backward(const torch::Tensor& loss, bool last_micro) override { buckets_.backward(loss, last_micro); }
  void finish_gradients() override { exposed_ += buckets_.finish(); }
  double grad_norm() override { return adam_.grad_norm(exposed_); }

  // Each bucket's parameter all-gather starts as soon as its shard is updated
  // and travels while the next shards are updated; the wait at the end is the
  // exposed part.
  void step(double lr, double clip_coef) override {
    torch::NoGradGuard no_grad;
    auto& bs = buckets_.buckets();
    std::vector<std::unique_ptr<CommWork>> gathers;
    adam_.step(lr, clip_coef, [&](size_t i) {
      for (auto& w : gathers) w->test();  // MPI progresses nonblocking collectives inside its calls
      auto shard = adam_.param_shard(i);
      gathers.push_back(comm_.all_gather_async(shard, bs[i].param));  // in place: the shard sits in the bucket
    });
    add_wait_seconds(exposed_, [&] {
      for (auto& w : gathers) w->wait();
    });
    buckets_.zero();
  }
  void skip_step() override { buckets_.zero(); }

  std::vector<StateSlice> save_slices(StateTensor what) override { return adam_.slices(what); }
  std::vector<StateSlice> load_slices(StateTensor what) override { return adam_.slices(what); }
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

  double take_exposed_comm_seconds() override { return std::exchange(exposed_, 0.0); }
  int64_t optimizer_state_bytes() const override { return adam_.state_bytes(); }
  int64_t persistent_state_bytes() const override {
    int64_t b = adam_.state_bytes();
    for (auto& bk : buckets_.buckets())
      b += bk.param.nbytes() + bk.grad.nbytes() + bk.grad_shard.nbytes();
    return b;
  }

 private:
  Collectives& comm_;
  GradBuckets buckets_;
  ShardedAdamW adam_;
  double exposed_ = 0;
};

}  // namespace

std::unique_ptr<Strategy> make_strategy(const StrategyOptions& options, const ParamGroups& groups, Collectives& comm) {
  switch (options.kind) {
    case StrategyOptions::Kind::fsdp: return make_fsdp_strategy(options, groups, comm, /*hooks=*/nullptr);
    case StrategyOptions::Kind::zero1: return std::make_unique<Zero1Strategy>(options, groups, comm);
    case StrategyOptions::Kind::ddp: break;
  }
  return std::make_unique<DdpStrategy>(options, groups, comm);
}

}  // namespace llmtrain
