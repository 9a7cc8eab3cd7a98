#include "model/layers.hpp"

#include <cmath>
#include <vector>

#include <torch/torch.h>
#include <torch/version.h>

#include "llmtrain/core/error.hpp"

#if TORCH_VERSION_MAJOR >= 2
#include <ATen/Context.h>
#endif

namespace llmtrain::model_detail {

// ---- norms ---------------------------------------------------------------------

NormImpl::NormImpl(int64_t dim, bool layernorm, bool bias, double eps)
    : dim_(dim), layernorm_(layernorm), eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
  if (layernorm && bias) this->bias = register_parameter("bias", torch::zeros({dim}));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  if (layernorm_) return at::layer_norm(x, {dim_}, weight, bias, eps_);
  // RMSNorm in float32 (x may be bf16 under autocast), then back to x's dtype.
  auto xf = x.scalar_type() == at::kFloat ? x : x.to(at::kFloat);
  auto y = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  if (y.scalar_type() != x.scalar_type()) y = y.to(x.scalar_type());
  return y * weight;
}

// ---- RoPE ----------------------------------------------------------------------

std::pair<torch::Tensor, torch::Tensor> rope_tables(int64_t T, int64_t D, double theta) {
  LLMTRAIN_CHECK(D % 2 == 0, "RoPE needs an even head_dim, got {}", D);
  // inv_freq_i = theta^(-2i/D), computed in double for accuracy at large theta.
  auto i = torch::arange(D / 2, torch::kFloat64);
  auto inv_freq = torch::pow(theta, -2.0 * i / static_cast<double>(D));    // (D/2)
  auto pos = torch::arange(T, torch::kFloat64);                             // (T)
  auto angle = torch::outer(pos, inv_freq);                                 // (T, D/2)
  return {angle.cos().to(torch::kFloat32).unsqueeze(1), angle.sin().to(torch::kFloat32).unsqueeze(1)};
}

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);  // (B, T, h, D/2)
  auto c = cos.scalar_type() == x.scalar_type() ? cos : cos.to(x.scalar_type());
  auto s = sin.scalar_type() == x.scalar_type() ? sin : sin.to(x.scalar_type());
  return torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
}

// ---- attention backends ----------------------------------------------------------

namespace {
// What this build can serve. FlashAttention 2/3 are separate CUDA libraries that
// this project does not link yet; SDPA is a LibTorch >= 2.0 operator.
constexpr bool kHaveFa3 = false;
constexpr bool kHaveFa2 = false;
constexpr bool kHaveSdpa = TORCH_VERSION_MAJOR >= 2;
}  // namespace

std::pair<std::string, std::string> resolve_attention_backend(const std::string& requested) {
  static const std::vector<std::string> chain = {"flash_attn_3", "flash_attn_2", "sdpa", "manual"};
  size_t start = chain.size();
  for (size_t i = 0; i < chain.size(); ++i)
    if (chain[i] == requested) start = i;
  if (start == chain.size())
    throw ConfigError(fmt::format("attention_backend = '{}' is not one of flash_attn_3, flash_attn_2, sdpa, manual",
                                  requested));
  std::string why;
  for (size_t i = start; i < chain.size(); ++i) {
    const auto& b = chain[i];
    bool ok = b == "manual" || (b == "sdpa" && kHaveSdpa) || (b == "flash_attn_2" && kHaveFa2) ||
              (b == "flash_attn_3" && kHaveFa3);
    if (ok) {
      std::string warning;
      if (i != start)
        warning = fmt::format("attention_backend = {} is not available ({}); using {}", requested, why, b);
      return {b, warning};
    }
    if (!why.empty()) why += "; ";
    if (b == "sdpa")
      why += fmt::format("sdpa needs LibTorch >= 2.0, this build has {}.{}", TORCH_VERSION_MAJOR,
                         TORCH_VERSION_MINOR);
    else
      why += b + " is not linked into this build";
  }
  return {"manual", ""};  // unreachable: manual is always available
}

namespace {
#if TORCH_VERSION_MAJOR >= 2
// Lets SDPA choose among the fast CUDA kernels (flash, memory-efficient, cuDNN
// where the LibTorch has it); the math kernel stays as SDPA's own last resort.
void enable_fast_sdp_kernels_once() {
  static bool done = [] {
    auto& ctx = at::globalContext();
    ctx.setSDPUseFlash(true);
    ctx.setSDPUseMemEfficient(true);
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 4
    ctx.setSDPUseCuDNN(true);
#endif
    return true;
  }();
  (void)done;
}
#endif
}  // namespace

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const std::string& backend, const torch::Tensor& mask,
                               double dropout, bool training) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const int64_t K = k.size(1), G = H / K;
  const double p = training ? dropout : 0.0;
#if TORCH_VERSION_MAJOR >= 2
  if (backend == "sdpa") {
    if (q.is_cuda()) enable_fast_sdp_kernels_once();
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 5
    return at::scaled_dot_product_attention(q, k, v, {}, p, /*is_causal=*/true, c10::optional<double>(),
                                            /*enable_gqa=*/G > 1);
#else
    // No enable_gqa before 2.5: K/V are expanded to H heads (one copy).
    auto kk = G > 1 ? k.unsqueeze(2).expand({B, K, G, T, D}).reshape({B, H, T, D}) : k;
    auto vv = G > 1 ? v.unsqueeze(2).expand({B, K, G, T, D}).reshape({B, H, T, D}) : v;
    return at::scaled_dot_product_attention(q, kk, vv, {}, p, /*is_causal=*/true);
#endif
  }
#endif
  LLMTRAIN_CHECK(backend == "manual", "attention backend '{}' is not built", backend);
  LLMTRAIN_CHECK(mask.defined() && mask.size(0) >= T, "manual attention needs the cached causal mask");
  // Query head h reads KV head h / G: grouping the G queries of one KV head along
  // time gives one (G*T, D) x (D, T) product per KV head, with no K/V copy.
  auto qg = (q * (1.0 / std::sqrt(static_cast<double>(D)))).reshape({B, K, G * T, D});
  auto att = at::matmul(qg, k.transpose(-2, -1));                        // (B, K, G*T, T)
  att.view({B, K, G, T, T}).add_(mask.narrow(0, 0, T).narrow(1, 0, T));  // -inf above the diagonal
  att = at::softmax(att, -1);
  if (p > 0) att = at::dropout(att, p, true);
  return at::matmul(att, v).view({B, H, T, D});                          // (B, K, G*T, D) -> (B, H, T, D)
}

// ---- attention module --------------------------------------------------------------

AttentionImpl::AttentionImpl(const ModelConfig& cfg)
    : n_head_(cfg.n_head), n_kv_head_(cfg.n_kv_head), head_dim_(cfg.head_dim), dropout_(cfg.dropout) {
  const int64_t qkv = (cfg.n_head + 2 * cfg.n_kv_head) * cfg.head_dim;
  c_attn = register_module("c_attn", torch::nn::Linear(torch::nn::LinearOptions(cfg.n_embd, qkv).bias(cfg.bias)));
  c_proj = register_module(
      "c_proj", torch::nn::Linear(torch::nn::LinearOptions(cfg.n_head * cfg.head_dim, cfg.n_embd).bias(cfg.bias)));
  if (cfg.qk_norm) {
    q_norm = register_module("q_norm", Norm(cfg.head_dim, false, false, cfg.norm_eps));
    k_norm = register_module("k_norm", Norm(cfg.head_dim, false, false, cfg.norm_eps));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                     const torch::Tensor& mask, const std::string& backend) {
  const int64_t B = x.size(0), T = x.size(1);
  const int64_t H = n_head_, K = n_kv_head_, D = head_dim_;
  auto qkv = c_attn(x);                                                // (B, T, (H + 2K) * D)
  auto q = qkv.narrow(-1, 0, H * D).view({B, T, H, D});
  auto k = qkv.narrow(-1, H * D, K * D).view({B, T, K, D});
  auto v = qkv.narrow(-1, (H + K) * D, K * D).view({B, T, K, D});
  if (q_norm) {
    q = q_norm(q);
    k = k_norm(k);
  }
  if (cos.defined()) {
    q = apply_rope(q, cos.narrow(0, 0, T), sin.narrow(0, 0, T));
    k = apply_rope(k, cos.narrow(0, 0, T), sin.narrow(0, 0, T));
  }
  // (B, T, h, D) -> (B, h, T, D), contiguous so that heads group without copies.
  q = q.transpose(1, 2).contiguous();
  k = k.transpose(1, 2).contiguous();
  v = v.transpose(1, 2).contiguous();
  auto y = causal_attention(q, k, v, backend, mask, dropout_, is_training());  // (B, H, T, D)
  y = y.transpose(1, 2).reshape({B, T, H * D});
  return c_proj(y);
}

// ---- MLP -------------------------------------------------------------------------

MlpImpl::MlpImpl(const ModelConfig& cfg) : swiglu_(cfg.ffn == "swiglu") {
  const int64_t out = swiglu_ ? 2 * cfg.ffn_hidden : cfg.ffn_hidden;
  c_fc = register_module("c_fc", torch::nn::Linear(torch::nn::LinearOptions(cfg.n_embd, out).bias(cfg.bias)));
  c_proj = register_module("c_proj",
                           torch::nn::Linear(torch::nn::LinearOptions(cfg.ffn_hidden, cfg.n_embd).bias(cfg.bias)));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  auto h = c_fc(x);  // (B, T, 2F) swiglu: gate | up; (B, T, F) gelu
  if (swiglu_) {
    auto parts = h.chunk(2, -1);
    h = at::silu(parts[0]) * parts[1];  // (B, T, F)
  } else {
    h = at::gelu(h, "tanh");  // GPT-2's tanh approximation
  }
  return c_proj(h);
}

// ---- block -----------------------------------------------------------------------

BlockImpl::BlockImpl(const ModelConfig& cfg) : dropout_(cfg.dropout) {
  const bool ln = cfg.norm == "layernorm";
  ln_1 = register_module("ln_1", Norm(cfg.n_embd, ln, cfg.bias, cfg.norm_eps));
  attn = register_module("attn", Attention(cfg));
  ln_2 = register_module("ln_2", Norm(cfg.n_embd, ln, cfg.bias, cfg.norm_eps));
  mlp = register_module("mlp", Mlp(cfg));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                 const torch::Tensor& mask, const std::string& backend) {
  const double p = is_training() ? dropout_ : 0.0;
  auto a = attn(ln_1(x), cos, sin, mask, backend);
  auto h = x + (p > 0 ? at::dropout(a, p, true) : a);
  auto m = mlp(ln_2(h));
  return h + (p > 0 ? at::dropout(m, p, true) : m);
}

}  // namespace llmtrain::model_detail
