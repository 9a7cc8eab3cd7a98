#include "llmtrain/model/describe.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "model/layers.hpp"

namespace llmtrain {

namespace {
int64_t norm_width_params(const ModelConfig& m) { return m.norm == "layernorm" && m.bias ? 2 * m.n_embd : m.n_embd; }

double dtype_bytes(const std::string& dtype) {
  if (dtype == "float32") return 4.0;
  if (dtype == "bfloat16" || dtype == "float16") return 2.0;
  throw ConfigError(fmt::format("dtype = '{}' is not one of float32, bfloat16, float16", dtype));
}

// 1,294,159,104
std::string grouped(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return v < 0 ? "-" + out : out;
}
double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }
}  // namespace

ParamBreakdown param_breakdown(const ModelConfig& m) {
  const int64_t d = m.n_embd, L = m.n_layer;
  ParamBreakdown p;
  p.embeddings = m.padded_vocab * d + (m.pos_encoding == "learned" ? m.block_size * d : 0);
  int64_t attn = d * (m.n_head + 2 * m.n_kv_head) * m.head_dim + m.n_head * m.head_dim * d;
  if (m.bias) attn += (m.n_head + 2 * m.n_kv_head) * m.head_dim + d;
  p.attention = L * attn;
  const bool swiglu = m.ffn == "swiglu";
  int64_t mlp = (swiglu ? 3 : 2) * d * m.ffn_hidden;
  if (m.bias) mlp += (swiglu ? 2 : 1) * m.ffn_hidden + d;
  p.mlp = L * mlp;
  p.norms = (2 * L + 1) * norm_width_params(m) + (m.qk_norm ? L * 2 * m.head_dim : 0);
  p.head = m.tie_embeddings ? 0 : m.padded_vocab * d;
  p.total = p.embeddings + p.attention + p.mlp + p.norms + p.head;
  return p;
}

double activation_bytes(const ModelConfig& m, const std::string& dtype, int64_t batch_size,
                        const std::string& attention_backend) {
  const double e = dtype_bytes(dtype);
  const double C = m.n_embd, H = m.n_head, K = m.n_kv_head, D = m.head_dim, F = m.ffn_hidden;
  const double T = m.block_size, tokens = static_cast<double>(batch_size) * T;
  // Elements saved for backward per token and layer: two norms (input and
  // normalized output each), q|k|v, q and k after RoPE / QK-norm, the attention
  // output, the MLP intermediates (swiglu: gate|up, silu(gate), product; gelu:
  // pre- and post-activation).
  double per_token_layer = 4 * C + (H + 2 * K) * D + (H + K) * D + H * D;
  if (m.qk_norm) per_token_layer += (H + K) * D;
  per_token_layer += m.ffn == "swiglu" ? 4 * F : 2 * F;
  double bytes = m.n_layer * tokens * per_token_layer * e;
  // The manual backend stores the (T, T) softmax probabilities of every head
  // (and its dropout mask); fused kernels keep only a log-sum-exp per row.
  if (attention_backend == "manual") {
    bytes += m.n_layer * tokens * H * T * e * (m.dropout > 0 ? 2.0 : 1.0);
  } else {
    bytes += m.n_layer * tokens * H * 4.0;
  }
  // Embedding output and final norm (compute dtype), logits in the compute dtype
  // plus their fp32 log-softmax for the loss.
  bytes += tokens * 3 * C * e + tokens * m.padded_vocab * (e + 4.0);
  return bytes;
}

std::vector<MemoryEstimate> estimate_memory(const ModelConfig& m, const std::string& dtype, int64_t batch_size,
                                            int64_t world_size, const std::string& attention_backend) {
  LLMTRAIN_CHECK(world_size >= 1, "world size must be >= 1, got {}", world_size);
  const double e = dtype_bytes(dtype);
  const double P = static_cast<double>(m.num_params());
  const double W = static_cast<double>(world_size);
  // AdamW: exp_avg + exp_avg_sq in fp32, plus fp32 master weights for 16-bit compute.
  const double opt_per_param = 8.0 + (e < 4.0 ? 4.0 : 0.0);
  const double act = activation_bytes(m, dtype, batch_size, attention_backend);

  MemoryEstimate ddp{"ddp", P * e, P * e, P * opt_per_param, act};
  MemoryEstimate zero1{"zero1", P * e, P * e, P * opt_per_param / W, act};
  // FSDP units: one per block, the token embedding (+ positions), and the
  // final norm with the LM head (as torchtitan wraps LLaMA).
  // Each rank keeps 1/W of everything, plus the gathered weights of the unit in
  // use and the next (prefetched) one, and the full gradients of one unit
  // before its reduce-scatter: sized by the largest unit.
  const auto pb = param_breakdown(m);
  const double block = static_cast<double>(pb.attention + pb.mlp + pb.norms - norm_width_params(m)) /
                       static_cast<double>(m.n_layer);
  const double unit = std::max({block, static_cast<double>(pb.embeddings),
                                 static_cast<double>(pb.head + norm_width_params(m))});
  MemoryEstimate fsdp{"fsdp", P * e / W + (W > 1 ? 2 * unit * e : 0.0), P * e / W + (W > 1 ? unit * e : 0.0),
                      P * opt_per_param / W, act};
  return {ddp, zero1, fsdp};
}

std::string describe_model(const Config& c, int64_t world_size) {
  const ModelConfig m = ModelConfig::from_config(c, 0);
  const auto pb = param_breakdown(m);
  std::string s;
  s += fmt::format("model        {}\n", m.arch_string());
  s += fmt::format("vocabulary   {} tokens, {} embedding rows (vocab_pad_multiple = {}); block_size {}\n",
                   grouped(m.vocab_size), grouped(m.padded_vocab), c.vocab_pad_multiple, m.block_size);
  s += fmt::format("attention    {} requested; activations below assume {}\n", c.attention_backend,
                   c.attention_backend == "manual" ? "stored (T, T) probabilities" : "a fused kernel");
  s += fmt::format("parameters   {:>15} total\n", grouped(pb.total));
  auto row = [&](const char* name, int64_t v) {
    s += fmt::format("  {:<11}{:>15}  {:5.1f}%\n", name, grouped(v), 100.0 * v / static_cast<double>(pb.total));
  };
  row("embeddings", pb.embeddings);
  row("attention", pb.attention);
  row("mlp", pb.mlp);
  row("norms", pb.norms);
  row("head", pb.head);
  s += fmt::format("FLOPs/token  {:.4g} GFLOP  (6N + 12*L*H*Q*T, N = {} matmul parameters, T = {})\n",
                   m.flops_per_token() / 1e9, grouped(m.num_matmul_params()), m.block_size);
  s += fmt::format("             {:.4g} GFLOP  (6 * all parameters, the seeds' convention)\n",
                   m.flops_per_token_6n() / 1e9);
  s += fmt::format("memory per GPU, GiB: dtype {}, batch_size {} x block_size {}, world size {}\n", c.dtype,
                   c.batch_size, c.block_size, world_size);
  s += fmt::format("  {:<9}{:>10}{:>10}{:>11}{:>13}{:>10}\n", "strategy", "weights", "grads", "optimizer",
                   "activations", "total");
  for (const auto& est : estimate_memory(m, c.dtype, c.batch_size, world_size, c.attention_backend))
    s += fmt::format("  {:<9}{:>10.2f}{:>10.2f}{:>11.2f}{:>13.2f}{:>10.2f}\n", est.strategy, gib(est.weights),
                     gib(est.gradients), gib(est.optimizer), gib(est.activations), gib(est.total()));
  s += "  (weights/grads in the compute dtype; AdamW: 2 fp32 moments + fp32 master weights for 16-bit;\n"
       "   activations: saved tensors without checkpointing; fsdp adds 2 gathered units + 1 unit of grads)";
  return s;
}

}  // namespace llmtrain
