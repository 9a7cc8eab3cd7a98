#include "llmtrain/model/transformer.hpp"

#include <cmath>
#include <limits>

#include <torch/torch.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/core/log.hpp"
#include "model/layers.hpp"

namespace llmtrain {

using model_detail::Block;
using model_detail::Norm;

// ---- ModelConfig -------------------------------------------------------------------

namespace {
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
}  // namespace

ModelConfig ModelConfig::from_config(const Config& c, int64_t data_vocab_size) {
  ModelConfig m;
  m.vocab_size = c.vocab_size > 0 ? c.vocab_size : data_vocab_size;
  if (m.vocab_size <= 0)
    throw ConfigError(
        "vocab_size = 0 means 'take it from the data', but no data vocabulary is known here; "
        "set vocab_size to a positive number");
  m.padded_vocab = round_up(m.vocab_size, c.vocab_pad_multiple);
  m.block_size = c.block_size;
  m.n_layer = c.n_layer;
  m.n_head = c.n_head;
  m.n_embd = c.n_embd;
  m.n_kv_head = c.n_kv_head > 0 ? c.n_kv_head : c.n_head;
  if (m.n_kv_head > m.n_head || m.n_head % m.n_kv_head != 0)
    throw ConfigError(fmt::format("n_kv_head = {} must divide n_head = {} (grouped-query attention)",
                                  m.n_kv_head, m.n_head));
  if (c.head_dim > 0) {
    m.head_dim = c.head_dim;
  } else {
    if (c.n_embd % c.n_head != 0)
      throw ConfigError(fmt::format(
          "n_embd = {} is not divisible by n_head = {}; set head_dim explicitly or choose n_head dividing n_embd",
          c.n_embd, c.n_head));
    m.head_dim = c.n_embd / c.n_head;
  }
  m.norm = c.norm;
  m.pos_encoding = c.pos_encoding;
  m.ffn = c.ffn;
  if (c.ffn_hidden > 0)
    m.ffn_hidden = c.ffn_hidden;
  else if (c.ffn == "gelu")
    m.ffn_hidden = 4 * c.n_embd;
  else
    m.ffn_hidden = round_up((8 * c.n_embd + 2) / 3, 256);  // ceil(8/3 d), then up to 256
  if (m.pos_encoding == "rope" && m.head_dim % 2 != 0)
    throw ConfigError(fmt::format("pos_encoding = rope needs an even head_dim, got head_dim = {}", m.head_dim));
  m.attention_backend = c.attention_backend;
  m.qk_norm = c.qk_norm;
  m.bias = c.bias;
  m.tie_embeddings = c.tie_embeddings;
  m.rope_theta = c.rope_theta;
  m.norm_eps = c.norm_eps;
  m.dropout = c.dropout;
  return m;
}

std::string ModelConfig::arch_string() const {
  std::string s = fmt::format("{}L-{}H", n_layer, n_head);
  if (n_kv_head != n_head) s += fmt::format("-{}KV", n_kv_head);
  s += fmt::format("-{}D", n_embd);
  if (head_dim * n_head != n_embd) s += fmt::format("-{}hd", head_dim);
  s += fmt::format("-{}ff", ffn_hidden);
  s += pos_encoding == "rope" ? "-RoPE" : "-LearnedPos";
  s += norm == "rmsnorm" ? "-RMS" : "-LN";
  s += ffn == "swiglu" ? "-SwiGLU" : "-GELU";
  if (qk_norm) s += "-QKNorm";
  if (bias) s += "-Bias";
  if (tie_embeddings) s += "-Tied";
  s += "-PreNorm";
  return s;
}

namespace {
// Parameters of one norm layer of width `dim`.
int64_t norm_params(const ModelConfig& m, int64_t dim) {
  return m.norm == "layernorm" && m.bias ? 2 * dim : dim;
}
int64_t attn_matmul_params(const ModelConfig& m) {
  return m.n_embd * (m.n_head + 2 * m.n_kv_head) * m.head_dim + m.n_head * m.head_dim * m.n_embd;
}
int64_t mlp_matmul_params(const ModelConfig& m) {
  return (m.ffn == "swiglu" ? 3 : 2) * m.n_embd * m.ffn_hidden;
}
}  // namespace

int64_t ModelConfig::num_params() const {
  const int64_t d = n_embd;
  int64_t per_layer = attn_matmul_params(*this) + mlp_matmul_params(*this) + 2 * norm_params(*this, d);
  if (bias) {
    per_layer += (n_head + 2 * n_kv_head) * head_dim + d;                          // attention biases
    per_layer += (ffn == "swiglu" ? 2 * ffn_hidden : ffn_hidden) + d;             // MLP biases
  }
  if (qk_norm) per_layer += 2 * head_dim;  // RMSNorm weights over head_dim
  int64_t total = n_layer * per_layer;
  total += padded_vocab * d;                                   // token embedding
  if (pos_encoding == "learned") total += block_size * d;      // position table
  total += norm_params(*this, d);                              // final norm
  if (!tie_embeddings) total += padded_vocab * d;              // LM head
  return total;
}

int64_t ModelConfig::num_matmul_params() const {
  // The LM head multiplies by vocab_size useful rows; padding rows are work the
  // model does not need, so they do not count toward MFU.
  return n_layer * (attn_matmul_params(*this) + mlp_matmul_params(*this)) + vocab_size * n_embd;
}

double ModelConfig::flops_per_token() const {
  return 6.0 * static_cast<double>(num_matmul_params()) +
         12.0 * static_cast<double>(n_layer) * static_cast<double>(n_head) * static_cast<double>(head_dim) *
             static_cast<double>(block_size);
}

double ModelConfig::flops_per_token_6n() const { return 6.0 * static_cast<double>(num_params()); }

// ---- TransformerImpl -----------------------------------------------------------------

struct TransformerImpl::Parts {
  torch::nn::Embedding wte{nullptr};  // (padded_vocab, C)
  torch::nn::Embedding wpe{nullptr};  // (block_size, C), learned positions only
  std::vector<Block> h;
  Norm ln_f{nullptr};
  torch::nn::Linear lm_head{nullptr};  // untied only
  torch::Tensor rope_cos, rope_sin;    // buffers (block_size, 1, D/2)
  torch::Tensor causal_mask;           // buffer (block_size, block_size), manual backend only
  std::shared_ptr<ForwardHooks> hooks;  // null unless installed from outside (FSDP)
  // Shared with every attention module; plan_attention replaces its contents.
  std::shared_ptr<model_detail::AttentionPlan> attention_plan;
};

TransformerImpl::TransformerImpl(const ModelConfig& cfg) : cfg_(cfg), parts_(std::make_shared<Parts>()) {
  LLMTRAIN_CHECK(cfg.padded_vocab >= cfg.vocab_size && cfg.vocab_size > 0,
                 "padded_vocab = {} must be >= vocab_size = {} > 0", cfg.padded_vocab, cfg.vocab_size);
  LLMTRAIN_CHECK(cfg.n_kv_head > 0 && cfg.n_head % cfg.n_kv_head == 0, "n_kv_head = {} must divide n_head = {}",
                 cfg.n_kv_head, cfg.n_head);
  auto& p = *parts_;
  p.attention_plan = std::make_shared<model_detail::AttentionPlan>(
      model_detail::plan_attention(cfg.attention_backend, torch::kCPU, torch::kFloat, cfg.n_head, cfg.n_kv_head,
                                   cfg.head_dim, cfg.block_size, cfg.dropout));
  p.wte = register_module("wte", torch::nn::Embedding(cfg.padded_vocab, cfg.n_embd));
  if (cfg.pos_encoding == "learned")
    p.wpe = register_module("wpe", torch::nn::Embedding(cfg.block_size, cfg.n_embd));
  // A ModuleList names the blocks h.0, h.1, ... (LibTorch refuses dots in names).
  auto h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.n_layer; ++i) {
    p.h.push_back(Block(cfg, p.attention_plan));
    h->push_back(p.h.back());
  }
  p.ln_f = register_module("ln_f", Norm(cfg.n_embd, cfg.norm == "layernorm", cfg.bias, cfg.norm_eps));
  if (!cfg.tie_embeddings)
    p.lm_head = register_module(
        "lm_head", torch::nn::Linear(torch::nn::LinearOptions(cfg.n_embd, cfg.padded_vocab).bias(false)));
  if (cfg.pos_encoding == "rope") {
    auto [cos, sin] = model_detail::rope_tables(cfg.block_size, cfg.head_dim, cfg.rope_theta);
    p.rope_cos = register_buffer("rope_cos", cos);
    p.rope_sin = register_buffer("rope_sin", sin);
  }
  if (cfg.attention_backend == "manual") {
    // Built once; every step adds a (T, T) slice of it in place.
    auto mask = torch::full({cfg.block_size, cfg.block_size}, -std::numeric_limits<float>::infinity());
    p.causal_mask = register_buffer("causal_mask", torch::triu(mask, 1));
  }
  // Weights keep LibTorch's default initialization until init_weights(seed):
  // drawing twice would cost seconds at full size.
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& idx) {
  auto& p = *parts_;
  const int64_t T = idx.size(1);
  LLMTRAIN_CHECK(T <= cfg_.block_size, "sequence length {} exceeds block_size = {}", T, cfg_.block_size);
  if (p.hooks) p.hooks->before_forward();
  auto x = p.wte(idx);  // (B, T, C)
  if (p.wpe) x = x + p.wpe->weight.narrow(0, 0, T);  // positions 0..T-1: (T, C) broadcast
  if (cfg_.dropout > 0 && is_training()) x = at::dropout(x, cfg_.dropout, true);
  // Buffers follow .to(device); the cached tables are passed down, never rebuilt.
  auto cos = p.rope_cos, sin = p.rope_sin;
  if (!p.hooks) {
    for (auto& block : p.h) x = block(x, cos, sin, p.causal_mask);
  } else {
    for (size_t i = 0; i < p.h.size(); ++i) {
      auto& block = p.h[i];
      x = p.hooks->run_block(static_cast<int64_t>(i), x, [&](const torch::Tensor& in) {
        return block(in, cos, sin, p.causal_mask);
      });
    }
  }
  x = p.ln_f(x);
  if (p.lm_head) return p.lm_head(x);  // (B, T, padded_vocab)
  return at::linear(x, p.wte->weight);
}

torch::Tensor TransformerImpl::loss(const torch::Tensor& idx, const torch::Tensor& targets) {
  auto logits = forward(idx);  // (B, T, V)
  const int64_t V = logits.size(-1);
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, V}).to(at::kFloat), targets.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-1));
}

void TransformerImpl::init_weights(uint64_t seed) {
  torch::NoGradGuard no_grad;
  // A CPU generator and CPU draws copied into place: the same numbers on every
  // rank and every device type for the same seed.
  auto gen = at::detail::createCPUGenerator(seed);
  const double std_base = 0.02;
  const double std_resid = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg_.n_layer));
  for (auto& item : named_parameters(/*recurse=*/true)) {
    const auto& name = item.key();
    auto& t = item.value();
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    const bool is_norm = name.find("ln_") != std::string::npos || name.find("_norm.") != std::string::npos;
    if (is_bias) {
      t.zero_();
    } else if (is_norm) {
      t.fill_(1.0);
    } else {
      const bool resid = name.find("c_proj.weight") != std::string::npos;
      const double std = resid ? std_resid : std_base;
      if (t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous()) {
        t.normal_(0.0, std, gen);  // the same draws as below, without the copy
      } else {
        auto draw = at::empty(t.sizes(), at::TensorOptions().dtype(at::kFloat));
        draw.normal_(0.0, std, gen);
        t.copy_(draw);
      }
    }
  }
}

std::vector<torch::Tensor> TransformerImpl::decay_parameters() {
  std::vector<torch::Tensor> out;
  for (auto& t : parameters()) {
    if (t.dim() >= 2) out.push_back(t);
  }
  return out;
}

std::vector<torch::Tensor> TransformerImpl::no_decay_parameters() {
  std::vector<torch::Tensor> out;
  for (auto& t : parameters()) {
    if (t.dim() < 2) out.push_back(t);
  }
  return out;
}

void TransformerImpl::plan_attention(torch::Device device, torch::ScalarType dtype) {
  auto plan = model_detail::plan_attention(cfg_.attention_backend, device, dtype, cfg_.n_head, cfg_.n_kv_head,
                                           cfg_.head_dim, cfg_.block_size, cfg_.dropout);
  for (const auto& line : plan.unavailable) log::warn("{}", line);
  log::info("attention: {} (requested {})", plan.label(), plan.requested);
  *parts_->attention_plan = std::move(plan);
}

const std::string& TransformerImpl::attention_backend_used() const { return parts_->attention_plan->backend; }
std::string TransformerImpl::attention_kernel_used() const { return parts_->attention_plan->label(); }

void TransformerImpl::set_forward_hooks(std::shared_ptr<ForwardHooks> hooks) { parts_->hooks = std::move(hooks); }
std::shared_ptr<ForwardHooks> TransformerImpl::forward_hooks() const { return parts_->hooks; }

std::vector<std::shared_ptr<torch::nn::Module>> TransformerImpl::blocks() {
  std::vector<std::shared_ptr<torch::nn::Module>> out;
  for (auto& b : parts_->h) out.push_back(b.ptr());
  return out;
}

}  // namespace llmtrain
