#include "llmtrain/model/transformer.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/core/log.hpp"
#include "llmtrain/kernels/kernels.hpp"  // defines: the fused ops of compile=True, self_check
#include "llmtrain/model/params.hpp"
#include "model/recompute.hpp"
#include "model/fused_loss.hpp"
#include "model/layers.hpp"

namespace llmtrain {

using model_detail::Block;
using model_detail::Norm;

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
  if (cfg.pos_encoding == PosEncoding::learned)
    p.wpe = register_module("wpe", torch::nn::Embedding(cfg.block_size, cfg.n_embd));
  // A ModuleList names the blocks h.0, h.1, ... (LibTorch refuses dots in names).
  auto h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.n_layer; ++i) {
    p.h.push_back(Block(cfg, p.attention_plan));
    h->push_back(p.h.back());
  }
  p.ln_f = register_module("ln_f", Norm(cfg.n_embd, cfg.norm == NormKind::layernorm, cfg.bias, cfg.norm_eps));
  if (!cfg.tie_embeddings)
    p.lm_head = register_module(
        "lm_head", torch::nn::Linear(torch::nn::LinearOptions(cfg.n_embd, cfg.padded_vocab).bias(false)));
  if (cfg.pos_encoding == PosEncoding::rope) {
    auto [cos, sin] = model_detail::rope_tables(cfg.block_size, cfg.head_dim, cfg.rope_theta);
    p.rope_cos = register_buffer("rope_cos", cos);
    p.rope_sin = register_buffer("rope_sin", sin);
  }
  if (cfg.attention_backend == AttentionBackend::manual) {
    // Built once; every step adds a (T, T) slice of it in place.
    auto mask = torch::full({cfg.block_size, cfg.block_size}, -std::numeric_limits<float>::infinity());
    p.causal_mask = register_buffer("causal_mask", torch::triu(mask, 1));
  }
  // Weights keep LibTorch's default initialization until init_weights(seed):
  // drawing twice would cost seconds at full size.
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& idx) {
  auto& p = *parts_;
  auto x = hidden(idx);
  if (p.lm_head) return model_detail::linear(p.lm_head, x);  // (B, T, padded_vocab)
  return at::linear(x, p.wte->weight);
}

torch::Tensor TransformerImpl::hidden(const torch::Tensor& idx) {
  auto& p = *parts_;
  const int64_t T = idx.size(1);
  LLMTRAIN_CHECK(T <= cfg_.block_size, "sequence length {} exceeds block_size = {}", T, cfg_.block_size);
  if (p.hooks) p.hooks->before_forward();
  // document_masking: the documents of each row, read from the ids themselves.
  std::shared_ptr<const model_detail::Documents> docs;
  if (cfg_.document_masking) docs = std::make_shared<const model_detail::Documents>(idx, cfg_.eos_id);
  auto embed = [&] {
    auto e = p.wte(idx);  // (B, T, C)
    if (p.wpe && docs) return e + at::embedding(p.wpe->weight, docs->positions());  // (B, T, C)
    if (p.wpe) e = e + p.wpe->weight.narrow(0, 0, T);  // positions 0..T-1: (T, C) broadcast
    return e;
  };
  auto x = p.hooks ? p.hooks->run_embedding(embed) : embed();
  if (cfg_.dropout > 0 && is_training()) x = at::dropout(x, cfg_.dropout, true);
  const auto rope = rope_for(idx, docs.get());
  for (size_t i = 0; i < p.h.size(); ++i) {
    const auto body = block_body(static_cast<int64_t>(i), rope, docs);
    x = p.hooks ? p.hooks->run_block(static_cast<int64_t>(i), x, body) : body(x);
  }
  if (p.hooks) x = p.hooks->before_head(x);
  if (cfg_.fused_kernels) return p.ln_f->forward_fused(x, {}, model_detail::gemm_input_dtype(x)).normed;
  return p.ln_f(x);
}

// Block i as a function of its input. A recomputed block (activation
// checkpointing) keeps only its input; inside FSDP's hooks the recompute runs
// between their gather (before the block's backward) and their reduce-scatter
// (after it), so it reads gathered parameters. The body holds the block and the
// cached tables by value: backward calls it after hidden() has returned.
std::function<torch::Tensor(const torch::Tensor&)> TransformerImpl::block_body(
    int64_t i, const std::pair<torch::Tensor, torch::Tensor>& rope,
    const std::shared_ptr<const model_detail::Documents>& docs) {
  auto& p = *parts_;
  std::function<torch::Tensor(const torch::Tensor&)> plain =
      [block = p.h.at(static_cast<size_t>(i)), cos = rope.first, sin = rope.second, mask = p.causal_mask,
       docs](const torch::Tensor& in) mutable { return block(in, cos, sin, mask, docs.get()); };
  if (!cfg_.recomputes_block(i)) return plain;
  const bool random = cfg_.dropout > 0 && is_training();
  return [plain, random](const torch::Tensor& in) { return model_detail::recompute_in_backward(plain, in, random); };
}

// RoPE's cos/sin for the positions of idx: the tables' first T rows (T, 1, D/2),
// or with documents each token's own position's row (B, T, 1, D/2); undefined
// without RoPE.
std::pair<torch::Tensor, torch::Tensor> TransformerImpl::rope_for(const torch::Tensor& idx,
                                                                  const model_detail::Documents* docs) const {
  const auto& p = *parts_;
  if (!p.rope_cos.defined()) return {};
  const int64_t B = idx.size(0), T = idx.size(1);
  // Cast once here to the dtype RoPE reads (c_attn's output: autocast's dtype,
  // else the parameters'), not once per block and table (apply_rope casts only
  // what does not match).
  const auto dev = p.rope_cos.device().type();
  const auto dtype = at::autocast::is_autocast_enabled(dev) ? at::autocast::get_autocast_dtype(dev)
                                                             : p.wte->weight.scalar_type();
  // compile=True: rope_qk_norm reads fp32 tables (its math is fp32): no cast.
  auto cast = [&](const torch::Tensor& t) {
    return cfg_.fused_kernels || t.scalar_type() == dtype ? t : t.to(dtype);
  };
  if (!docs) return {cast(p.rope_cos.narrow(0, 0, T)), cast(p.rope_sin.narrow(0, 0, T))};
  auto rows = docs->positions().reshape({-1});  // (B*T)
  auto gather = [&](const torch::Tensor& table) {
    return cast(table.index_select(0, rows).view({B, T, 1, table.size(-1)}));
  };
  return {gather(p.rope_cos), gather(p.rope_sin)};
}

torch::Tensor TransformerImpl::loss(const torch::Tensor& idx, const torch::Tensor& targets) {
  if (cfg_.fused_kernels) {
    auto& p = *parts_;
    auto x = hidden(idx);  // (B, T, C)
    return kernels::lm_head_cross_entropy(x.reshape({-1, x.size(-1)}), p.lm_head ? p.lm_head->weight : p.wte->weight,
                                          targets.reshape({-1}), /*ignore_index=*/-1);
  }
  if (cfg_.fused_loss) {
    auto& p = *parts_;
    auto x = hidden(idx);  // (B, T, C)
    return model_detail::fused_linear_cross_entropy(x.reshape({-1, x.size(-1)}),
                                                    p.lm_head ? p.lm_head->weight : p.wte->weight,
                                                    targets.reshape({-1}), /*ignore_index=*/-1);
  }
  auto logits = forward(idx);  // (B, T, V)
  const int64_t V = logits.size(-1);
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, V}).to(at::kFloat), targets.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-1));
}

namespace {
// The table's entries with the module's tensors, in table order; the table and
// the registered parameters must name the same tensors (a mismatch is a bug here).
std::vector<std::pair<const ParamSpec*, torch::Tensor>> table_with_tensors(const std::vector<ParamSpec>& table,
                                                                           torch::nn::Module& module) {
  auto named = module.named_parameters(/*recurse=*/true);
  LLMTRAIN_CHECK(named.size() == table.size(), "parameter table has {} entries, the module {} parameters",
                 table.size(), named.size());
  std::vector<std::pair<const ParamSpec*, torch::Tensor>> out;
  for (const auto& spec : table) {
    const torch::Tensor* t = named.find(spec.name);
    LLMTRAIN_CHECK(t != nullptr, "parameter table names '{}', which the module does not have", spec.name);
    out.emplace_back(&spec, *t);
  }
  return out;
}
}  // namespace

void TransformerImpl::init_weights(uint64_t seed) {
  torch::NoGradGuard no_grad;
  // A CPU generator and CPU draws copied into place: the same numbers on every
  // rank and every device type for the same seed.
  auto gen = at::detail::createCPUGenerator(seed);
  const double std_base = 0.02;
  const double std_resid = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg_.n_layer));
  const auto table = parameter_table(cfg_);
  for (auto& [spec, t] : table_with_tensors(table, *this)) {
    switch (spec->init) {
      case ParamInit::zeros: t.zero_(); break;
      case ParamInit::ones: t.fill_(1.0); break;
      case ParamInit::normal:
      case ParamInit::residual_normal: {
        const double std = spec->init == ParamInit::residual_normal ? std_resid : std_base;
        if (t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous()) {
          t.normal_(0.0, std, gen);  // the same draws as below, without the copy
        } else {
          auto draw = at::empty(t.sizes(), at::TensorOptions().dtype(at::kFloat));
          draw.normal_(0.0, std, gen);
          t.copy_(draw);
        }
        break;
      }
    }
  }
}

std::vector<torch::Tensor> TransformerImpl::decay_parameters() {
  std::vector<torch::Tensor> out;
  const auto table = parameter_table(cfg_);
  for (auto& [spec, t] : table_with_tensors(table, *this))
    if (spec->decay) out.push_back(t);
  return out;
}

std::vector<torch::Tensor> TransformerImpl::no_decay_parameters() {
  std::vector<torch::Tensor> out;
  const auto table = parameter_table(cfg_);
  for (auto& [spec, t] : table_with_tensors(table, *this))
    if (!spec->decay) out.push_back(t);
  return out;
}

void TransformerImpl::plan_attention(torch::Device device, torch::ScalarType dtype) {
  auto plan = model_detail::plan_attention(cfg_.attention_backend, device, dtype, cfg_.n_head, cfg_.n_kv_head,
                                           cfg_.head_dim, cfg_.block_size, cfg_.dropout);
  for (const auto& line : plan.unavailable) log::warn("{}", line);
  log::info("attention: {} (requested {})", plan.label(), to_string(plan.requested));
  *parts_->attention_plan = std::move(plan);
}

std::vector<std::string> TransformerImpl::plan_kernels(torch::Device device, torch::ScalarType dtype) {
  std::vector<std::string> lines;
  if (!cfg_.fused_kernels) return lines;
  using kernels::Op;
  if (device.is_cuda() && !kernels::cuda_built()) {
    lines.push_back(fmt::format("compile=True: this build has no CUDA kernels (LLMTRAIN_WITH_CUDA off); the model "
                                "runs ATen's ops on {}", device.str()));
    log::warn("{}", lines.back());
    return lines;
  }
  // The ops this model calls, with the width each one's shape limit reads.
  std::vector<std::pair<Op, int64_t>> ops = {
      {cfg_.norm == NormKind::layernorm ? Op::add_layernorm : Op::add_rmsnorm, cfg_.n_embd},
      {Op::rope_qk_norm, cfg_.head_dim},
      {cfg_.ffn == FfnKind::swiglu ? Op::swiglu : Op::gelu_tanh, 0},
      {Op::lm_head_cross_entropy, 0}};
  // Each op once, forward and backward, against its ATen path on this device:
  // one that disagrees is turned off with one line (kernels::self_check prints it).
  const auto checked = kernels::self_check(device);
  std::vector<std::string> on;
  for (const auto& [op, width] : ops) {
    const std::string why = kernels::unsupported(op, width, dtype);
    if (!why.empty()) {
      lines.push_back(
          fmt::format("fused kernel llmtrain::{} cannot take this model: {}; it runs ATen", kernels::name(op), why));
      log::warn("{}", lines.back());
    } else if (kernels::enabled(op)) {
      on.push_back(std::string("llmtrain::") + kernels::name(op));
    } else {
      for (const auto& r : checked)
        if (r.op == op && !r.passed)
          lines.push_back(fmt::format("fused kernel llmtrain::{} failed its self-check: {}", kernels::name(op), r.detail));
    }
  }
  log::info("compile: fused kernels {} ({} on {}; docs/kernels.md)",
            on.empty() ? std::string("none") : fmt::format("{}", fmt::join(on, ", ")),
            device.is_cuda() ? "CUDA kernels" : "CPU twins", device.str());
  return lines;
}

AttentionBackend TransformerImpl::attention_backend_used() const { return parts_->attention_plan->backend; }
std::string TransformerImpl::attention_kernel_used() const { return parts_->attention_plan->label(); }

void TransformerImpl::set_forward_hooks(std::shared_ptr<ForwardHooks> hooks) { parts_->hooks = std::move(hooks); }
std::shared_ptr<ForwardHooks> TransformerImpl::forward_hooks() const { return parts_->hooks; }

std::vector<std::shared_ptr<torch::nn::Module>> TransformerImpl::blocks() {
  std::vector<std::shared_ptr<torch::nn::Module>> out;
  for (auto& b : parts_->h) out.push_back(b.ptr());
  return out;
}

}  // namespace llmtrain
