// The Transformer against direct formulas: parameter arithmetic vs the built
// module, RoPE, grouped-query attention, causality, initialization, training.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <torch/torch.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/model/activations.hpp"
#include "llmtrain/model/transformer.hpp"
#include "llmtrain/record/device_memory.hpp"
#include "llmtrain/model/precision.hpp"
#include "model/layers.hpp"

using llmtrain::Config;
using llmtrain::ModelConfig;
using llmtrain::Transformer;

namespace {

ModelConfig tiny_llama() {
  ModelConfig m;
  m.vocab_size = 100;
  m.padded_vocab = 128;
  m.block_size = 32;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.n_embd = 32;
  m.head_dim = 8;
  m.ffn_hidden = 96;
  m.attention_backend = llmtrain::AttentionBackend::manual;
  return m;
}

ModelConfig tiny_gpt2() {
  ModelConfig m = tiny_llama();
  m.n_kv_head = 4;
  m.norm = llmtrain::NormKind::layernorm;
  m.pos_encoding = llmtrain::PosEncoding::learned;
  m.ffn = llmtrain::FfnKind::gelu;
  m.ffn_hidden = 128;
  m.bias = true;
  m.tie_embeddings = true;
  return m;
}

ModelConfig tiny_qwen3() {
  ModelConfig m = tiny_llama();
  m.head_dim = 12;  // n_head * head_dim = 48 != n_embd = 32
  m.qk_norm = true;
  m.rope_theta = 1e6;
  m.norm_eps = 1e-6;
  return m;
}

int64_t built_numel(Transformer& model) {
  int64_t n = 0;
  for (auto& p : model->parameters()) n += p.numel();
  return n;
}

torch::Tensor random_tokens(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return torch::randint(V, {B, T}, gen, torch::kLong);
}

// Plain multi-head causal attention by the textbook formula, one head at a time.
// q: (B, H, T, D), k, v: (B, H, T, D).
torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t T = q.size(2), D = q.size(3);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(D));
  auto future = torch::ones({T, T}, torch::kBool).triu(1);
  scores = scores.masked_fill(future, -INFINITY);
  return torch::matmul(torch::softmax(scores, -1), v);
}

}  // namespace

TEST(ModelConfig, ParamArithmeticEqualsBuiltModule) {
  for (const auto& cfg : {tiny_llama(), tiny_gpt2(), tiny_qwen3()}) {
    Transformer model(cfg);
    EXPECT_EQ(cfg.num_params(), built_numel(model)) << cfg.arch_string();
  }
  auto untied_ln_nobias = tiny_gpt2();
  untied_ln_nobias.bias = false;
  untied_ln_nobias.tie_embeddings = false;
  Transformer model(untied_ln_nobias);
  EXPECT_EQ(untied_ln_nobias.num_params(), built_numel(model));
}

TEST(ModelConfig, FromConfigResolvesDefaults) {
  Config c;
  c.n_layer = 2;
  c.n_head = 6;
  c.n_embd = 384;
  c.block_size = 64;
  c.vocab_pad_multiple = 64;
  auto m = ModelConfig::from_config(c, /*data_vocab_size=*/50257);
  EXPECT_EQ(m.vocab_size, 50257);
  EXPECT_EQ(m.padded_vocab, 50304);
  EXPECT_EQ(m.n_kv_head, 6);
  EXPECT_EQ(m.head_dim, 64);
  EXPECT_EQ(m.ffn_hidden, 1024);  // 8/3 * 384 = 1024, already a multiple of 256
  c.n_embd = 2048;
  c.n_head = 8;
  EXPECT_EQ(ModelConfig::from_config(c, 100).ffn_hidden, 5632);  // 5461.3 -> 5632
  c.ffn = llmtrain::FfnKind::gelu;
  EXPECT_EQ(ModelConfig::from_config(c, 100).ffn_hidden, 8192);
  c.n_kv_head = 3;  // does not divide 8
  EXPECT_THROW(ModelConfig::from_config(c, 100), llmtrain::ConfigError);
  c.n_kv_head = 0;
  EXPECT_THROW(ModelConfig::from_config(c, 0), llmtrain::ConfigError);  // no vocabulary anywhere
  c.n_embd = 100;  // 100 / 8 not integral, head_dim not given
  EXPECT_THROW(ModelConfig::from_config(c, 100), llmtrain::ConfigError);
}

TEST(ModelConfig, FlopsFollowTheMfuRule) {
  auto m = tiny_llama();
  // Matmul weights by hand: per layer q|k|v 32*(4+2*2)*8, o 32*32, MLP 3*32*96; head 100*32 (unpadded rows).
  const int64_t per_layer = 32 * 64 + 32 * 32 + 3 * 32 * 96;
  EXPECT_EQ(m.num_matmul_params(), 2 * per_layer + 100 * 32);
  EXPECT_DOUBLE_EQ(m.flops_per_token(), 6.0 * (2 * per_layer + 100 * 32) + 12.0 * 2 * 4 * 8 * 32);
  EXPECT_DOUBLE_EQ(m.flops_per_token_6n(), 6.0 * m.num_params());
  EXPECT_EQ(m.arch_string(), "2L-4H-2KV-32D-96ff-RoPE-RMS-SwiGLU-PreNorm");
}

TEST(Rope, MatchesTheFormula) {
  const int64_t B = 2, T = 7, H = 3, D = 8;
  const double theta = 10000.0;
  auto x = torch::randn({B, T, H, D}, torch::kDouble);
  auto [cos, sin] = llmtrain::model_detail::rope_tables(T, D, theta);
  auto y = llmtrain::model_detail::apply_rope(x.to(torch::kFloat), cos, sin).to(torch::kDouble);
  auto xa = x.accessor<double, 4>();
  auto ya = y.accessor<double, 4>();
  double max_err = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t m = 0; m < T; ++m)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          // Pair (i, i + D/2) rotated by angle m * theta^(-2i/D).
          const double a = m * std::pow(theta, -2.0 * i / D);
          const double x1 = xa[b][m][h][i], x2 = xa[b][m][h][i + D / 2];
          max_err = std::max(max_err, std::abs(ya[b][m][h][i] - (x1 * std::cos(a) - x2 * std::sin(a))));
          max_err = std::max(max_err, std::abs(ya[b][m][h][i + D / 2] - (x2 * std::cos(a) + x1 * std::sin(a))));
        }
  EXPECT_LT(max_err, 1e-5);
  // Rotation keeps norms, and position 0 is the identity.
  EXPECT_TRUE(torch::allclose(y.select(1, 0), x.select(1, 0), 1e-6, 1e-6));
}

TEST(Attention, ManualGqaEqualsReferenceWithRepeatedKv) {
  const int64_t B = 2, H = 6, K = 2, T = 9, D = 4, G = H / K;
  auto q = torch::randn({B, H, T, D});
  auto k = torch::randn({B, K, T, D});
  auto v = torch::randn({B, K, T, D});
  auto mask = torch::full({16, 16}, -INFINITY).triu(1);
  llmtrain::model_detail::AttentionPlan manual;  // backend "manual"
  auto y = llmtrain::model_detail::causal_attention(q, k, v, manual, mask, 0.0, false);
  // Query head h reads KV head h / G.
  auto kr = k.repeat_interleave(G, 1), vr = v.repeat_interleave(G, 1);
  EXPECT_TRUE(torch::allclose(y, reference_attention(q, kr, vr), 1e-5, 1e-5));
  // K = H is plain multi-head attention.
  auto y_mha = llmtrain::model_detail::causal_attention(q, kr, vr, manual, mask, 0.0, false);
  EXPECT_TRUE(torch::allclose(y_mha, reference_attention(q, kr, vr), 1e-5, 1e-5));
}

TEST(Attention, GqaModelEqualsMultiHeadModelWithCopiedKv) {
  auto gqa_cfg = tiny_llama();  // 4 query heads, 2 KV heads
  auto mha_cfg = gqa_cfg;
  mha_cfg.n_kv_head = mha_cfg.n_head;
  Transformer gqa(gqa_cfg), mha(mha_cfg);
  gqa->init_weights(7);
  mha->init_weights(8);
  const int64_t H = 4, K = 2, G = 2, D = 8, C = 32;
  {
    torch::NoGradGuard ng;
    auto src = gqa->named_parameters();
    for (auto& item : mha->named_parameters()) {
      auto s = src[item.key()];
      if (item.key().find("c_attn.weight") != std::string::npos) {
        // Rows: q (H*D) | k (K*D) | v (K*D); each KV head repeated for its G query heads.
        auto q = s.narrow(0, 0, H * D);
        auto k = s.narrow(0, H * D, K * D).view({K, D, C}).repeat_interleave(G, 0).reshape({H * D, C});
        auto v = s.narrow(0, (H + K) * D, K * D).view({K, D, C}).repeat_interleave(G, 0).reshape({H * D, C});
        item.value().copy_(torch::cat({q, k, v}, 0));
      } else {
        item.value().copy_(s);
      }
    }
  }
  auto idx = random_tokens(2, 16, 100, 3);
  EXPECT_TRUE(torch::allclose(gqa->forward(idx), mha->forward(idx), 1e-5, 1e-5));
}

TEST(Transformer, IsCausal) {
  for (const auto& cfg : {tiny_llama(), tiny_gpt2(), tiny_qwen3()}) {
    Transformer model(cfg);
    model->eval();
    auto a = random_tokens(2, 20, cfg.vocab_size, 1);
    auto b = a.clone();
    const int64_t t = 11;
    b.narrow(1, t + 1, 20 - t - 1).copy_(random_tokens(2, 20 - t - 1, cfg.vocab_size, 2));
    auto la = model->forward(a), lb = model->forward(b);
    EXPECT_TRUE(torch::allclose(la.narrow(1, 0, t + 1), lb.narrow(1, 0, t + 1), 1e-5, 1e-5)) << cfg.arch_string();
    EXPECT_FALSE(torch::allclose(la.narrow(1, t + 1, 1), lb.narrow(1, t + 1, 1), 1e-5, 1e-5));
  }
}

TEST(Transformer, ForwardBackwardTrainsEachFamily) {
  for (const auto& cfg : {tiny_llama(), tiny_gpt2(), tiny_qwen3()}) {
    Transformer model(cfg);
    model->init_weights(1);
    auto x = random_tokens(4, 32, cfg.vocab_size, 5);
    auto y = random_tokens(4, 32, cfg.vocab_size, 6);
    auto logits = model->forward(x);
    EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{4, 32, cfg.padded_vocab}));
    auto loss0 = model->loss(x, y);
    // Small init: the first loss is close to uniform over the padded vocabulary.
    EXPECT_NEAR(loss0.item<double>(), std::log(static_cast<double>(cfg.padded_vocab)), 0.1);
    loss0.backward();
    for (auto& item : model->named_parameters()) {
      ASSERT_TRUE(item.value().grad().defined()) << item.key();
      EXPECT_TRUE(torch::isfinite(item.value().grad()).all().item<bool>()) << item.key();
    }
    // A few Adam steps on one batch must lower its loss.
    torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(3e-3));
    for (int i = 0; i < 20; ++i) {
      opt.zero_grad();
      model->loss(x, y).backward();
      opt.step();
    }
    EXPECT_LT(model->loss(x, y).item<double>(), loss0.item<double>() - 0.3) << cfg.arch_string();
  }
}

TEST(Transformer, InitIsDeterministicPerSeed) {
  auto cfg = tiny_qwen3();
  Transformer a(cfg), b(cfg), c(cfg);
  a->init_weights(42);
  b->init_weights(42);
  c->init_weights(43);
  auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
  bool any_differs = false;
  for (auto& item : pa) {
    EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
    if (!torch::equal(item.value(), pc[item.key()])) any_differs = true;
  }
  EXPECT_TRUE(any_differs);
  // The copy path (other dtypes, other devices) draws the same numbers.
  Transformer d(cfg);
  d->to(torch::kDouble);
  d->init_weights(42);
  for (auto& item : d->named_parameters())
    EXPECT_TRUE(torch::equal(item.value().to(torch::kFloat), pa[item.key()])) << item.key();
  // Residual projections are drawn with std 0.02 / sqrt(2 L); norms start at 1.
  auto resid = pa["h.0.mlp.c_proj.weight"];
  EXPECT_NEAR(resid.std().item<double>(), 0.02 / std::sqrt(4.0), 0.002);
  EXPECT_NEAR(pa["h.0.attn.c_attn.weight"].std().item<double>(), 0.02, 0.002);
  EXPECT_TRUE(torch::equal(pa["ln_f.weight"], torch::ones({32})));
  EXPECT_TRUE(torch::equal(pa["h.1.attn.q_norm.weight"], torch::ones({12})));
}

TEST(Transformer, ParameterGroupsCoverEveryParameterOnce) {
  for (const auto& cfg : {tiny_llama(), tiny_gpt2()}) {
    Transformer model(cfg);
    int64_t decay = 0, no_decay = 0;
    for (auto& t : model->decay_parameters()) decay += t.numel();
    for (auto& t : model->no_decay_parameters()) {
      EXPECT_EQ(t.dim(), 1);
      no_decay += t.numel();
    }
    EXPECT_EQ(decay + no_decay, cfg.num_params());
    EXPECT_EQ(static_cast<int64_t>(model->blocks().size()), cfg.n_layer);
  }
}

TEST(Transformer, CachedTablesAreBuffersNotParameters) {
  Transformer model(tiny_llama());
  auto buffers = model->named_buffers();
  ASSERT_TRUE(buffers.contains("rope_cos"));
  ASSERT_TRUE(buffers.contains("rope_sin"));
  EXPECT_EQ(buffers["rope_cos"].sizes(), (std::vector<int64_t>{32, 1, 4}));  // (block_size, 1, D/2)
  if (model->attention_backend_used() == llmtrain::AttentionBackend::manual) {
    ASSERT_TRUE(buffers.contains("causal_mask"));
    EXPECT_EQ(buffers["causal_mask"].sizes(), (std::vector<int64_t>{32, 32}));
  }
  for (auto& item : model->named_parameters())
    EXPECT_EQ(item.key().find("rope"), std::string::npos) << item.key();
}

TEST(Transformer, TiedHeadSharesTheEmbeddingAndLongInputsAreRefused) {
  auto cfg = tiny_gpt2();
  Transformer model(cfg);
  auto params = model->named_parameters();
  EXPECT_FALSE(params.contains("lm_head.weight"));
  // The tied matrix gets gradient through the head even for tokens never input.
  auto x = torch::zeros({1, 8}, torch::kLong);
  model->loss(x, torch::ones({1, 8}, torch::kLong)).backward();
  EXPECT_GT(params["wte.weight"].grad()[1].abs().sum().item<double>(), 0.0);
  EXPECT_THROW(model->forward(torch::zeros({1, cfg.block_size + 1}, torch::kLong)), llmtrain::Error);
}

TEST(Transformer, DropoutTrainsAndIsOffInEval) {
  auto cfg = tiny_llama();
  cfg.dropout = 0.2;
  Transformer model(cfg);
  auto x = random_tokens(2, 16, cfg.vocab_size, 11);
  model->train();
  auto a = model->forward(x), b = model->forward(x);
  EXPECT_FALSE(torch::allclose(a, b));
  model->loss(x, x).backward();
  model->eval();
  EXPECT_TRUE(torch::equal(model->forward(x), model->forward(x)));
}

// ---- activation checkpointing ---------------------------------------------------

namespace {

// Nodes named `name` in the graph behind `t` (each counted once).
int count_nodes(const torch::Tensor& t, const std::string& name) {
  std::vector<torch::autograd::Node*> stack = {t.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  int n = 0;
  while (!stack.empty()) {
    auto* node = stack.back();
    stack.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    if (node->name() == name) ++n;
    for (const auto& e : node->next_edges()) stack.push_back(e.function.get());
  }
  return n;
}

struct Grads {
  double loss = 0;
  std::vector<torch::Tensor> grads;  // every parameter's, in named order
  int recompute_nodes = 0;
};

// One forward and backward of `cfg` (seed-fixed weights, batch and dropout draws).
Grads one_step(ModelConfig cfg, llmtrain::ActivationCheckpointing mode, bool bf16_autocast = false) {
  cfg.recompute = mode;
  Transformer model(cfg);
  model->init_weights(3);
  auto x = random_tokens(2, 24, cfg.vocab_size, 21), y = random_tokens(2, 24, cfg.vocab_size, 22);
  torch::manual_seed(99);  // the dropout draws
  torch::Tensor loss;
  {
    std::optional<llmtrain::AutocastGuard> autocast;
    if (bf16_autocast) autocast.emplace(torch::kCPU, torch::kBFloat16);
    loss = model->loss(x, y);
  }
  Grads g;
  g.recompute_nodes = count_nodes(loss, "llmtrain::RecomputeBackward");
  loss.backward();
  g.loss = loss.item<double>();
  for (auto& p : model->parameters()) g.grads.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return g;
}

double max_diff(const Grads& a, const Grads& b) {
  double d = 0;
  for (size_t i = 0; i < a.grads.size(); ++i) d = std::max(d, (a.grads[i] - b.grads[i]).abs().max().item<double>());
  return d;
}

// The largest difference of one parameter's gradient relative to b's largest element.
double max_rel_diff(const Grads& a, const Grads& b) {
  double d = 0;
  for (size_t i = 0; i < a.grads.size(); ++i)
    d = std::max(d, (a.grads[i] - b.grads[i]).abs().max().item<double>() /
                        std::max(b.grads[i].abs().max().item<double>(), 1e-30));
  return d;
}

}  // namespace

// full and selective recompute give every parameter the gradient of none
// (fp32, within 1e-6), with dropout on (a recompute drawing new masks would
// differ by far more) and for both CPU backends; the graph holds one recompute node
// per recomputed block.
TEST(ActivationCheckpointing, GradientsEqualNoneForEachFamily) {
  using llmtrain::ActivationCheckpointing;
  for (auto cfg : {tiny_llama(), tiny_gpt2(), tiny_qwen3()}) {
    cfg.n_layer = 3;
    // manual with dropout (its masks drawn in the block), sdpa without.
    for (auto [backend, dropout] : {std::pair{llmtrain::AttentionBackend::manual, 0.1},
                                    std::pair{llmtrain::AttentionBackend::sdpa, 0.0}}) {
      cfg.attention_backend = backend;
      cfg.dropout = dropout;
      SCOPED_TRACE(fmt::format("{} {} dropout {}", cfg.arch_string(), llmtrain::to_string(backend), dropout));
      const auto none = one_step(cfg, ActivationCheckpointing::none);
      EXPECT_EQ(none.recompute_nodes, 0);
      for (auto mode : {ActivationCheckpointing::full, ActivationCheckpointing::selective}) {
        const auto got = one_step(cfg, mode);
        cfg.recompute = mode;
        EXPECT_EQ(got.recompute_nodes, cfg.recomputed_blocks()) << llmtrain::to_string(mode);
        EXPECT_NEAR(got.loss, none.loss, 1e-6) << llmtrain::to_string(mode);
        ASSERT_EQ(got.grads.size(), none.grads.size());
        for (size_t i = 0; i < got.grads.size(); ++i) ASSERT_TRUE(got.grads[i].defined()) << i;
        EXPECT_LE(max_diff(got, none), 1e-6) << llmtrain::to_string(mode);
      }
    }
  }
}

// Under bf16 autocast the recompute runs in bf16 as the forward did (the
// backward runs outside the autocast region): the gradients equal none's under
// autocast, and differ from fp32's, so a recompute in the wrong dtype fails.
TEST(ActivationCheckpointing, RecomputeKeepsTheAutocastDtype) {
  auto cfg = tiny_llama();
  const auto none = one_step(cfg, llmtrain::ActivationCheckpointing::none, /*bf16_autocast=*/true);
  const auto full = one_step(cfg, llmtrain::ActivationCheckpointing::full, true);
  const auto fp32 = one_step(cfg, llmtrain::ActivationCheckpointing::none, false);
  EXPECT_LE(max_diff(full, none), 1e-6);
  EXPECT_GT(max_rel_diff(fp32, none), 1e-3);  // bf16 rounding: what a recompute in fp32 would show
}

// selective recomputes blocks k-1, 2k-1, ...; full all of them.
TEST(ActivationCheckpointing, SelectiveRecomputesEveryKthBlock) {
  ModelConfig m = tiny_llama();
  m.n_layer = 7;
  m.recompute = llmtrain::ActivationCheckpointing::selective;
  m.checkpoint_every = 3;
  std::vector<int64_t> got;
  for (int64_t i = 0; i < m.n_layer; ++i)
    if (m.recomputes_block(i)) got.push_back(i);
  EXPECT_EQ(got, (std::vector<int64_t>{2, 5}));
  m.checkpoint_every = 1;
  EXPECT_EQ(m.recomputed_blocks(), 7);
  m.recompute = llmtrain::ActivationCheckpointing::full;
  m.checkpoint_every = 4;
  EXPECT_EQ(m.recomputed_blocks(), 7);
  m.recompute = llmtrain::ActivationCheckpointing::none;
  EXPECT_EQ(m.recomputed_blocks(), 0);
}

// The activation account follows the mode: a recomputed block keeps its fp32
// (B, T, C) input instead of its activations; the peak is the end of the
// forward or the backward of the highest recomputed block, where that block's
// activations exist again and the logits are gone.
TEST(ActivationCheckpointing, ActivationBytesCountTheKeptInputs) {
  using llmtrain::ActivationCheckpointing;
  using llmtrain::AttentionBackend;
  using llmtrain::ComputeDtype;
  ModelConfig m = tiny_llama();
  m.n_layer = 6;
  auto bytes = [&](ActivationCheckpointing mode, int64_t every) {
    m.recompute = mode;
    m.checkpoint_every = every;
    return llmtrain::activation_bytes(m, ComputeDtype::bfloat16, 4, AttentionBackend::sdpa);
  };
  const double none = bytes(ActivationCheckpointing::none, 2), full = bytes(ActivationCheckpointing::full, 2);
  const double every2 = bytes(ActivationCheckpointing::selective, 2);
  const double every3 = bytes(ActivationCheckpointing::selective, 3);
  EXPECT_LT(full, every3);
  EXPECT_LT(every2, every3);
  EXPECT_LT(every3, none);
  // With L = 6 both recompute block 5 last-first; every3 (blocks 2, 5) keeps
  // blocks 0, 1, 3, 4 whole, every2 (1, 3, 5) blocks 0, 2, 4: one block's
  // activations (a) more and one input (i) less.
  const double a = llmtrain::activation_bytes_per_block(m, ComputeDtype::bfloat16, 4, AttentionBackend::sdpa);
  const double input = 4.0 * m.block_size * m.n_embd * 4;  // (B, T, C) fp32, B = 4
  EXPECT_NEAR(every3 - every2, a - input, 1e-6 * input);
  m.recompute = ActivationCheckpointing::selective;
  m.checkpoint_every = 3;
  const auto peak = llmtrain::activation_bytes_recompute(m, 2, ComputeDtype::bfloat16, 4, AttentionBackend::sdpa);
  EXPECT_EQ(peak.block, 5);
  EXPECT_EQ(peak.kept_below, 4);
  EXPECT_DOUBLE_EQ(none, llmtrain::activation_bytes_forward(m, 0, ComputeDtype::bfloat16, 4, AttentionBackend::sdpa));
  EXPECT_NEAR(bytes(ActivationCheckpointing::selective, 1), full, 1e-6);
}

// ---- document_masking: packed documents do not see each other -----------------------

namespace {

constexpr int64_t kEos = 3;

// Two rows of 24 tokens, documents cut after each EOS: row 0 holds documents of
// 5, 9 and 10 tokens (the last one runs past the row's end, no EOS), row 1 of 7
// and 17. Ids other than EOS are drawn from [4, vocab).
std::vector<std::vector<int64_t>> doc_lengths() { return {{5, 9, 10}, {7, 17}}; }

torch::Tensor packed_rows(int64_t vocab) {
  auto x = random_tokens(2, 24, vocab - 4, 21) + 4;
  const auto lens = doc_lengths();
  for (int64_t b = 0; b < 2; ++b) {
    int64_t end = 0;
    for (size_t d = 0; d + 1 < lens[b].size(); ++d) {  // each document but the row's last ends in EOS
      end += lens[b][d];
      x[b][end - 1] = kEos;
    }
  }
  return x;
}

ModelConfig tiny_llama3() {
  ModelConfig m = tiny_llama();
  m.rope_theta = 500000.0;  // LLaMA-3: GQA (tiny_llama's 4 heads over 2 KV heads) and a larger RoPE base
  return m;
}

struct LossGrads {
  double loss = 0.0;
  std::vector<torch::Tensor> grads;  // in parameters() order
};

LossGrads loss_and_grads(Transformer& model, const std::function<torch::Tensor()>& loss_fn) {
  model->zero_grad();
  auto loss = loss_fn();
  loss.backward();
  LossGrads out{loss.item<double>(), {}};
  for (auto& p : model->parameters()) out.grads.push_back(p.grad().clone());
  return out;
}

double max_grad_diff(const LossGrads& a, const LossGrads& b) {
  double d = 0.0;
  for (size_t i = 0; i < a.grads.size(); ++i) d = std::max(d, (a.grads[i] - b.grads[i]).abs().max().item<double>());
  return d;
}

// The packed batch's loss and gradients with `document_masking` as given.
LossGrads packed(ModelConfig cfg, bool masking, const torch::Tensor& x, const torch::Tensor& y) {
  cfg.document_masking = masking;
  cfg.eos_id = kEos;
  Transformer model(cfg);
  model->init_weights(7);
  return loss_and_grads(model, [&] { return model->loss(x, y); });
}

// Each document fed alone (its own sequence, positions from 0, plain causal
// attention), weighted as the trainer's mean over every token of the batch:
// sum over documents of (document's mean loss x its tokens) / (B x T).
LossGrads documents_alone(ModelConfig cfg, const torch::Tensor& x, const torch::Tensor& y) {
  cfg.document_masking = false;
  Transformer model(cfg);
  model->init_weights(7);
  const auto lens = doc_lengths();
  return loss_and_grads(model, [&] {
    auto total = torch::zeros({});
    for (int64_t b = 0; b < 2; ++b) {
      int64_t start = 0;
      for (const int64_t n : lens[b]) {
        auto xs = x[b].narrow(0, start, n).unsqueeze(0), ys = y[b].narrow(0, start, n).unsqueeze(0);
        total = total + model->loss(xs, ys) * static_cast<double>(n);
        start += n;
      }
    }
    return total / static_cast<double>(x.numel());
  });
}

}  // namespace

// One block's forward, run under the counting CPU allocator, keeps what
// activation_bytes_per_block counts (within 2%), for the LLaMA (GQA), GPT-2
// (LayerNorm, GELU, biases) and Qwen3 (QK-norm) layouts in fp32, bf16
// autocast over fp32 parameters and bf16 parameters. Kept: the bytes alive
// after the forward beyond what was alive before it, less the block's output
// (the next block's input) and, under autocast over fp32 parameters,
// autocast's 16-bit copies of the matmul weights (which the memory model
// counts apart: 2 bytes per matmul parameter). The input is made inside the
// window and dropped after the forward, so it counts where the block saves it
// (RMSNorm and LayerNorm save their input, the residual stream, as given), as
// in the model's chain of blocks.
TEST(ActivationBytes, PerBlockMatchesTheCountingAllocator) {
  using llmtrain::AttentionBackend;
  using llmtrain::ComputeDtype;
  namespace md = llmtrain::model_detail;
  llmtrain::count_cpu_allocations();
  const torch::Device cpu(torch::kCPU);
  struct Precision {
    const char* name;
    ComputeDtype dtype;
    torch::ScalarType params;
  };
  const Precision precisions[] = {{"fp32", ComputeDtype::float32, torch::kFloat},
                                  {"bf16 autocast, fp32 parameters", ComputeDtype::bfloat16, torch::kFloat},
                                  {"bf16 parameters", ComputeDtype::bfloat16, torch::kBFloat16}};
  const int64_t B = 4;
  for (auto cfg : {tiny_llama(), tiny_gpt2(), tiny_qwen3()}) {
   for (bool fused : {false, true}) {  // compile=True: the fused kernels' blocks
    cfg.attention_backend = AttentionBackend::sdpa;
    cfg.block_size = 64;
    cfg.fused_kernels = fused;
    const int64_t T = cfg.block_size;
    for (const auto& prec : precisions) {
      SCOPED_TRACE(fmt::format("{} {}{}", cfg.arch_string(), prec.name, fused ? ", compile=True" : ""));
      const auto compute = llmtrain::compute_dtype(prec.dtype, cpu);
      auto plan = std::make_shared<md::AttentionPlan>(md::plan_attention(
          AttentionBackend::sdpa, cpu, compute, cfg.n_head, cfg.n_kv_head, cfg.head_dim, T, cfg.dropout));
      md::Block block(cfg, plan);
      block->to(prec.params);
      block->train();
      torch::Tensor cos, sin;
      if (cfg.pos_encoding == llmtrain::PosEncoding::rope)
        std::tie(cos, sin) = md::rope_tables(T, cfg.head_dim, cfg.rope_theta);
      double matmul_params = 0;
      for (const auto& p : block->parameters())
        if (p.dim() == 2) matmul_params += static_cast<double>(p.numel());
      // x = x0 * w needs a gradient, as a block's input has, without being a
      // leaf (a leaf stays alive through its AccumulateGrad node).
      auto x0 = torch::randn({B, T, cfg.n_embd});
      auto w = torch::ones({}, torch::requires_grad());
      const int64_t before = llmtrain::allocated_bytes(cpu)->current;
      torch::Tensor out;
      {
        auto x = (x0 * w).to(prec.params);
        std::optional<llmtrain::AutocastGuard> autocast;
        if (prec.dtype != ComputeDtype::float32) autocast.emplace(cpu, compute);
        out = block->forward(x, cos, sin, torch::Tensor(), nullptr);
      }
      ASSERT_TRUE(out.requires_grad());
      const double kept = static_cast<double>(llmtrain::allocated_bytes(cpu)->current - before) -
                          static_cast<double>(out.nbytes());
      const bool weight_copies = prec.dtype != ComputeDtype::float32 && prec.params == torch::kFloat;
      const double copies = weight_copies ? 2.0 * matmul_params : 0.0;
      const double counted = llmtrain::activation_bytes_per_block(cfg, prec.dtype, B, AttentionBackend::sdpa,
                                                                  prec.params == torch::kFloat ? 4.0 : 2.0);
      EXPECT_NEAR(kept - copies, counted, 0.02 * counted)
          << fmt::format("measured {:.0f} bytes, counted {:.0f} ({:+.2f}%)", kept - copies, counted,
                         100.0 * (counted - (kept - copies)) / (kept - copies));
    }
   }
  }
}

// A biased matmul of a (B, T, C) input under autocast over fp32 parameters
// allocates its 16-bit output and autocast's 16-bit copies of x, W and b, not
// an fp32 copy of the output: model_detail::linear fuses the bias into the
// GEMM. (torch::nn::Linear's forward multiplies and then adds the fp32 bias in
// place, through two fp32 (B, T, N) temporaries: 8 bytes per output element
// at its peak, which no memory model counted; tiny_gpt2's recomputed blocks
// were 7-11% over their prediction for it.) The bound leaves 256 KiB for the
// GEMM's own scratch.
TEST(ActivationBytes, BiasedMatmulUnderAutocastMakesNoFp32CopyOfItsOutput) {
  namespace md = llmtrain::model_detail;
  llmtrain::count_cpu_allocations();
  const torch::Device cpu(torch::kCPU);
  const int64_t B = 8, T = 128, C = 128, N = 512;
  torch::nn::Linear lin(torch::nn::LinearOptions(C, N).bias(true));
  auto x = torch::randn({B, T, C}, torch::requires_grad());
  llmtrain::AutocastGuard autocast(cpu, torch::kBFloat16);
  const int64_t before = llmtrain::allocated_bytes(cpu)->current;
  llmtrain::reset_allocated_peak(cpu);
  auto y = md::linear(lin, x);
  const double peak = static_cast<double>(llmtrain::allocated_bytes(cpu)->peak - before);
  ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
  const double output = 2.0 * B * T * N, copies = 2.0 * (B * T * C + N * C + N);
  EXPECT_LE(peak, output + copies + 256.0 * 1024) << fmt::format("output {:.0f} bytes, copies {:.0f}", output, copies);
  // What the fused path replaces goes over the same bound (so the test can fail).
  const int64_t before_plain = llmtrain::allocated_bytes(cpu)->current;
  llmtrain::reset_allocated_peak(cpu);
  auto plain = lin(x);
  const double peak_plain = static_cast<double>(llmtrain::allocated_bytes(cpu)->peak - before_plain);
  EXPECT_GT(peak_plain, output + copies + 256.0 * 1024);
  EXPECT_TRUE(torch::allclose(y.to(torch::kFloat), plain.to(torch::kFloat), 1e-2, 1e-2));
}

TEST(DocumentMasking, PositionsRestartAfterEachEos) {
  const auto x = packed_rows(100);
  llmtrain::model_detail::Documents docs(x, kEos);
  std::vector<int64_t> want;
  const auto lens = doc_lengths();
  for (const int64_t n : lens[1])
    for (int64_t i = 0; i < n; ++i) want.push_back(i);
  auto got = docs.positions()[1];
  EXPECT_TRUE(torch::equal(got, torch::tensor(want, torch::kLong)));
  // Varlen offsets: 5 documents in the flattened 48 tokens, a row's end ends one.
  EXPECT_TRUE(torch::equal(docs.cu_seqlens(), torch::tensor({0, 5, 14, 24, 31, 48}, torch::kInt)));
  EXPECT_EQ(docs.max_seqlen(), 17);
  // Query 6 of row 0 (2nd document, which starts at 5) sees keys 5 and 6 only.
  auto row = docs.visible()[0][0][6];
  EXPECT_TRUE(torch::equal(row.nonzero().reshape({-1}), torch::tensor({5, 6}, torch::kLong)));
}

// The packed loss and gradients equal those of each document fed alone, for
// every family and both CPU attention paths (SDPA with the block-diagonal mask,
// the manual path); without document_masking they differ (the test can fail).
TEST(DocumentMasking, PackedLossEqualsEachDocumentAloneForEachFamily) {
  for (auto cfg : {tiny_llama(), tiny_llama3(), tiny_gpt2(), tiny_qwen3()}) {
    for (auto backend : {llmtrain::AttentionBackend::sdpa, llmtrain::AttentionBackend::manual}) {
      cfg.attention_backend = backend;
      SCOPED_TRACE(fmt::format("{} {}", cfg.arch_string(), llmtrain::to_string(backend)));
      const auto x = packed_rows(cfg.vocab_size);
      const auto y = random_tokens(2, 24, cfg.vocab_size, 22);
      const auto alone = documents_alone(cfg, x, y);
      const auto masked = packed(cfg, true, x, y);
      EXPECT_NEAR(masked.loss, alone.loss, 1e-5);
      EXPECT_LE(max_grad_diff(masked, alone), 1e-5);
      const auto unmasked = packed(cfg, false, x, y);
      EXPECT_GT(std::abs(unmasked.loss - alone.loss), 1e-4);
    }
  }
}

TEST(DocumentMasking, ActivationBytesCountTheMask) {
  ModelConfig m = tiny_llama();
  const double plain = llmtrain::activation_bytes(m, llmtrain::ComputeDtype::bfloat16, 4, m.attention_backend);
  m.document_masking = true;
  const double masked = llmtrain::activation_bytes(m, llmtrain::ComputeDtype::bfloat16, 4, m.attention_backend);
  EXPECT_DOUBLE_EQ(masked - plain, 4.0 * 32 * 32 * (1 + 2));  // (B, 1, T, T) bool + bf16
}

// document_masking on CUDA: FlashAttention's varlen kernel under bf16 autocast
// against the CPU path in fp32, same weights and batch, for every family (head
// widths flash takes). Registered as the `gpu`-labelled test
// gpu_document_masking (tests/gpu/CMakeLists.txt); skips without a GPU.
TEST(DocumentMaskingGpu, VarlenFlashEqualsTheCpuPath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the varlen flash path cannot run here";
  for (auto cfg : {tiny_llama(), tiny_llama3(), tiny_gpt2(), tiny_qwen3()}) {
    cfg.head_dim = 16;  // flash: a multiple of 8
    cfg.attention_backend = llmtrain::AttentionBackend::sdpa;
    cfg.document_masking = true;
    cfg.eos_id = kEos;
    SCOPED_TRACE(cfg.arch_string());
    const auto x = packed_rows(cfg.vocab_size);
    const auto y = random_tokens(2, 24, cfg.vocab_size, 22);
    Transformer cpu(cfg), gpu(cfg);
    cpu->init_weights(7);
    gpu->init_weights(7);
    const double want = cpu->loss(x, y).item<double>();
    const torch::Device cuda(torch::kCUDA, 0);
    gpu->to(cuda);
    gpu->plan_attention(cuda, torch::kBFloat16);
    const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(cuda);
    const auto plan = llmtrain::model_detail::plan_attention(cfg.attention_backend, cuda, torch::kBFloat16, cfg.n_head,
                                                             cfg.n_kv_head, cfg.head_dim, cfg.block_size, 0.0);
    ASSERT_TRUE(llmtrain::model_detail::uses_varlen_flash(torch::empty({1, cfg.n_head, 4, cfg.head_dim}, bf16), plan));
    double got = 0.0;
    {
      llmtrain::AutocastGuard autocast(cuda, torch::kBFloat16);
      auto loss = gpu->loss(x.to(cuda), y.to(cuda));
      loss.backward();  // the varlen kernel's backward runs too
      got = loss.item<double>();
    }
    EXPECT_NEAR(got, want, 2e-2 * want);
    for (auto& p : gpu->parameters()) EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>());
  }
}
