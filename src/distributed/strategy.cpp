#include "llmtrain/distributed/strategy.hpp"

#include <cmath>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include "distributed/adamw_flat.hpp"
#include "distributed/fsdp.hpp"
#include "distributed/grad_buckets.hpp"
#include "distributed/timed_wait.hpp"
#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/distributed/collectives.hpp"

namespace llmtrain {

namespace {

constexpr double kAdamEps = 1e-8;

std::vector<bool> decay_flags(const ParamGroups& g) {
  std::unordered_set<const void*> no_decay;
  for (const auto& p : g.no_decay) no_decay.insert(p.unsafeGetTensorImpl());
  std::vector<bool> decay;
  for (const auto& p : g.params) decay.push_back(no_decay.count(p.unsafeGetTensorImpl()) == 0);
  return decay;
}

// Every rank starts from rank 0's values.
void broadcast_params(const std::vector<torch::Tensor>& params, Collectives& comm) {
  torch::NoGradGuard no_grad;
  for (const auto& p : params) {
    auto t = p.detach();
    comm.broadcast(t, 0);
  }
}

double bucket_bytes(const Config& c) { return c.ddp_bucket_mb * 1024.0 * 1024.0; }

// ---- plain data parallel ---------------------------------------------------------

class DdpStrategy final : public Strategy {
 public:
  DdpStrategy(const Config& c, const ParamGroups& g, Collectives& comm)
      : comm_(comm),
        params_(g.params),
        // Rank 0's values reach every rank before the buckets copy them.
        buckets_((broadcast_params(g.params, comm), g.params), decay_flags(g), bucket_bytes(c), comm,
                 GradBuckets::Reduce::allreduce, /*flatten_params=*/false) {
    const auto decay = decay_flags(g);
    std::vector<torch::Tensor> dec, nodec;
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i].requires_grad()) (decay[i] ? dec : nodec).push_back(params_[i]);
    auto base = torch::optim::AdamWOptions(c.learning_rate).betas({c.beta1, c.beta2}).eps(kAdamEps);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(dec, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(base).weight_decay(c.weight_decay)));
    groups.emplace_back(nodec, std::make_unique<torch::optim::AdamWOptions>(
                                   torch::optim::AdamWOptions(base).weight_decay(0.0)));
    optimizer_ = std::make_unique<torch::optim::AdamW>(std::move(groups), base);
    for (const auto& p : params_)
      if (p.requires_grad()) state_bytes_ += 2 * p.numel() * p.element_size();
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

  void step(double lr, double clip_coef) override {
    torch::NoGradGuard no_grad;
    if (clip_coef != 1.0)
      for (auto& b : buckets_.buckets()) b.grad.mul_(clip_coef);
    for (auto& group : optimizer_->param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    optimizer_->step();
    buckets_.zero();
  }
  void skip_step() override { buckets_.zero(); }

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
  GradBuckets buckets_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  double exposed_ = 0;
  int64_t state_bytes_ = 0;
};

// ---- ZeRO-1 ---------------------------------------------------------------------
// Buckets as in DDP, reduce-scattered instead of all-reduced: rank r owns
// [r*n/W, (r+1)*n/W) of every (padded) bucket, keeps AdamW moments (and an fp32
// master copy when parameters are stored in a lower precision) for that range
// only, updates it, and all-gathers the bucket's parameters in place.

class Zero1Strategy final : public Strategy {
 public:
  Zero1Strategy(const Config& c, const ParamGroups& g, Collectives& comm)
      : comm_(comm),
        buckets_((broadcast_params(g.params, comm), g.params), decay_flags(g), bucket_bytes(c), comm,
                 GradBuckets::Reduce::reduce_scatter, /*flatten_params=*/true),
        hyper_{c.beta1, c.beta2, kAdamEps, c.weight_decay} {
    const auto& slots = buckets_.slots();
    for (auto& b : buckets_.buckets()) {
      const int64_t lo = buckets_.shard_begin(b), n = buckets_.shard_numel(b);
      std::vector<DecayRange> decay;
      for (int si : b.slots) {
        const auto& s = slots[si];
        if (!s.decay) continue;
        const int64_t a = std::max(lo, s.offset), e = std::min(lo + n, s.offset + s.numel);
        if (a < e) decay.push_back({a - lo, e - a});
      }
      Shard sh{b.param.narrow(0, lo, n), torch::Tensor(), FlatAdamW(n, std::move(decay), b.param.device())};
      if (b.dtype != torch::kFloat) sh.master = sh.param.to(torch::kFloat);
      state_bytes_ += sh.adam.state_bytes() + (sh.master.defined() ? sh.master.nbytes() : 0);
      shards_.push_back(std::move(sh));
    }
  }

  std::string name() const override { return "zero1"; }
  void backward(const torch::Tensor& loss, bool last_micro) override { buckets_.backward(loss, last_micro); }
  void finish_gradients() override { exposed_ += buckets_.finish(); }

  double grad_norm() override {
    double sq = 0;
    for (auto& b : buckets_.buckets()) {
      const double n = b.grad_shard.norm().item<double>();
      sq += n * n;
    }
    // On the buckets' device: NCCL reduces device memory only.
    const auto device = buckets_.buckets().empty() ? torch::Device(torch::kCPU) : buckets_.buckets()[0].grad.device();
    auto t = torch::tensor({sq}, torch::TensorOptions().dtype(torch::kDouble)).to(device);
    add_wait_seconds(exposed_, [&] { comm_.allreduce_sum(t); });
    return std::sqrt(t.item<double>());
  }

  // Each bucket's parameter all-gather starts as soon as its shard is updated
  // and travels while the next shards are updated; the wait at the end is the
  // exposed part.
  void step(double lr, double clip_coef) override {
    torch::NoGradGuard no_grad;
    ++step_;
    auto& bs = buckets_.buckets();
    std::vector<std::unique_ptr<CommWork>> gathers;
    for (size_t i = 0; i < bs.size(); ++i) {
      auto& sh = shards_[i];
      auto g = clip_coef != 1.0 ? bs[i].grad_shard * clip_coef : bs[i].grad_shard;
      auto& master = sh.master.defined() ? sh.master : sh.param;
      sh.adam.step(master, g, lr, hyper_, step_);
      if (sh.master.defined()) sh.param.copy_(sh.master);
      for (auto& w : gathers) w->test();  // MPI progresses nonblocking collectives inside its calls
      gathers.push_back(comm_.all_gather_async(sh.param, bs[i].param));  // in place: the shard sits in the bucket
    }
    add_wait_seconds(exposed_, [&] {
      for (auto& w : gathers) w->wait();
    });
    buckets_.zero();
  }
  void skip_step() override { buckets_.zero(); }

  double take_exposed_comm_seconds() override { return std::exchange(exposed_, 0.0); }
  int64_t optimizer_state_bytes() const override { return state_bytes_; }
  int64_t persistent_state_bytes() const override {
    int64_t b = state_bytes_;
    for (auto& bk : buckets_.buckets())
      b += bk.param.nbytes() + bk.grad.nbytes() + bk.grad_shard.nbytes();
    return b;
  }

 private:
  struct Shard {
    torch::Tensor param;   // (n/W,) view of the bucket's flat parameters
    torch::Tensor master;  // (n/W,) fp32, only when parameters are lower precision
    FlatAdamW adam;
  };
  Collectives& comm_;
  GradBuckets buckets_;
  AdamWHyper hyper_;
  std::vector<Shard> shards_;
  int64_t step_ = 0;
  double exposed_ = 0;
  int64_t state_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Strategy> make_strategy(const Config& config, const ParamGroups& groups, Collectives& comm) {
  if (config.use_fsdp) return make_fsdp_strategy(config, groups, comm, /*hooks=*/nullptr);
  if (config.use_zero1) return std::make_unique<Zero1Strategy>(config, groups, comm);
  return std::make_unique<DdpStrategy>(config, groups, comm);
}

}  // namespace llmtrain
