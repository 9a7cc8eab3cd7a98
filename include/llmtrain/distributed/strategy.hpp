// Strategy: how gradients and optimizer state are shared across ranks (plain
// data parallel, ZeRO-1, FSDP). Applied to the model from outside; owns the
// optimizer because ZeRO-1/FSDP shard its state.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "llmtrain/distributed/sharding_plan.hpp"
#include "llmtrain/model/transformer.hpp"

namespace llmtrain {

struct Config;
class Collectives;
class Runtime;

// AdamW's hyper-parameters (the learning rate is given at each step).
struct AdamWHyper {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

// What a strategy reads of a run's configuration, and nothing else.
struct StrategyOptions {
  using Kind = StrategyKind;  // core/options.hpp
  Kind kind = Kind::ddp;
  double bucket_bytes = 25.0 * 1024 * 1024;  // gradient bucket size (DDP, ZeRO-1)
  bool fsdp_prefetch = true;                 // gather the next block while this one computes
  // Precision policy (FSDP2's MixedPrecisionPolicy, Megatron's --bf16): the
  // dtype the model's parameters and gradients are stored in (below fp32 the
  // sharded AdamW keeps fp32 master weights, made from the fp32 values the
  // strategy is given), and the dtype of the gradient collectives (DDP/ZeRO-1
  // buckets, FSDP's reduce-scatter; FSDP accumulates its gradient shard in fp32).
  torch::ScalarType param_dtype = torch::kFloat;
  torch::ScalarType reduce_dtype = torch::kFloat;
  // DDP / ZeRO-1: keep the gradient buckets allocated between steps (fixed
  // addresses, for use_cuda_graphs=True's captured step). Otherwise they are
  // made during each backward and dropped after the step (issue 46: no
  // gradient memory through the forward). FSDP keeps its gradient shards.
  bool persistent_grads = false;
  AdamWHyper adamw;
  static StrategyOptions from_config(const Config& c);
};

// ---- checkpoints: every tensor of the training state stored whole --------------
// The tensors a strategy keeps per parameter: the weights (fp32: the master copy
// where parameters are stored below fp32) and AdamW's two moments.
enum class StateTensor { weights, exp_avg, exp_avg_sq };
const char* to_string(StateTensor t);  // "weights", "exp_avg", "exp_avg_sq"
// A piece of one whole tensor: elements [offset, offset + values.numel()) of
// parameter `param` (an index into ParamGroups::params) in row-major order.
// `values` is a contiguous 1-D fp32 tensor (any device).
struct StateSlice {
  int param = 0;
  int64_t offset = 0;
  torch::Tensor values;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // Backward of one micro-step's loss (already divided by the accumulation
  // steps). Only when `last_micro` may gradients be communicated.
  virtual void backward(const torch::Tensor& loss, bool last_micro) = 0;
  // Waits for outstanding gradient traffic; afterwards each rank's gradients are
  // the sum over all ranks (for its shard, where sharded): the optimizer and
  // the gradient norm fold in 1/world (issue 46: no pass that divides every
  // gradient), so the average is what they read.
  virtual void finish_gradients() = 0;
  // Global L2 norm of the averaged gradient across all ranks and shards.
  virtual double grad_norm() = 0;
  // Scales gradients by clip_coef (1 = none), AdamW step at `lr`, zero gradients.
  virtual void step(double lr, double clip_coef) = 0;
  // Drops this iteration's gradients without an update (a non-finite gradient
  // norm: fp16 loss-scale overflow, a NaN). Parameters and optimizer state,
  // including AdamW's step count, stay as they were.
  virtual void skip_step() = 0;

  // The same on the device, for a step that never waits on the host (issue 46).
  // grad_norm_tensor(): grad_norm() as a 0-dim double tensor on the gradients'
  // device, the same value to the bit, no host read (the sharded strategies'
  // allreduce of it runs on the device's stream). step(lr, grad_scale,
  // found_inf): step(lr, grad_scale) with 0-dim tensors on that device: the
  // learning rate (fp32; or a double from the host, a kernel argument), the
  // gradients' multiplier (clip coefficient / loss scale; in double it gives
  // the host step's divisor to the bit) and found_inf (fp32), where 1 makes it
  // skip_step() (parameters, moments and AdamW's step count stay as they were;
  // the fused kernel decides on the device) and 0 a normal step. Either way
  // the gradients are zeroed after, as step() and skip_step() do.
  virtual torch::Tensor grad_norm_tensor() = 0;
  virtual void step(const torch::Tensor& lr, const torch::Tensor& grad_scale, const torch::Tensor& found_inf) = 0;
  virtual void step(double lr, const torch::Tensor& grad_scale, const torch::Tensor& found_inf) = 0;
  // Bytes of optimizer state (moments, master weights) held by this rank.
  virtual int64_t optimizer_state_bytes() const = 0;
  // Bytes of parameter, gradient and optimizer storage this rank holds between
  // iterations (measured from the tensors' storages): ~1/world of DDP's for FSDP.
  // DDP / ZeRO-1 hold no gradients between iterations unless persistent_grads.
  virtual int64_t persistent_state_bytes() const = 0;
  // Collective: makes every parameter hold its full current values (FSDP
  // gathers its shards; a no-op elsewhere), e.g. to read or save them. FSDP
  // frees them again at the next forward.
  virtual void materialize_parameters() {}

  // Checkpoints (checkpoint/checkpoint.hpp writes and reads them; any strategy and
  // world size can load what any other wrote, since tensors are stored whole):
  // What this rank saves of `what`: slices that, over all ranks, cover every
  // element of every parameter exactly once (sharded strategies: each owner
  // its shard; DDP: rank 0 everything). At most one slice per parameter.
  virtual std::vector<StateSlice> save_slices(StateTensor what) = 0;
  // Where this rank loads `what` into (it may read what other ranks read too):
  // fp32 buffers that finish_load() installs. At most one slice per parameter.
  virtual std::vector<StateSlice> load_slices(StateTensor what) = 0;
  // Collective, after every load slice is filled: installs them (parameters
  // from the fp32 weights, AdamW state with `optimizer_steps`) and makes every
  // rank's parameters current (ZeRO-1 all-gathers, FSDP re-gathers what is held).
  virtual void finish_load(int64_t optimizer_steps) = 0;
  // AdamW steps taken (its bias correction depends on it).
  virtual int64_t optimizer_steps() const = 0;
};

// The parameters a strategy manages, without the model class (tests, other
// modules). `params` in forward (registration) order: buckets are laid out in
// reverse so the first buckets fill first during backward. `no_decay` is the
// subset AdamW does not decay. `units` (FSDP): the sharding plan, its parameter
// indices into params (fsdp_sharding_plan for the Transformer); may be empty
// for DDP / ZeRO-1. The parameters are given in fp32; a strategy stores them
// in StrategyOptions::param_dtype.
struct ParamGroups {
  std::vector<torch::Tensor> params;
  std::vector<torch::Tensor> no_decay;
  std::vector<ShardingUnit> units;
};

std::unique_ptr<Strategy> make_strategy(const StrategyOptions& options, const ParamGroups& groups, Collectives& comm);

// The clip coefficient of a global gradient norm: max_norm / (norm + 1e-6)
// where max_norm > 0 and norm > max_norm, else 1 (what multiplies the
// gradients). The tensor form takes and gives a 0-dim double tensor on the
// norm's device, computed there with the same IEEE operations: the same value
// to the bit, no host read.
double clip_coefficient(double norm, double max_norm);
torch::Tensor clip_coefficient(const torch::Tensor& norm, double max_norm);

// Picks the strategy the options ask for (plain DDP, ZeRO-1 or FSDP).
// Broadcasts rank 0's parameters so every rank starts identical.
std::unique_ptr<Strategy> make_strategy(const StrategyOptions& options, Transformer model, Collectives& comm);

}  // namespace llmtrain
