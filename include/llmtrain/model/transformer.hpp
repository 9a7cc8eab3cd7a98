// Transformer: one decoder-only model that is GPT-2, LLaMA-2, LLaMA-3 or Qwen3
// depending on ModelConfig. Knows nothing about ranks (distributed/ wraps it).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

namespace llmtrain {

struct Config;

// Optional code around the forward, installed from outside (distributed/ FSDP gathers
// sharded parameters there); the model itself stays rank-agnostic. Without
// hooks the forward calls its blocks directly.
class ForwardHooks {
 public:
  virtual ~ForwardHooks() = default;
  // First thing in forward(), before the embeddings are read.
  virtual void before_forward() {}
  // Runs block `i`; body(x) is the block itself. x: (B, T, C) -> (B, T, C).
  virtual torch::Tensor run_block(int64_t i, const torch::Tensor& x,
                                  const std::function<torch::Tensor(const torch::Tensor&)>& body) {
    (void)i;
    return body(x);
  }
};

struct ModelConfig {
  int64_t vocab_size = 256;      // tokens the data can contain
  int64_t padded_vocab = 256;    // embedding / LM-head rows (>= vocab_size)
  int64_t block_size = 256;
  int64_t n_layer = 4, n_head = 4, n_kv_head = 4, n_embd = 128, head_dim = 32, ffn_hidden = 512;
  std::string norm = "rmsnorm";          // rmsnorm | layernorm
  std::string pos_encoding = "rope";     // rope | learned
  std::string ffn = "swiglu";            // swiglu | gelu
  std::string attention_backend = "sdpa";
  bool qk_norm = false, bias = false, tie_embeddings = false;
  double rope_theta = 10000.0, norm_eps = 1e-5, dropout = 0.0;

  // Resolves the config's model keys (0 = derived defaults); `data_vocab_size`
  // is used when vocab_size = 0. Throws ConfigError on inconsistent shapes.
  static ModelConfig from_config(const Config& c, int64_t data_vocab_size);

  // e.g. "18L-18H-2304D-6144ff-RoPE-RMS-SwiGLU-PreNorm"
  std::string arch_string() const;
  // Exact parameter count, by arithmetic (no allocation).
  int64_t num_params() const;
  // N of the MFU rule: parameters that take part in matmuls (no input embedding,
  // no learned position table; a tied LM head counts once).
  int64_t num_matmul_params() const;
  // Training FLOPs per token, DESIGN's rule: 6*N + 12*L*H*Q*T.
  double flops_per_token() const;
  // The seeds' convention for comparison: 6 * all parameters (embeddings included).
  double flops_per_token_6n() const;
};

class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const ModelConfig& cfg);

  // idx: (B, T) int64 -> logits (B, T, padded_vocab)
  torch::Tensor forward(const torch::Tensor& idx);
  // Mean cross-entropy of next-token prediction; idx, targets: (B, T) int64.
  torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets);

  // normal(0, 0.02), residual projections / sqrt(2 n_layer), zero biases;
  // identical on every rank for the same seed.
  void init_weights(uint64_t seed);

  // AdamW groups: decay = matmul weights and embeddings; no_decay = norms, biases.
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
  // The backend actually used after the fallback chain (run-logged, in labels).
  const std::string& attention_backend_used() const;
  // The backend with the kernel that runs, e.g. "flash_attn_3 (SDPA cuDNN)",
  // "sdpa (SDPA flash (CPU))", "manual".
  std::string attention_kernel_used() const;

 private:
  ModelConfig cfg_;
  // modules are registered by the implementation
  struct Parts;
  std::shared_ptr<Parts> parts_;
};
TORCH_MODULE(Transformer);

}  // namespace llmtrain
