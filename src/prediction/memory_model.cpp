#include "llmtrain/prediction/memory_model.hpp"

#include <algorithm>

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/distributed/sharding_plan.hpp"
#include "llmtrain/model/activations.hpp"

namespace llmtrain {

namespace {

// Autocast below fp32 with fp32 parameters: each matmul weight's 16-bit copy
// is cached for the forward and saved for backward (every strategy: the copy
// outlives FSDP's freeing of the gathered fp32 unit). `share` of the blocks'
// matmul weights, and the head's where `head`.
double weight_copies(const ModelConfig& m, const MemoryInputs& in, double share, bool head) {
  if (in.dtype == ComputeDtype::float32 || in.param_bytes <= dtype_bytes(in.dtype)) return 0.0;
  const double head_params = static_cast<double>(m.vocab_size) * static_cast<double>(m.n_embd);
  const double blocks = static_cast<double>(m.num_matmul_params()) - head_params;
  return (share * blocks + (head ? head_params : 0.0)) * dtype_bytes(in.dtype);
}

// What every block keeps and the logits and loss (the end of the forward and
// the start of the backward).
double forward_activations(const ModelConfig& m, const MemoryInputs& in) {
  return activation_bytes_forward(m, in.recomputed_blocks, in.dtype, in.batch_size, in.attention, in.param_bytes);
}

// The backward of the highest recomputed block j (activation checkpointing):
// the saved tensors then (model/activations.hpp), the 16-bit weight copies of
// the blocks below j that are not recomputed and of j (the recompute casts
// again, uncached), and the gradients autograd has produced so far: the final
// norm's and head's and those of blocks j and above, in param_dtype (DDP and
// ZeRO-1: the tensors handed to the bucket hooks; FSDP counts its own).
struct RecomputePhase {
  double activations = 0, gradients = 0;
};
RecomputePhase recompute_phase(const ModelConfig& m, const MemoryInputs& in) {
  const auto p =
      activation_bytes_recompute(m, in.recomputed_blocks, in.dtype, in.batch_size, in.attention, in.param_bytes);
  if (p.block < 0) return {};
  const double L = static_cast<double>(m.n_layer);
  double head = 0, block = 0;
  for (const auto& u : fsdp_sharding_plan(m)) {
    if (u.kind == UnitKind::head) head = static_cast<double>(u.numel);
    if (u.kind == UnitKind::block) block = static_cast<double>(u.numel);
  }
  return {p.bytes + weight_copies(m, in, static_cast<double>(p.kept_below + 1) / L, false),
          (head + (L - static_cast<double>(p.block)) * block) * in.param_bytes};
}

}  // namespace

MemoryInputs MemoryInputs::from_config(const Config& c, int64_t world_size) {
  MemoryInputs in;
  in.dtype = c.dtype;
  in.batch_size = c.batch_size;
  in.world_size = world_size;
  in.fsdp_prefetch = c.fsdp_prefetch;
  in.persistent_grads = c.use_cuda_graphs;  // StrategyOptions::persistent_grads
  in.param_bytes = c.param_dtype == ParamDtype::bfloat16 ? 2.0 : 4.0;
  in.reduce_bytes = c.reduce_dtype == ReduceDtype::bfloat16 ? 2.0 : 4.0;
  ModelConfig shape;  // ModelConfig::recomputed_blocks() of the config's layers
  shape.n_layer = c.n_layer;
  shape.recompute = c.activation_checkpointing;
  shape.checkpoint_every = c.activation_checkpointing_every;
  in.recomputed_blocks = shape.recomputed_blocks();
  return in;
}

std::vector<int64_t> fsdp_unit_params(const ModelConfig& m) {
  std::vector<int64_t> units;
  for (const auto& u : fsdp_sharding_plan(m)) units.push_back(u.numel);
  return units;
}

MemoryEstimate estimate_memory(const ModelConfig& m, const MemoryInputs& in, StrategyKind strategy) {
  LLMTRAIN_CHECK(in.world_size >= 1, "world size must be >= 1, got {}", in.world_size);
  LLMTRAIN_CHECK(in.batch_size >= 0, "batch size must be >= 0, got {}", in.batch_size);
  const double P = static_cast<double>(m.num_params());
  const double W = static_cast<double>(in.world_size);
  const double pb = in.param_bytes;
  // AdamW: exp_avg + exp_avg_sq in fp32, plus an fp32 master copy where
  // parameters are stored below fp32.
  const double opt_per_param = 8.0 + (pb < 4.0 ? 4.0 : 0.0);
  MemoryEstimate e{strategy, 0, 0, 0, 0};
  const auto plan = fsdp_sharding_plan(m);
  double in_blocks = 0, block = 0, embedding = 0, head = 0, held = 0;
  for (const auto& u : plan) {
    const double n = static_cast<double>(u.numel);
    if (u.kind == UnitKind::block) in_blocks += n, block = std::max(block, n);
    if (u.kind == UnitKind::embedding) embedding = n;
    if (u.kind == UnitKind::head) head = n;
    if (u.held_through_step) held += n;  // a tied embedding: gathered from its forward to the end of the backward
  }
  const double rb = in.reduce_bytes;
  // DDP and ZeRO-1, during backward: the gradients autograd hands over before
  // they are copied into the buckets. Fitted, not derived: one extra copy of
  // the blocks' gradients and one of the token embedding's (measured on the
  // CPU, benchmarks/memory_table.py; docs/memory.md).
  const double handover =
      (in_blocks + static_cast<double>(m.padded_vocab) * static_cast<double>(m.n_embd)) * pb;
  // DDP and ZeRO-1's buckets (ZeRO-1: and its reduce-scattered shard of them)
  // once every gradient has arrived. Persistent (use_cuda_graphs=True) they
  // are held through the forward; otherwise they are made during the backward
  // as the activations are freed, and dropped after the step (issue 46).
  const bool buckets = strategy != StrategyKind::fsdp;
  const double all_buckets = strategy == StrategyKind::zero1 ? P * rb + P * rb / W : P * rb;
  const bool persistent = buckets && in.persistent_grads;
  switch (strategy) {
    case StrategyKind::ddp:  // flat parameter and gradient buckets, every bucket's AdamW state
      e.weights = P * pb;
      e.gradients = (persistent ? all_buckets : 0.0) + handover;
      e.optimizer = P * opt_per_param;
      break;
    case StrategyKind::zero1:  // + the reduce-scattered gradient shard; AdamW state of 1/W
      e.weights = P * pb;
      e.gradients = (persistent ? all_buckets : 0.0) + handover;
      e.optimizer = P * opt_per_param / W;
      break;
    case StrategyKind::fsdp: {
      // Shards of 1/W (distributed/sharding_plan.hpp: the embedding, each block,
      // the final norm with the head), the gradient shard in fp32; gathered in
      // full in param_dtype: the unit computing and the next one with prefetch
      // (the head stays gathered from the final norm to its backward), a tied
      // embedding through the whole step; during a unit's backward its full
      // gradients in reduce_dtype, two units' at a time.
      // The pairs that are full together: a block and the next, the head and
      // the last block, the embedding and the first block.
      const double emb = held > 0 ? 0.0 : embedding;
      const double pair = in.fsdp_prefetch ? std::max({2 * block, head + block, emb + block})
                                           : std::max({block, head, emb});
      const double grad_pair = std::max({2 * block, head + block, emb + block});
      // On one rank too: the full buffer is apart from the shard, and the
      // gradients pass through the flat buffer.
      e.weights = P * pb / W + (pair + held) * pb;
      e.gradients = P * 4.0 / W + grad_pair * rb;
      e.optimizer = P * opt_per_param / W;
      break;
    }
  }
  // The peak is the start of the backward: what the blocks keep, the logits,
  // the 16-bit weight copies autograd saved, the backward's gradients (and the
  // persistent buckets). With activation checkpointing it may instead be
  // (whichever holds most):
  // - the end of the forward: autocast's cache also holds the recomputed
  //   blocks' copies, until the forward's autocast region ends; no gradient
  //   of this backward exists yet;
  // - the backward of the highest recomputed block: the gradients alive are
  //   those produced so far, not the end of the backward's (buckets made
  //   during the backward: all of them, see below).
  // Buckets made during the backward may instead peak at its end: every
  // bucket, the hand-over, no activation left.
  const double grads = e.gradients;
  const double backward_grads = strategy == StrategyKind::fsdp ? grads - P * 4.0 / W : handover;
  const double L = static_cast<double>(m.n_layer);
  const double kept = (L - static_cast<double>(std::clamp<int64_t>(in.recomputed_blocks, 0, m.n_layer))) / L;
  const double act = forward_activations(m, in);
  e.activations = act + weight_copies(m, in, kept, true);
  if (in.recomputed_blocks > 0) {
    const double start = e.activations + grads;
    const double forward_end = act + weight_copies(m, in, 1.0, true);
    const auto r = recompute_phase(m, in);
    // r.gradients: those produced so far, in param_dtype. Buckets made during
    // the backward: by the lowest recomputed block's backward nearly all of
    // them exist, beside a recomputed block's activations; counted as all of
    // them with the highest block's activations, a bound (measured on the
    // tiny shape with full checkpointing: fewer buckets undercounted it by 11%).
    const double made = buckets && !persistent ? all_buckets : 0.0;
    const double recompute_grads = strategy == StrategyKind::fsdp ? grads : grads - handover + r.gradients + made;
    if (forward_end + grads - backward_grads > std::max(start, r.activations + recompute_grads))
      e.activations = forward_end, e.gradients = grads - backward_grads;
    else if (r.activations + recompute_grads > start)
      e.activations = r.activations, e.gradients = recompute_grads;
  }
  if (buckets && !persistent && all_buckets + handover > e.activations + e.gradients)
    e.activations = 0, e.gradients = all_buckets + handover;
  return e;
}

std::vector<MemoryEstimate> estimate_memory(const ModelConfig& m, const MemoryInputs& in) {
  return {estimate_memory(m, in, StrategyKind::ddp), estimate_memory(m, in, StrategyKind::zero1),
          estimate_memory(m, in, StrategyKind::fsdp)};
}

std::vector<MemoryEstimate> estimate_memory(const ModelConfig& m, ComputeDtype dtype, int64_t batch_size,
                                            int64_t world_size, AttentionBackend attention) {
  MemoryInputs in;
  in.dtype = dtype;
  in.batch_size = batch_size;
  in.world_size = world_size;
  in.attention = attention;
  return estimate_memory(m, in);
}

int64_t max_batch_size(const ModelConfig& m, MemoryInputs in, StrategyKind strategy, double bytes) {
  auto fits = [&](int64_t b) {
    in.batch_size = b;
    return estimate_memory(m, in, strategy).total() <= bytes;
  };
  if (!fits(1)) return 0;
  int64_t lo = 1, hi = 2;  // fits(lo), and hi is to be tested
  while (hi < (int64_t{1} << 40) && fits(hi)) {
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1) {  // fits(lo), !fits(hi)
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace llmtrain
