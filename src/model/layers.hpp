// Building blocks of the Transformer (private to src/model): norms, RoPE,
// attention with its backends, MLPs, the pre-norm block.
// Shapes: B batch, T time, C = n_embd, H query heads, K key/value heads,
// G = H / K queries per KV head, D head_dim, F ffn_hidden.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "llmtrain/kernels/kernels.hpp"  // defines: kernels::NormOut, the fused ops of compile=True
#include "llmtrain/model/transformer.hpp"

namespace llmtrain::model_detail {

// y = x W^T + b through at::linear, which folds the leading dimensions of x and
// fuses the bias into the GEMM (addmm). Not `lin(x)`: torch::nn::Linear's
// forward (torch::nn::functional::linear) multiplies a 3-D input first and then
// adds the bias in place, and under autocast over fp32 parameters that adds the
// fp32 bias into the 16-bit product through fp32 copies of the whole product
// (8 bytes per output element at once, 2 MiB for tiny_gpt2's c_fc at 8 x 128
// tokens: the peak of a recomputed block), and is one more pass over it.
torch::Tensor linear(const torch::nn::Linear& lin, const torch::Tensor& x);

// RMSNorm or LayerNorm (with or without bias) over the last dimension.
class NormImpl : public torch::nn::Module {
 public:
  NormImpl(int64_t dim, bool layernorm, bool bias, double eps);
  torch::Tensor forward(const torch::Tensor& x);

  // compile=True (fused_kernels): h = x + delta (delta undefined: h = x) and
  // this norm of h in `out_dtype`, as one op (kernels::add_rmsnorm /
  // add_layernorm). `residual` is h (undefined without delta).
  kernels::NormOut forward_fused(const torch::Tensor& x, const torch::Tensor& delta, torch::ScalarType out_dtype);

  torch::Tensor weight, bias;  // (dim), bias undefined unless layernorm && bias
  double eps() const { return eps_; }
 private:
  int64_t dim_;
  bool layernorm_;
  double eps_;
};
TORCH_MODULE(Norm);

// The dtype the next GEMM reads x in: autocast's on x's device where autocast
// is on, else x's own (what a fused norm writes its output in).
torch::ScalarType gemm_input_dtype(const torch::Tensor& x);

// RoPE, rotate-half (GPT-NeoX / HF LLaMA) convention: the pair (i, i + D/2) of
// position m is rotated by m * theta^(-2i/D). cos, sin: (T, 1, D/2);
// x: (B, T, heads, D) -> same shape.
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
// cos/sin tables (T, 1, D/2) in float32 for positions 0..T-1.
std::pair<torch::Tensor, torch::Tensor> rope_tables(int64_t T, int64_t D, double theta);

// How attention is computed on one device and dtype: the backend of the chain
// flash_attn_3 -> flash_attn_2 -> sdpa -> manual that serves the request, and
// for SDPA the one kernel it is restricted to (CUDA: flash_attn_3 = cuDNN,
// flash_attn_2 = flash; sdpa = SDPA's own choice among all of them).
enum class SdpaKernel { any, flash, cudnn, efficient };
struct AttentionPlan {
  AttentionBackend requested = AttentionBackend::manual;  // the config's attention_backend
  AttentionBackend backend = AttentionBackend::manual;    // what serves it
  SdpaKernel kernel = SdpaKernel::any;
  std::string kernel_used;          // what actually runs, e.g. "SDPA cuDNN", "SDPA flash (CPU)", "manual"
  std::vector<std::string> unavailable;  // one line per step of the chain that could not serve
  // "sdpa (SDPA flash (CPU))": the label run logs and tables use.
  std::string label() const;
};

// The plan for `requested` on `device` with activations of `dtype`, checked with
// SDPA's own dispatcher (at::_fused_sdp_choice) on tensors of the model's head
// layout: H query heads, K KV heads, head width D, T positions.
AttentionPlan plan_attention(AttentionBackend requested, torch::Device device, torch::ScalarType dtype,
                             int64_t H, int64_t K, int64_t D, int64_t T, double dropout);

// The documents of a packed batch (document_masking): each row of token ids is
// cut after every EOS token; a token sees only earlier tokens of its own
// document and its position counts from its document's first token. Built once
// per forward from the ids and shared by every block; the masks are made on
// first use, only for the attention path that reads them.
class Documents {
 public:
  // idx: (B, T) int64 token ids; eos_id: the id that ends a document.
  Documents(const torch::Tensor& idx, int64_t eos_id);
  const torch::Tensor& positions() const { return positions_; }  // (B, T) int64
  // (B, 1, T, T) bool: true where query i may see key j (same document, j <= i).
  const torch::Tensor& visible() const;
  // The same as an additive mask of `dtype` (0 or -inf), for SDPA: one tensor
  // for all blocks (a bool mask would be converted, and saved, per block).
  const torch::Tensor& additive_mask(torch::ScalarType dtype) const;
  // Varlen kernels: (N + 1) int32 offsets of the N documents in the flattened
  // (B * T) tokens (a row's end also ends a document), and the longest one.
  const torch::Tensor& cu_seqlens() const;
  int64_t max_seqlen() const;

 private:
  torch::Tensor starts_;     // (B, T) bool: a document starts here
  torch::Tensor doc_;        // (B, T) int64: document number within the row
  torch::Tensor positions_;  // (B, T) int64
  mutable torch::Tensor visible_, additive_, cu_seqlens_;
  mutable int64_t max_seqlen_ = 0;
};

// Causal attention core. q: (B, H, T, D), k, v: (B, K, T, D) -> (B, H, T, D).
// `mask` is the cached additive causal mask (block_size, block_size) used by the
// manual backend (undefined for sdpa). No K/V copy per query head on the manual
// path: queries are grouped as (B, K, G*T, D) and multiplied by (B, K, D, T).
// With `docs` (document_masking) attention also stays inside each document:
// CUDA in fp16/bf16 runs FlashAttention's varlen kernel over the documents
// (no mask); otherwise SDPA (or the manual path) takes docs' block-diagonal mask.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const AttentionPlan& plan, const torch::Tensor& mask, double dropout, bool training,
                               const Documents* docs = nullptr);
// Whether causal_attention runs documents through the varlen flash kernel for
// this query (CUDA, fp16/bf16, a head width flash takes, not the manual backend).
bool uses_varlen_flash(const torch::Tensor& q, const AttentionPlan& plan);

class AttentionImpl : public torch::nn::Module {
 public:
  // `plan` is the model's (shared by every block, replaced in place when the
  // model is planned for its device).
  AttentionImpl(const ModelConfig& cfg, std::shared_ptr<const AttentionPlan> plan);
  // x: (B, T, C); cos/sin: RoPE tables for these positions, (T, 1, D/2) or per
  // token (B, T, 1, D/2), or undefined; mask, docs: see causal_attention.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask, const Documents* docs);

  torch::nn::Linear c_attn{nullptr};  // C -> (H + 2K) * D, fused q|k|v
  torch::nn::Linear c_proj{nullptr};  // H * D -> C (residual projection)
  Norm q_norm{nullptr}, k_norm{nullptr};  // RMSNorm over D (qk_norm only)
 private:
  int64_t n_head_, n_kv_head_, head_dim_;
  double dropout_;
  bool fused_;  // compile=True: qkv -> q, k, v through kernels::rope_qk_norm
  std::shared_ptr<const AttentionPlan> plan_;
};
TORCH_MODULE(Attention);

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)

  torch::nn::Linear c_fc{nullptr};    // C -> 2F (swiglu: gate | up) or F (gelu)
  torch::nn::Linear c_proj{nullptr};  // F -> C (residual projection)
 private:
  bool swiglu_;
  bool fused_;  // compile=True: kernels::swiglu / gelu_tanh (GELU's bias added there, not in the GEMM)
};
TORCH_MODULE(Mlp);

// Pre-norm block: x + attn(ln_1(x)), then + mlp(ln_2(x)). compile=True: ln_1
// and "h = x + attn; ln_2(h)" are one fused op each.
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const ModelConfig& cfg, std::shared_ptr<const AttentionPlan> plan);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask, const Documents* docs);

  Norm ln_1{nullptr}, ln_2{nullptr};
  Attention attn{nullptr};
  Mlp mlp{nullptr};
 private:
  double dropout_;
  bool fused_;
};
TORCH_MODULE(Block);

}  // namespace llmtrain::model_detail
