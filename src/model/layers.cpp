#include "model/layers.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/SDPBackend.h>
#include <ATen/record_function.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "llmtrain/core/error.hpp"

namespace llmtrain::model_detail {

torch::Tensor linear(const torch::nn::Linear& lin, const torch::Tensor& x) {
  return at::linear(x, lin->weight, lin->options.bias() ? lin->bias : torch::Tensor());
}

// ---- norms ---------------------------------------------------------------------

NormImpl::NormImpl(int64_t dim, bool layernorm, bool bias, double eps)
    : dim_(dim), layernorm_(layernorm), eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
  if (layernorm && bias) this->bias = register_parameter("bias", torch::zeros({dim}));
}

namespace {

// RMSNorm on the CPU as CUDA's fused kernel (at::_fused_rms_norm) runs it: one
// op each way (llmtrain::rms_norm and its backward in a profile), saving only
// the input and the fp32 reciprocal RMS of each row, so the CPU keeps what the
// GPU keeps (the memory model, model/activations.cpp, counts it once for both).
// Forward: y = (x * rstd) * w in fp32, rounded once to x's dtype (fp32: the bits
// of the composite pow/mean/rsqrt/mul). x: (..., C), w: (C) in x's dtype.
class RmsNormCpu : public torch::autograd::Function<RmsNormCpu> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w, double eps) {
    RECORD_FUNCTION("llmtrain::rms_norm", std::vector<c10::IValue>());
    auto xf = x.scalar_type() == at::kFloat ? x : x.to(at::kFloat);
    auto rstd = at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);  // (..., 1) fp32
    auto y = xf * rstd * (w.scalar_type() == at::kFloat ? w : w.to(at::kFloat));
    ctx->save_for_backward({x, w, rstd});
    return y.scalar_type() == x.scalar_type() ? y : y.to(x.scalar_type());
  }
  // With xhat = x * rstd and g = dy * w: dx = rstd * (g - xhat * mean(g * xhat)),
  // dw = sum over rows of dy * xhat (fp32, then the weight's dtype).
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    RECORD_FUNCTION("llmtrain::rms_norm_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1], &rstd = saved[2];
    auto dy = grads[0].scalar_type() == at::kFloat ? grads[0] : grads[0].to(at::kFloat);
    auto xhat = (x.scalar_type() == at::kFloat ? x : x.to(at::kFloat)) * rstd;
    torch::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) {
      auto g = dy * (w.scalar_type() == at::kFloat ? w : w.to(at::kFloat));
      dx = rstd * (g - xhat * (g * xhat).mean(-1, /*keepdim=*/true));
      if (dx.scalar_type() != x.scalar_type()) dx = dx.to(x.scalar_type());
    }
    if (ctx->needs_input_grad(1)) {
      dw = (dy * xhat).reshape({-1, w.numel()}).sum(0);
      if (dw.scalar_type() != w.scalar_type()) dw = dw.to(w.scalar_type());
    }
    return {dx, dw, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  if (layernorm_) return at::layer_norm(x, {dim_}, weight, bias, eps_);
  // The weight in x's dtype: CUDA's fused kernel (one launch each way, saving x
  // and rstd) needs the two to match, else at::rms_norm falls back to the
  // composite. They differ only for QK-norm under autocast (q, k 16-bit; the
  // cast is of D elements).
  auto w = weight.scalar_type() == x.scalar_type() ? weight : weight.to(x.scalar_type());
  if (x.is_cpu()) return RmsNormCpu::apply(x, w, eps_);
  return at::rms_norm(x, {dim_}, w, eps_);
}

torch::ScalarType gemm_input_dtype(const torch::Tensor& x) {
  const auto dev = x.device().type();
  return at::autocast::is_autocast_enabled(dev) ? at::autocast::get_autocast_dtype(dev) : x.scalar_type();
}

kernels::NormOut NormImpl::forward_fused(const torch::Tensor& x, const torch::Tensor& delta,
                                         torch::ScalarType out_dtype) {
  if (layernorm_) return kernels::add_layernorm(x, delta, weight, bias, eps_, out_dtype);
  return kernels::add_rmsnorm(x, delta, weight, eps_, out_dtype);
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

namespace {

// RoPE as one autograd node of ATen ops (compile=False): each half written in
// place by a multiply and a fused multiply-add, 4 passes over half the row in
// each direction. Composed from x1*c - x2*s, x2*c + x1*s and a cat, it took 7
// kernels forward (9 row-widths of traffic) and autograd's backward as many
// again, and the H100 trace of 2026-11-27 had these muls among its largest
// element-wise costs. RoPE is a rotation: its backward is the rotation by -angle,
// so it saves nothing but the (T, 1, D/2) tables.
//   forward:  y1 = x1 c - x2 s,   y2 = x2 c + x1 s
//   backward: dx1 = dy1 c + dy2 s, dx2 = dy2 c - dy1 s
class RopeRotate : public torch::autograd::Function<RopeRotate> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& c,
                               const torch::Tensor& s) {
    ctx->save_for_backward({c, s});
    return rotate(x, c, s, 1.0);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {rotate(grads[0], saved[0], saved[1], -1.0), torch::Tensor(), torch::Tensor()};
  }

  // x rotated by +angle (sign 1) or -angle (sign -1): (B, T, h, D) contiguous.
  static torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& c, const torch::Tensor& s, double sign) {
    const int64_t half = x.size(-1) / 2;
    const auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
    auto y = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
    auto y1 = y.narrow(-1, 0, half), y2 = y.narrow(-1, half, half);
    at::mul_out(y1, x1, c).addcmul_(x2, s, -sign);  // x1 c -+ x2 s
    at::mul_out(y2, x2, c).addcmul_(x1, s, sign);   // x2 c +- x1 s
    return y;
  }
};

}  // namespace

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  // The tables come cast once per forward (TransformerImpl::rope_for); a cast
  // here is for other callers.
  auto c = cos.scalar_type() == x.scalar_type() ? cos : cos.to(x.scalar_type());
  auto s = sin.scalar_type() == x.scalar_type() ? sin : sin.to(x.scalar_type());
  return RopeRotate::apply(x, c, s);  // (B, T, h, D)
}

// ---- attention backends ----------------------------------------------------------

namespace {

const char* kernel_name(at::SDPBackend b, bool cuda) {
  switch (b) {
    case at::SDPBackend::flash_attention: return cuda ? "SDPA flash" : "SDPA flash (CPU)";
    case at::SDPBackend::cudnn_attention: return "SDPA cuDNN";
    case at::SDPBackend::efficient_attention: return "SDPA memory-efficient";
    case at::SDPBackend::math: return "SDPA math";
    default: return "SDPA (no kernel)";
  }
}

// Restricts SDPA to one kernel while alive (Python's sdpa_kernel context), and
// restores the process's flags after. `any` enables them all, math included.
class SdpaKernelGuard {
 public:
  explicit SdpaKernelGuard(SdpaKernel k) {
    auto& ctx = at::globalContext();
    prev_ = {ctx.userEnabledFlashSDP(), ctx.userEnabledCuDNNSDP(), ctx.userEnabledMemEfficientSDP(),
             ctx.userEnabledMathSDP()};
    const bool any = k == SdpaKernel::any;
    ctx.setSDPUseFlash(any || k == SdpaKernel::flash);
    ctx.setSDPUseCuDNN(any || k == SdpaKernel::cudnn);
    ctx.setSDPUseMemEfficient(any || k == SdpaKernel::efficient);
    ctx.setSDPUseMath(any);
  }
  ~SdpaKernelGuard() {
    auto& ctx = at::globalContext();
    ctx.setSDPUseFlash(prev_[0]);
    ctx.setSDPUseCuDNN(prev_[1]);
    ctx.setSDPUseMemEfficient(prev_[2]);
    ctx.setSDPUseMath(prev_[3]);
  }
  SdpaKernelGuard(const SdpaKernelGuard&) = delete;
  SdpaKernelGuard& operator=(const SdpaKernelGuard&) = delete;

 private:
  std::array<bool, 4> prev_{};
};

// The kernel SDPA's dispatcher picks for this head layout under `k`
// (SDPBackend::error when none of the allowed kernels can run it). Asked with
// gradients on, as training calls it: the dispatcher then also checks the
// kernel's backward constraints (under NoGradGuard it would accept a kernel
// whose backward refuses the layout).
at::SDPBackend sdpa_choice(SdpaKernel k, torch::Device device, torch::ScalarType dtype, int64_t H, int64_t K,
                           int64_t D, int64_t T, double dropout) {
  torch::AutoGradMode with_grad(true);
  SdpaKernelGuard guard(k);
  const auto opt = torch::TensorOptions().dtype(dtype).device(device).requires_grad(true);
  // The layout AttentionImpl passes: (B, h, T, D) views of (B, T, h, D) storage.
  auto q = torch::empty({1, T, H, D}, opt).transpose(1, 2), kv = torch::empty({1, T, K, D}, opt).transpose(1, 2);
  try {
    return static_cast<at::SDPBackend>(
        at::_fused_sdp_choice(q, kv, kv, {}, dropout, /*is_causal=*/true, std::nullopt, /*enable_gqa=*/K != H));
  } catch (const c10::Error&) {
    return at::SDPBackend::error;  // no allowed kernel: SDPA refuses instead of choosing
  }
}

}  // namespace

std::string AttentionPlan::label() const {
  return backend == AttentionBackend::manual ? to_string(backend)
                                             : fmt::format("{} ({})", to_string(backend), kernel_used);
}

AttentionPlan plan_attention(AttentionBackend requested, torch::Device device, torch::ScalarType dtype,
                             int64_t H, int64_t K, int64_t D, int64_t T, double dropout) {
  static const std::vector<AttentionBackend> chain = {AttentionBackend::flash_attn_3, AttentionBackend::flash_attn_2,
                                                      AttentionBackend::sdpa, AttentionBackend::manual};
  const auto start = std::find(chain.begin(), chain.end(), requested);
  AttentionPlan plan;
  plan.requested = requested;
  const bool cuda = device.is_cuda();
  const std::string where = fmt::format("{} heads x {} (KV {}), {}, {}", H, D, K, c10::toString(dtype),
                                        cuda ? "CUDA" : "CPU");
  for (auto it = start; it != chain.end(); ++it) {
    const AttentionBackend b = *it;
    if (b == AttentionBackend::manual) {
      plan.backend = b;
      plan.kernel_used = "manual";
      return plan;
    }
    const SdpaKernel k = b == AttentionBackend::flash_attn_3   ? SdpaKernel::cudnn
                         : b == AttentionBackend::flash_attn_2 ? SdpaKernel::flash
                                                               : SdpaKernel::any;
    if (k != SdpaKernel::any && !cuda) {
      plan.unavailable.push_back(fmt::format("attention_backend {} is not available on CPU ({} is a CUDA kernel)",
                                             to_string(b),
                                             k == SdpaKernel::cudnn ? "SDPA's cuDNN attention" : "FlashAttention-2"));
      continue;
    }
    const at::SDPBackend chosen = sdpa_choice(k, device, dtype, H, K, D, T, dropout);
    const bool ok = k == SdpaKernel::any
                        ? chosen != at::SDPBackend::error
                        : (k == SdpaKernel::cudnn ? chosen == at::SDPBackend::cudnn_attention
                                                  : chosen == at::SDPBackend::flash_attention);
    if (!ok) {
      plan.unavailable.push_back(fmt::format("attention_backend {} cannot run {} (SDPA's dispatcher refused the "
                                             "kernel; run with TORCH_CPP_LOG_LEVEL=INFO for its reasons)",
                                             to_string(b), where));
      continue;
    }
    plan.backend = b;
    plan.kernel = k;
    plan.kernel_used = kernel_name(chosen, cuda);
    return plan;
  }
  return plan;  // unreachable: manual ends the chain
}

// ---- documents of a packed batch ------------------------------------------------------

Documents::Documents(const torch::Tensor& idx, int64_t eos_id) {
  LLMTRAIN_CHECK(eos_id >= 0, "document_masking needs the data's EOS id, got {}", eos_id);
  const int64_t T = idx.size(1);
  starts_ = torch::zeros_like(idx, torch::kBool);  // (B, T)
  starts_.select(1, 0).fill_(true);
  if (T > 1) starts_.narrow(1, 1, T - 1).copy_(idx.narrow(1, 0, T - 1) == eos_id);
  doc_ = starts_.cumsum(1);  // (B, T) int64, 1 for the row's first document
  auto t = torch::arange(T, idx.options()).expand_as(idx);
  auto first = std::get<0>(torch::where(starts_, t, torch::zeros_like(t)).cummax(1));  // its document's start
  positions_ = t - first;
}

const torch::Tensor& Documents::visible() const {
  if (!visible_.defined()) {
    const int64_t T = doc_.size(1);
    auto same = doc_.unsqueeze(2) == doc_.unsqueeze(1);  // (B, T, T)
    auto causal = torch::ones({T, T}, doc_.options().dtype(torch::kBool)).tril();
    visible_ = (same & causal).unsqueeze(1);  // (B, 1, T, T)
  }
  return visible_;
}

const torch::Tensor& Documents::additive_mask(torch::ScalarType dtype) const {
  if (!additive_.defined() || additive_.scalar_type() != dtype) {
    additive_ = torch::zeros(visible().sizes(), doc_.options().dtype(dtype))
                    .masked_fill_(visible().logical_not(), -std::numeric_limits<double>::infinity());
  }
  return additive_;
}

const torch::Tensor& Documents::cu_seqlens() const {
  if (!cu_seqlens_.defined()) {
    auto flat_starts = starts_.reshape({-1}).nonzero().reshape({-1});  // (N) int64, one host sync
    auto end = torch::full({1}, starts_.numel(), flat_starts.options());
    auto cu = torch::cat({flat_starts, end});
    max_seqlen_ = cu.diff().max().item<int64_t>();
    cu_seqlens_ = cu.to(torch::kInt32);
  }
  return cu_seqlens_;
}

int64_t Documents::max_seqlen() const {
  cu_seqlens();
  return max_seqlen_;
}

bool uses_varlen_flash(const torch::Tensor& q, const AttentionPlan& plan) {
  const auto dt = q.scalar_type();
  const int64_t D = q.size(-1);
  return q.is_cuda() && plan.backend != AttentionBackend::manual && (dt == at::kHalf || dt == at::kBFloat16) &&
         D % 8 == 0 && D <= 256;
}

namespace {

// FlashAttention's varlen kernel over the documents of the flattened batch:
// causal inside each document, nothing across. q: (B, H, T, D), k, v: (B, K, T, D).
torch::Tensor varlen_flash_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const Documents& docs, double p) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), K = k.size(1);
  auto qf = q.transpose(1, 2).reshape({B * T, H, D});  // (B*T, H, D)
  auto kf = k.transpose(1, 2).reshape({B * T, K, D});
  auto vf = v.transpose(1, 2).reshape({B * T, K, D});
  const auto& cu = docs.cu_seqlens();
  const int64_t n = docs.max_seqlen();
  auto out = std::get<0>(at::_flash_attention_forward(qf, kf, vf, cu, cu, n, n, p, /*is_causal=*/true,
                                                      /*return_debug_mask=*/false));
  return out.view({B, T, H, D}).transpose(1, 2);  // (B, H, T, D)
}

}  // namespace

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const AttentionPlan& plan, const torch::Tensor& mask, double dropout, bool training,
                               const Documents* docs) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const int64_t K = k.size(1), G = H / K;
  const double p = training ? dropout : 0.0;
  if (docs && uses_varlen_flash(q, plan)) return varlen_flash_attention(q, k, v, *docs, p);
  if (docs && plan.backend != AttentionBackend::manual)  // SDPA picks a kernel that takes a mask
    return at::scaled_dot_product_attention(q, k, v, docs->additive_mask(q.scalar_type()), p, /*is_causal=*/false,
                                            std::nullopt, /*enable_gqa=*/G > 1);
  if (plan.backend != AttentionBackend::manual) {
    // On CPU the flags do not matter (SDPA has one fused CPU kernel); on CUDA
    // they hold SDPA to the planned kernel, so it never falls back silently.
    std::optional<SdpaKernelGuard> guard;
    if (q.is_cuda() && plan.kernel != SdpaKernel::any) guard.emplace(plan.kernel);
    return at::scaled_dot_product_attention(q, k, v, {}, p, /*is_causal=*/true, std::nullopt,
                                            /*enable_gqa=*/G > 1);
  }
  LLMTRAIN_CHECK(mask.defined() && mask.size(0) >= T, "manual attention needs the cached causal mask");
  // Query head h reads KV head h / G: grouping the G queries of one KV head along
  // time gives one (G*T, D) x (D, T) product per KV head, with no K/V copy.
  auto qg = (q * (1.0 / std::sqrt(static_cast<double>(D)))).reshape({B, K, G * T, D});
  auto att = at::matmul(qg, k.transpose(-2, -1));                        // (B, K, G*T, T)
  if (docs) {  // the documents' additive mask (causal inside each document), made once per forward
    att.view({B, K, G, T, T}).add_(docs->additive_mask(att.scalar_type()).unsqueeze(1));  // (B, 1, 1, T, T)
  } else {
    auto m = mask.narrow(0, 0, T).narrow(1, 0, T);
    att.view({B, K, G, T, T}).add_(m.scalar_type() == att.scalar_type() ? m : m.to(att.scalar_type()));
  }
  att = at::softmax(att, -1);
  if (p > 0) att = at::dropout(att, p, true);
  return at::matmul(att, v).view({B, H, T, D});                          // (B, K, G*T, D) -> (B, H, T, D)
}

// ---- attention module --------------------------------------------------------------

AttentionImpl::AttentionImpl(const ModelConfig& cfg, std::shared_ptr<const AttentionPlan> plan)
    : n_head_(cfg.n_head), n_kv_head_(cfg.n_kv_head), head_dim_(cfg.head_dim), dropout_(cfg.dropout),
      fused_(cfg.fused_kernels), plan_(std::move(plan)) {
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
                                     const torch::Tensor& mask, const Documents* docs) {
  const int64_t B = x.size(0), T = x.size(1);
  const int64_t H = n_head_, K = n_kv_head_, D = head_dim_;
  auto qkv = linear(c_attn, x);                                        // (B, T, (H + 2K) * D)
  if (fused_) {
    // One op: q and k normalized (Qwen3) and rotated, v moved, all three written
    // as (B, T, h, D) storage and handed out as (B, h, T, D) views: the layout
    // SDPA's kernels take (plan_attention probes it). SDPA's output then comes
    // in (B, T, H, D) storage, so the reshape below is a view: c_proj saves the
    // tensor SDPA saves, not a copy of it (issue 46: (B, T, H*D) per block). The
    // manual path groups heads by reshape: it takes contiguous (B, h, T, D).
    // The tables come in fp32 (TransformerImpl::rope_for does not cast them here).
    auto r = kernels::rope_qk_norm(qkv, H, K, cos, sin, q_norm ? q_norm->weight : torch::Tensor(),
                                   k_norm ? k_norm->weight : torch::Tensor(), q_norm ? q_norm->eps() : 0.0);
    if (plan_->backend == AttentionBackend::manual) {
      r.q = r.q.contiguous();
      r.k = r.k.contiguous();
      r.v = r.v.contiguous();
    }
    auto y = causal_attention(r.q, r.k, r.v, *plan_, mask, dropout_, is_training(), docs);  // (B, H, T, D)
    return linear(c_proj, y.transpose(1, 2).reshape({B, T, H * D}));
  }
  // One split: its backward writes the three gradients into one (B, T, (H+2K)D)
  // buffer, where three narrows would each zero-fill one and add.
  auto parts = qkv.split_with_sizes({H * D, K * D, K * D}, -1);
  auto q = parts[0].view({B, T, H, D});
  auto k = parts[1].view({B, T, K, D});
  auto v = parts[2].view({B, T, K, D});
  if (q_norm) {
    q = q_norm(q);
    k = k_norm(k);
  }
  const bool rope = cos.defined();
  if (rope) {  // the caller's tables are for these T positions
    q = apply_rope(q, cos, sin);
    k = apply_rope(k, cos, sin);
  }
  if (plan_->backend == AttentionBackend::manual) {
    // (B, T, h, D) -> (B, h, T, D), contiguous so that heads group without copies.
    q = q.transpose(1, 2).contiguous();
    k = k.transpose(1, 2).contiguous();
    v = v.transpose(1, 2).contiguous();
  } else {
    // SDPA's kernels read (B, h, T, D) views of (B, T, h, D) storage (the layout
    // plan_attention probes), so q and k go as RoPE or the norm made them and
    // the output comes back in (B, T, H, D) storage (its reshape below is a
    // view). v alone is copied (into the same layout) when q and k are new
    // tensors: a view of it would keep all of c_attn's output alive for backward,
    // three times v's bytes for LLaMA; with QK-norm (which saves its inputs,
    // views of qkv) or without RoPE (q, k views of qkv) that is kept anyway.
    if (rope && !q_norm) v = v.contiguous();
    q = q.transpose(1, 2);
    k = k.transpose(1, 2);
    v = v.transpose(1, 2);
  }
  auto y = causal_attention(q, k, v, *plan_, mask, dropout_, is_training(), docs);  // (B, H, T, D)
  y = y.transpose(1, 2).reshape({B, T, H * D});
  return linear(c_proj, y);
}

// ---- MLP -------------------------------------------------------------------------

MlpImpl::MlpImpl(const ModelConfig& cfg) : swiglu_(cfg.ffn == FfnKind::swiglu), fused_(cfg.fused_kernels) {
  const int64_t out = swiglu_ ? 2 * cfg.ffn_hidden : cfg.ffn_hidden;
  c_fc = register_module("c_fc", torch::nn::Linear(torch::nn::LinearOptions(cfg.n_embd, out).bias(cfg.bias)));
  c_proj = register_module("c_proj",
                           torch::nn::Linear(torch::nn::LinearOptions(cfg.ffn_hidden, cfg.n_embd).bias(cfg.bias)));
}

namespace {

// silu(gate) * up from c_fc's (..., 2F) output h = gate | up, through ATen's
// ops, keeping only h for backward: silu(gate) is made again there (one more
// pass over (..., F)) instead of being saved, (..., F) in the compute dtype per
// block (issue 46: 3.6 GB of LLaMA-2 1.36B's activations at 8 x 2048, what
// compile=False held above PyTorch eager with its gradient buckets). The same
// ops and values both ways as autograd's silu, mul and split: forward silu and
// mul; backward silu, the two products and silu_backward, written into the
// halves of one (..., 2F) gradient (where split's backward concatenates).
class SwigluRecompute : public torch::autograd::Function<SwigluRecompute> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h) {
    const int64_t F = h.size(-1) / 2;
    ctx->save_for_backward({h});
    return at::silu(h.narrow(-1, 0, F)) * h.narrow(-1, F, F);  // (..., F)
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto h = ctx->get_saved_variables()[0];
    const int64_t F = h.size(-1) / 2;
    const auto gate = h.narrow(-1, 0, F), up = h.narrow(-1, F, F);
    const auto& dy = grads[0];
    auto dh = at::empty_like(h, at::MemoryFormat::Contiguous);  // (..., 2F)
    auto dgate = dh.narrow(-1, 0, F), dup = dh.narrow(-1, F, F);
    at::mul_out(dup, dy, at::silu(gate));                  // d up = dy * silu(gate)
    at::silu_backward_out(dgate, dy * up, gate);           // d gate = silu'(gate) * dy * up
    return {dh};
  }
};

}  // namespace

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  if (fused_) {
    if (swiglu_) return linear(c_proj, kernels::swiglu(linear(c_fc, x)));  // (B, T, 2F) -> (B, T, F) -> (B, T, C)
    // GELU's bias goes into the kernel (one pass over (B, T, F) either way).
    auto h = at::linear(x, c_fc->weight);  // (B, T, F)
    return linear(c_proj, kernels::gelu_tanh(h, c_fc->options.bias() ? c_fc->bias : torch::Tensor()));
  }
  auto h = linear(c_fc, x);  // (B, T, 2F) swiglu: gate | up; (B, T, F) gelu
  if (swiglu_) {
    h = SwigluRecompute::apply(h);  // (B, T, F); silu(gate) made again in backward, not saved
  } else {
    h = at::gelu(h, "tanh");  // GPT-2's tanh approximation
  }
  return linear(c_proj, h);
}

// ---- block -----------------------------------------------------------------------

BlockImpl::BlockImpl(const ModelConfig& cfg, std::shared_ptr<const AttentionPlan> plan)
    : dropout_(cfg.dropout), fused_(cfg.fused_kernels) {
  const bool ln = cfg.norm == NormKind::layernorm;
  ln_1 = register_module("ln_1", Norm(cfg.n_embd, ln, cfg.bias, cfg.norm_eps));
  attn = register_module("attn", Attention(cfg, std::move(plan)));
  ln_2 = register_module("ln_2", Norm(cfg.n_embd, ln, cfg.bias, cfg.norm_eps));
  mlp = register_module("mlp", Mlp(cfg));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                 const torch::Tensor& mask, const Documents* docs) {
  const double p = is_training() ? dropout_ : 0.0;
  if (fused_) {
    const auto dtype = gemm_input_dtype(x);
    auto a = attn(ln_1->forward_fused(x, {}, dtype).normed, cos, sin, mask, docs);
    if (p > 0) a = at::dropout(a, p, true);
    auto n = ln_2->forward_fused(x, a, dtype);  // h = x + a, ln_2(h): one op
    auto m = mlp(n.normed);
    return n.residual + (p > 0 ? at::dropout(m, p, true) : m);
  }
  auto a = attn(ln_1(x), cos, sin, mask, docs);
  auto h = x + (p > 0 ? at::dropout(a, p, true) : a);
  auto m = mlp(ln_2(h));
  return h + (p > 0 ? at::dropout(m, p, true) : m);
}

}  // namespace llmtrain::model_detail
