#include "distributed/fsdp.hpp"

#include <cmath>
#include <unordered_set>

#include <fmt/format.h>
#include <torch/torch.h>

#include "distributed/sharded_adamw.hpp"
#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/distributed/collectives.hpp"

namespace llmtrain {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Gives the storage behind `t` exactly `nbytes` of fresh memory (0: frees it).
// The StorageImpl stays the same object, so every view of it (the parameters,
// and the views autograd saved for backward, such as a weight's transpose)
// sees the new bytes. PyTorch's FSDP does the same with storage().resize_().
void resize_storage(const torch::Tensor& t, int64_t nbytes) {
  auto* s = t.storage().unsafeGetStorageImpl();
  if (static_cast<int64_t>(s->nbytes()) == nbytes) return;
  s->set_data_ptr_noswap(s->allocator()->allocate(static_cast<size_t>(nbytes)));
  s->set_nbytes(static_cast<size_t>(nbytes));
}

class FsdpStrategy;

// Hooks installed on the model; dead (throws) once the strategy is gone.
class FsdpHooks final : public ForwardHooks {
 public:
  explicit FsdpHooks(FsdpStrategy* s) : s_(s) {}
  void before_forward() override;
  torch::Tensor run_embedding(const std::function<torch::Tensor()>& body) override;
  torch::Tensor run_block(int64_t i, const torch::Tensor& x,
                          const std::function<torch::Tensor(const torch::Tensor&)>& body) override;
  torch::Tensor before_head(const torch::Tensor& x) override;
  void detach() { s_ = nullptr; }

 private:
  FsdpStrategy* live() const;
  FsdpStrategy* s_;
};

class FsdpStrategy final : public Strategy {
 public:
  struct Unit {
    UnitKind kind = UnitKind::block;
    std::vector<torch::Tensor> params;
    std::vector<FlatEntry> entries;  // where each parameter sits in the flat unit
    torch::ScalarType dtype = torch::kFloat;  // the parameters' storage (param_dtype)
    int64_t numel = 0;          // padded to a multiple of W
    torch::Tensor full;         // (numel,) storage 0 bytes unless gathered
    torch::Tensor shard;        // (numel/W,) this rank's parameters (AdamW updates it)
    torch::Tensor grad_shard;   // (numel/W,) fp32
    bool resident = false;      // full parameters never freed (one unit without hooks)
    bool held = false;          // kept gathered until the end of the backward (the plan's held_through_step)
    bool gathered = false;      // full storage allocated; values ready once gather_work is done
    std::unique_ptr<CommWork> gather_work;  // a prefetch in flight
    bool reduced = false;       // reduce-scattered in the current backward
  };

  FsdpStrategy(const StrategyOptions& o, const ParamGroups& g, Collectives& comm, bool hooked)
      : comm_(comm), adam_(o.adamw, comm), prefetch_(o.fsdp_prefetch), reduce_dtype_(o.reduce_dtype) {
    broadcast_params(g.params, comm);  // every rank starts from rank 0's values
    const auto decay = decay_flags(g);
    if (hooked) {
      check_plan(g);
      for (const auto& plan : g.units) add_unit(g, decay, plan.params, plan.kind, plan.block, plan.held_through_step);
    } else {
      std::vector<int> all(g.params.size());
      for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
      add_unit(g, decay, all, UnitKind::head, -1, /*held=*/false);
      if (!units_.empty()) units_.back().resident = true;
    }
    for (auto& u : units_) init_buffers(u, o.param_dtype);
  }

  ~FsdpStrategy() override {
    if (hooks_) hooks_->detach();
    if (pending_.work) pending_.work->wait();  // MPI may still write its buffers
    for (auto& u : units_)
      if (u.gather_work) u.gather_work->wait();
  }

  void set_hooks(std::shared_ptr<FsdpHooks> h) { hooks_ = std::move(h); }

  std::string name() const override { return "fsdp"; }

  void backward(const torch::Tensor& loss, bool /*last_micro*/) override {
    // FSDP communicates at every micro-step: gradients are reduce-scattered as
    // each block's backward ends, so no rank ever holds a full gradient for
    // longer than one block's backward.
    loss.backward();
    // Units whose backward did not run through the Functions (the embedding,
    // unused blocks, the one unit without hooks), in unit order: the same
    // sequence on every rank.
    for (auto& u : units_) {
      if (!u.reduced) reduce(u);
      free(u);
      u.reduced = false;
    }
    complete_pending();
  }

  // The shards hold sums over ranks: the optimizer folds 1/world into its
  // gradient scale and the norm divides once (ShardedAdamW), no pass here.
  void finish_gradients() override {}

  double grad_norm() override { return adam_.grad_norm(); }

  void step(double lr, double clip_coef) override {
    torch::NoGradGuard no_grad;
    adam_.step(lr, clip_coef, [&](size_t i) { after_update(i); });
  }
  torch::Tensor grad_norm_tensor() override { return adam_.grad_norm_tensor(); }
  void step(const torch::Tensor& lr, const torch::Tensor& grad_scale, const torch::Tensor& found_inf) override {
    torch::NoGradGuard no_grad;
    adam_.step(lr, grad_scale, found_inf, [&](size_t i) { after_update(i); });
  }
  void step(double lr, const torch::Tensor& grad_scale, const torch::Tensor& found_inf) override {
    torch::NoGradGuard no_grad;
    adam_.step(lr, grad_scale, found_inf, [&](size_t i) { after_update(i); });
  }
  // Unit i's shard is updated: zero its gradient, refresh what is gathered.
  void after_update(size_t i) {
    auto& u = units_[i];
    u.grad_shard.zero_();
    // Full copies still held (resident root, materialize_parameters) must
    // not go stale.
    if (u.gathered) {
      settle(u);
      u.gathered = false;
      gather(u);
    }
  }

  void skip_step() override {
    torch::NoGradGuard no_grad;
    for (auto& u : units_) u.grad_shard.zero_();
  }

  std::vector<StateSlice> save_slices(StateTensor what) override { return adam_.save_slices(what); }
  std::vector<StateSlice> load_slices(StateTensor what) override { return adam_.load_slices(what); }
  void finish_load(int64_t optimizer_steps) override {
    torch::NoGradGuard no_grad;
    adam_.finish_load(optimizer_steps);
    for (auto& u : units_)  // full copies still held must show the loaded values
      if (u.gathered) {
        settle(u);
        u.gathered = false;
        gather(u);
      }
  }
  int64_t optimizer_steps() const override { return adam_.steps(); }

  int64_t optimizer_state_bytes() const override { return adam_.state_bytes(); }

  int64_t persistent_state_bytes() const override {
    int64_t b = adam_.state_bytes();
    for (const auto& u : units_) {
      b += static_cast<int64_t>(u.full.storage().nbytes()) + u.shard.nbytes() + u.grad_shard.nbytes();
      for (const auto& p : u.params)
        if (p.grad().defined()) b += p.grad().nbytes();
    }
    return b;
  }

  void materialize_parameters() override {
    for (auto& u : units_) gather(u);
  }

  // ---- called from the hooks and the autograd Functions (k: a unit) ----
  // With prefetch, the all-gather of the unit that runs next starts as soon as
  // the current unit's parameters are ready, so it travels while the current
  // unit computes: forward, unit k prefetches k+1 (units are in forward order:
  // embedding, blocks, head); backward, block i prefetches block i-1. Every
  // rank issues the same sequence of collectives.
  void before_forward() {
    // What a forward without a backward (evaluation) or materialize_parameters
    // left gathered.
    for (auto& u : units_)
      if (!u.resident) free(u);
  }
  torch::Tensor run_embedding(const std::function<torch::Tensor()>& body) {
    if (embedding_ < 0) return body();
    gather_for_forward(embedding_);
    auto y = body();
    release(embedding_);
    return y;
  }
  torch::Tensor run_block(int64_t i, const torch::Tensor& x,
                          const std::function<torch::Tensor(const torch::Tensor&)>& body);
  torch::Tensor before_head(const torch::Tensor& x);
  void gather_for_forward(int64_t k) {
    gather(unit(k));
    if (prefetch_ && k + 1 < static_cast<int64_t>(units_.size())) start_gather(unit(k + 1));
  }
  void gather_for_backward(int64_t k) {
    gather(unit(k));
    if (prefetch_ && k > 0 && unit(k - 1).kind == UnitKind::block) start_gather(unit(k - 1));
  }
  void release(int64_t k) {
    if (!unit(k).held) free(unit(k));
  }
  void reduce_and_release(int64_t k) {
    reduce(unit(k));
    free(unit(k));
  }

 private:
  Unit& unit(int64_t k) { return units_.at(static_cast<size_t>(k)); }

  // The plan must cover every parameter once (a parameter left out would never
  // be gathered or updated).
  static void check_plan(const ParamGroups& g) {
    std::vector<int> seen(g.params.size(), 0);
    for (const auto& u : g.units)
      for (int i : u.params) {
        LLMTRAIN_CHECK(i >= 0 && i < static_cast<int>(g.params.size()),
                       "FSDP: the sharding plan names parameter {}, the model has {}", i, g.params.size());
        ++seen[static_cast<size_t>(i)];
      }
    for (size_t i = 0; i < seen.size(); ++i)
      LLMTRAIN_CHECK(seen[i] == 1, "FSDP: parameter {} is in {} sharding units, expected 1", i, seen[i]);
  }

  void add_unit(const ParamGroups& g, const std::vector<bool>& decay, const std::vector<int>& idx, UnitKind kind,
                int64_t block, bool held) {
    Unit u;
    u.kind = kind;
    u.held = held;
    for (int i : idx) {
      const auto& p = g.params.at(static_cast<size_t>(i));
      if (!p.requires_grad()) continue;
      LLMTRAIN_CHECK(p.is_contiguous(), "FSDP: parameter {} is not contiguous", i);
      if (u.params.empty()) u.dtype = p.scalar_type();
      LLMTRAIN_CHECK(p.scalar_type() == u.dtype, "FSDP: a sharding unit mixes dtypes {} and {} (parameter {})",
                     c10::toString(u.dtype), c10::toString(p.scalar_type()), i);
      u.params.push_back(p);
      u.entries.push_back({i, u.numel, p.numel(), decay.at(static_cast<size_t>(i))});
      u.numel += p.numel();
    }
    LLMTRAIN_CHECK(!u.params.empty() || kind != UnitKind::block, "FSDP: block {} has no trainable parameters", block);
    if (u.params.empty()) return;
    const int W = comm_.world_size();
    u.numel = (u.numel + W - 1) / W * W;
    const int k = static_cast<int>(units_.size());
    if (kind == UnitKind::block) block_unit_.push_back(k);
    if (kind == UnitKind::embedding) embedding_ = k;
    if (kind == UnitKind::head) head_ = k;
    units_.push_back(std::move(u));
  }

  // The flat buffers of a unit. The fp32 values the parameters arrive with
  // become the fp32 master shard where param_dtype stores them lower.
  void init_buffers(Unit& u, torch::ScalarType param_dtype) {
    torch::NoGradGuard no_grad;
    const int64_t W = comm_.world_size(), r = comm_.rank();
    const auto device = u.params.front().device();
    const int64_t n = u.numel / W, lo = r * n;
    auto values = torch::zeros({u.numel}, torch::TensorOptions().dtype(u.dtype).device(device));
    for (size_t k = 0; k < u.params.size(); ++k)
      values.narrow(0, u.entries[k].offset, u.params[k].numel()).copy_(u.params[k].reshape({-1}));
    torch::Tensor master;
    if (param_dtype != torch::kFloat && param_dtype != u.dtype) {
      if (u.dtype == torch::kFloat) master = values.narrow(0, lo, n).clone();
      u.dtype = param_dtype;
      values = values.to(param_dtype);
    }
    u.full = values;
    for (size_t k = 0; k < u.params.size(); ++k) {
      auto& p = u.params[k];
      p.set_data(u.full.narrow(0, u.entries[k].offset, p.numel()).view(p.sizes()));  // lives in the flat buffer
    }
    u.shard = u.full.narrow(0, lo, n).clone();
    u.grad_shard = torch::zeros({n}, torch::TensorOptions().dtype(torch::kFloat).device(device));
    adam_.add_shard(u.shard, u.grad_shard, shard_ranges(u.entries, lo, n), master);  // shard i = unit i
    u.gathered = true;
    free(u);
  }

  // The unit's full parameters, ready to read: waits for its prefetch, or
  // gathers now.
  void gather(Unit& u) {
    if (u.gather_work) return settle(u);
    if (u.gathered) return;
    resize_storage(u.full, u.numel * u.full.element_size());
    comm_.all_gather(u.shard, u.full);
    u.gathered = true;
  }

  // Starts the unit's all-gather and returns (a no-op when it is gathered or
  // on its way).
  void start_gather(Unit& u) {
    if (u.gathered) return;
    resize_storage(u.full, u.numel * u.full.element_size());
    u.gather_work = comm_.all_gather_async(u.shard, u.full);
    u.gathered = true;
  }

  // Waits for a prefetch in flight; what is left of its transfer is exposed.
  void settle(Unit& u) {
    if (!u.gather_work) return;
    u.gather_work->wait();
    u.gather_work.reset();
  }

  void free(Unit& u) {
    if (u.resident || !u.gathered) return;
    settle(u);  // a collective may still write the buffer
    resize_storage(u.full, 0);
    u.gathered = false;
  }

  // The unit's gradients (.grad, left by autograd in this backward) into one
  // flat (numel,) buffer whose reduce-scatter starts without waiting; the full
  // gradients are dropped. One reduction stays in flight: it overlaps the next
  // block's backward and is completed (added to its shard's sum) when the next
  // one starts or the backward ends, so at most two units' full gradients
  // exist at once.
  void reduce(Unit& u) {
    torch::NoGradGuard no_grad;
    auto flat = torch::zeros({u.numel}, u.full.options().dtype(reduce_dtype_));
    for (size_t k = 0; k < u.params.size(); ++k) {
      auto& p = u.params[k];
      if (p.grad().defined()) flat.narrow(0, u.entries[k].offset, p.numel()).copy_(p.grad().reshape({-1}));
      p.mutable_grad() = torch::Tensor();
    }
    complete_pending();
    auto part = torch::empty({u.grad_shard.numel()}, flat.options());
    pending_.unit = &u;
    pending_.flat = flat;
    pending_.part = part;
    pending_.work = comm_.reduce_scatter_sum_async(pending_.flat, pending_.part);
    u.reduced = true;
  }

  void complete_pending() {
    if (!pending_.work) return;
    pending_.work->wait();
    torch::NoGradGuard no_grad;
    pending_.unit->grad_shard.add_(pending_.part);
    pending_ = Pending{};
  }

  struct Pending {
    Unit* unit = nullptr;
    torch::Tensor flat, part;  // (numel,) full gradient, (numel/W,) its reduced shard
    std::unique_ptr<CommWork> work;
  };
  Pending pending_;

  Collectives& comm_;
  ShardedAdamW adam_;
  bool prefetch_;
  torch::ScalarType reduce_dtype_;
  std::vector<Unit> units_;      // in forward order (the sharding plan's)
  std::vector<int> block_unit_;  // block index -> unit
  int embedding_ = -1, head_ = -1;
  std::shared_ptr<FsdpHooks> hooks_;
};

// Before a unit (a block; the head): forward gathers its parameters (and
// prefetches the next unit's); backward (after every op of the unit, hence
// after its parameters' AccumulateGrad, which the engine runs first)
// reduce-scatters their gradients and frees the full buffers.
struct GatherBefore : torch::autograd::Function<GatherBefore> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t self, int64_t unit) {
    ctx->saved_data["self"] = self;
    ctx->saved_data["unit"] = unit;
    reinterpret_cast<FsdpStrategy*>(self)->gather_for_forward(unit);
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    reinterpret_cast<FsdpStrategy*>(ctx->saved_data["self"].toInt())
        ->reduce_and_release(ctx->saved_data["unit"].toInt());
    return {grad[0], torch::Tensor(), torch::Tensor()};
  }
};

// After a block: forward frees the full parameters; backward (before the
// block's backward) gathers them again (and prefetches the previous block's).
struct GatherAfter : torch::autograd::Function<GatherAfter> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor y, int64_t self, int64_t unit) {
    ctx->saved_data["self"] = self;
    ctx->saved_data["unit"] = unit;
    reinterpret_cast<FsdpStrategy*>(self)->release(unit);
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    reinterpret_cast<FsdpStrategy*>(ctx->saved_data["self"].toInt())
        ->gather_for_backward(ctx->saved_data["unit"].toInt());
    return {grad[0], torch::Tensor(), torch::Tensor()};
  }
};

torch::Tensor FsdpStrategy::run_block(int64_t i, const torch::Tensor& x,
                                      const std::function<torch::Tensor(const torch::Tensor&)>& body) {
  LLMTRAIN_CHECK(i >= 0 && i < static_cast<int64_t>(block_unit_.size()),
                 "FSDP: the model ran block {}, but {} blocks were sharded", i, block_unit_.size());
  const auto self = reinterpret_cast<int64_t>(this);
  const int64_t k = block_unit_[static_cast<size_t>(i)];
  auto y = body(GatherBefore::apply(x, self, k));
  return GatherAfter::apply(y, self, k);
}

// The head unit stays gathered from its forward to its backward, which follows
// at once: only the Function before it.
torch::Tensor FsdpStrategy::before_head(const torch::Tensor& x) {
  if (head_ < 0) return x;
  return GatherBefore::apply(x, reinterpret_cast<int64_t>(this), head_);
}

FsdpStrategy* FsdpHooks::live() const {
  LLMTRAIN_CHECK(s_ != nullptr, "FSDP: the model's parameters are sharded by a strategy that no longer exists");
  return s_;
}
void FsdpHooks::before_forward() { live()->before_forward(); }
torch::Tensor FsdpHooks::run_embedding(const std::function<torch::Tensor()>& body) {
  return live()->run_embedding(body);
}
torch::Tensor FsdpHooks::run_block(int64_t i, const torch::Tensor& x,
                                   const std::function<torch::Tensor(const torch::Tensor&)>& body) {
  return live()->run_block(i, x, body);
}
torch::Tensor FsdpHooks::before_head(const torch::Tensor& x) { return live()->before_head(x); }

}  // namespace

std::unique_ptr<Strategy> make_fsdp_strategy(const StrategyOptions& options, const ParamGroups& groups,
                                             Collectives& comm, std::shared_ptr<ForwardHooks>* hooks) {
  auto s = std::make_unique<FsdpStrategy>(options, groups, comm, hooks != nullptr);
  if (hooks) {
    auto h = std::make_shared<FsdpHooks>(s.get());
    s->set_hooks(h);
    *hooks = h;
  }
  return s;
}

}  // namespace llmtrain
