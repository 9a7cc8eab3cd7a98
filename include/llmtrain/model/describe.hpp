// `llmtrain --describe`: architecture, parameters by group, FLOPs per token and
// the GPU memory a run needs under DDP, ZeRO-1 and FSDP. Pure arithmetic on
// ModelConfig: works for the full presets without allocating them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llmtrain/model/transformer.hpp"

namespace llmtrain {

struct Config;

// Parameters by group; total == ModelConfig::num_params().
struct ParamBreakdown {
  int64_t embeddings = 0;  // token table (+ learned positions); a tied head lives here
  int64_t attention = 0;   // q|k|v and output projections (+ biases)
  int64_t mlp = 0;         // FFN projections (+ biases)
  int64_t norms = 0;       // every norm weight/bias, QK-norm included
  int64_t head = 0;        // untied LM head (0 when tied)
  int64_t total = 0;
};
ParamBreakdown param_breakdown(const ModelConfig& m);

// Bytes one GPU holds for one strategy.
struct MemoryEstimate {
  std::string strategy;  // "ddp" | "zero1" | "fsdp"
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;
  double total() const { return weights + gradients + optimizer + activations; }
};
// dtype: float32 | bfloat16 | float16 (as the config key). Weights and gradients
// are held in the compute dtype; AdamW keeps two fp32 moments, plus fp32 master
// weights when the compute dtype is 16-bit. Activations: tensors saved for
// backward by this implementation for `batch_size` sequences of block_size tokens
// (no activation checkpointing). `attention_backend` is the requested one (the
// GPU build being planned for): manual stores the (T, T) attention
// probabilities, the fused kernels (sdpa, flash) do not.
std::vector<MemoryEstimate> estimate_memory(const ModelConfig& m, const std::string& dtype, int64_t batch_size,
                                            int64_t world_size, const std::string& attention_backend);
// Activation bytes of one micro-batch (the term shared by every strategy).
double activation_bytes(const ModelConfig& m, const std::string& dtype, int64_t batch_size,
                        const std::string& attention_backend);

// The whole description as printed by `llmtrain --describe` (several lines).
// Throws ConfigError when vocab_size = 0 (describe does not read the data).
std::string describe_model(const Config& c, int64_t world_size);

}  // namespace llmtrain
