// Transformer: one decoder-only model that is GPT-2, LLaMA-2, LLaMA-3 or Qwen3
// depending on ModelConfig. Knows nothing about ranks (distributed/ wraps it).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "llmtrain/model/model_config.hpp"

namespace llmtrain {

namespace model_detail {
class Documents;  // model/layers.hpp: the documents of a packed batch
}

// Optional code around the forward, installed from outside (distributed/ FSDP gathers
// sharded parameters there); the model itself stays rank-agnostic. Without
// hooks the forward calls its blocks directly.
class ForwardHooks {
 public:
  virtual ~ForwardHooks() = default;
  // First thing in forward(), before the embeddings are read.
  virtual void before_forward() {}
  // Runs the token embedding (+ learned positions); body() -> (B, T, C).
  virtual torch::Tensor run_embedding(const std::function<torch::Tensor()>& body) { return body(); }
  // After the last block, before the final norm and the LM head, which run on
  // what it returns. x: (B, T, C) -> (B, T, C).
  virtual torch::Tensor before_head(const torch::Tensor& x) { return x; }
  // Runs block `i`; body(x) is the block itself. x: (B, T, C) -> (B, T, C).
  virtual torch::Tensor run_block(int64_t i, const torch::Tensor& x,
                                  const std::function<torch::Tensor(const torch::Tensor&)>& body) {
    (void)i;
    return body(x);
  }
};

class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const ModelConfig& cfg);

  // idx: (B, T) int64 -> logits (B, T, padded_vocab)
  torch::Tensor forward(const torch::Tensor& idx);
  // The final norm's output (B, T, C): forward() without the LM head.
  torch::Tensor hidden(const torch::Tensor& idx);
  // Mean cross-entropy of next-token prediction; idx, targets: (B, T) int64.
  torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets);

  // Each parameter by its rule in parameter_table() (normal(0, 0.02),
  // residual projections / sqrt(2 n_layer), zero biases, unit norms), drawn in
  // table order from one CPU generator: identical on every rank for the same seed.
  void init_weights(uint64_t seed);

  // AdamW groups from parameter_table(): decay = matmul weights and embeddings;
  // no_decay = norms, biases.
  std::vector<torch::Tensor> decay_parameters();
  std::vector<torch::Tensor> no_decay_parameters();
  // The transformer blocks in order (units of FSDP sharding).
  std::vector<std::shared_ptr<torch::nn::Module>> blocks();
  // Installs (or, with nullptr, removes) the forward hooks.
  void set_forward_hooks(std::shared_ptr<ForwardHooks> hooks);
  std::shared_ptr<ForwardHooks> forward_hooks() const;

  const ModelConfig& config() const { return cfg_; }
  // Chooses how attention runs on `device` with activations of `dtype`: the
  // fallback chain flash_attn_3 -> flash_attn_2 -> sdpa -> manual, each step
  // checked with SDPA's own dispatcher. Prints (rank 0) one line per step that
  // cannot serve and one naming the kernel used. The constructor plans for
  // CPU/float32 without printing; the trainer plans again for its device.
  void plan_attention(torch::Device device, torch::ScalarType dtype);
  // compile=True (fused_kernels): runs the fused kernels' start-up self-check
  // on `device` (kernels::self_check: a kernel that disagrees with ATen is
  // turned off, with one line naming it) and prints one line per kernel this
  // model's shape or `dtype` (the compute dtype) keeps on ATen, then one naming
  // the kernels that run. Returns the fallback lines (tests). compile=False: nothing.
  // The trainer calls it once at start-up, after plan_attention.
  std::vector<std::string> plan_kernels(torch::Device device, torch::ScalarType dtype);
  // The backend actually used after the fallback chain (run-logged, in labels).
  AttentionBackend attention_backend_used() const;
  // The backend with the kernel that runs, e.g. "flash_attn_3 (SDPA cuDNN)",
  // "sdpa (SDPA flash (CPU))", "manual".
  std::string attention_kernel_used() const;

 private:
  // Block i as a function of its input (recomputed in backward where
  // cfg_.recomputes_block(i)).
  // rope: the RoPE tables for this batch's positions; docs: its documents
  // (document_masking) or null.
  std::function<torch::Tensor(const torch::Tensor&)> block_body(
      int64_t i, const std::pair<torch::Tensor, torch::Tensor>& rope,
      const std::shared_ptr<const model_detail::Documents>& docs);
  // RoPE's cos/sin rows for the positions of idx (per token with documents).
  std::pair<torch::Tensor, torch::Tensor> rope_for(const torch::Tensor& idx,
                                                   const model_detail::Documents* docs) const;

  ModelConfig cfg_;
  // modules are registered by the implementation
  struct Parts;
  std::shared_ptr<Parts> parts_;
};
TORCH_MODULE(Transformer);

}  // namespace llmtrain
