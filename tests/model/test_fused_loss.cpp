// compile=True's fused LM head + cross-entropy against the plain path
// (at::linear, then cross_entropy over the whole logits): the loss and the
// gradients of the hidden states and the head weight, fp32 within 1e-5 and
// bf16 autocast within 1e-2 (max |difference| / max |reference|), with chunks
// that do not divide the rows, ignored targets, and through whole models
// (tied and untied heads) where every parameter's gradient must agree.
#include <gtest/gtest.h>

#include <string>

#include <torch/torch.h>

#include "llmtrain/core/error.hpp"
#include "llmtrain/model/transformer.hpp"
#include "llmtrain/model/precision.hpp"
#include "model/fused_loss.hpp"

using llmtrain::model_detail::fused_linear_cross_entropy;

namespace {

double rel_err(const torch::Tensor& a, const torch::Tensor& ref) {
  auto r = ref.to(torch::kDouble), x = a.to(torch::kDouble);
  return ((x - r).abs().max() / r.abs().max()).item<double>();
}

struct Grads {
  torch::Tensor loss, dx, dw;
};

Grads run(bool fused, const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& y, int64_t chunk,
          torch::ScalarType autocast) {
  auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  torch::Tensor loss;
  {
    std::optional<llmtrain::AutocastGuard> ac;
    if (autocast != torch::kFloat) ac.emplace(torch::kCPU, autocast);
    if (fused) {
      loss = fused_linear_cross_entropy(x, w, y, -1, chunk);
    } else {
      auto logits = at::linear(x, w);
      loss = torch::nn::functional::cross_entropy(logits.to(torch::kFloat), y,
                                                  torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-1));
    }
  }
  (loss * 3.0).backward();  // a scale other than 1 reaches backward
  return {loss.detach(), x.grad(), w.grad()};
}

}  // namespace

TEST(FusedLoss, EqualsThePlainPathInFp32AndBf16) {
  torch::manual_seed(0);
  const int64_t N = 301, C = 64, V = 1000;  // 301 rows: chunks of 64 leave a remainder
  auto x = torch::randn({N, C});
  auto w = torch::randn({V, C}) * 0.1;
  auto y = torch::randint(V, {N}, torch::kLong);
  y.index_put_({torch::arange(0, N, 7)}, -1);  // every 7th target ignored
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const double tol = dtype == torch::kFloat ? 1e-5 : 1e-2;
    const auto ref = run(false, x, w, y, 0, dtype);
    for (int64_t chunk : {1, 64, 1000}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " chunk " + std::to_string(chunk));
      const auto got = run(true, x, w, y, chunk, dtype);
      EXPECT_LT(rel_err(got.loss, ref.loss), tol);
      EXPECT_LT(rel_err(got.dx, ref.dx), tol);
      EXPECT_LT(rel_err(got.dw, ref.dw), tol);
      EXPECT_EQ(got.dx.scalar_type(), torch::kFloat);  // gradients in the inputs' dtypes
      EXPECT_EQ(got.dw.scalar_type(), torch::kFloat);
    }
  }
}

TEST(FusedLoss, IgnoredRowsGetNoGradientAndNoGradModeMakesNone) {
  torch::manual_seed(1);
  auto x = torch::randn({10, 8}), w = torch::randn({20, 8});
  auto y = torch::randint(20, {10}, torch::kLong);
  y[3] = -1;
  const auto g = run(true, x, w, y, 4, torch::kFloat);
  EXPECT_EQ(g.dx[3].abs().max().item<float>(), 0.0f);
  const double plain = run(false, x, w, y, 0, torch::kFloat).loss.item<double>();
  torch::NoGradGuard no_grad;  // evaluation: the loss only
  auto xr = x.clone().requires_grad_(true);
  const auto loss = fused_linear_cross_entropy(xr, w, y, -1, 3);
  EXPECT_FALSE(loss.requires_grad());
  EXPECT_NEAR(loss.item<double>(), plain, 1e-5);
}

TEST(FusedLoss, BadShapesAreNamed) {
  auto x = torch::randn({4, 8}), w = torch::randn({20, 6});
  auto y = torch::zeros({4}, torch::kLong);
  try {
    fused_linear_cross_entropy(x, w, y);
    FAIL() << "expected an error";
  } catch (const llmtrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[20, 6]"), std::string::npos) << e.what();
  }
}

// Whole models: fused_loss on and off give the same loss and every parameter's
// gradient, with a tied head (GPT-2) and an untied one (LLaMA), fp32 and bf16.
TEST(FusedLoss, WholeModelsEqualThePlainPath) {
  for (bool tied : {true, false}) {
    for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
      SCOPED_TRACE(std::string(tied ? "tied " : "untied ") + c10::toString(dtype));
      const double tol = dtype == torch::kFloat ? 1e-5 : 1e-2;
      llmtrain::ModelConfig m;
      m.vocab_size = 500, m.padded_vocab = 512, m.block_size = 32;
      m.n_layer = 2, m.n_head = 4, m.n_kv_head = 2, m.n_embd = 32, m.head_dim = 8, m.ffn_hidden = 64;
      m.tie_embeddings = tied;
      torch::manual_seed(3);
      auto idx = torch::randint(500, {3, 32}, torch::kLong), tgt = torch::randint(500, {3, 32}, torch::kLong);
      std::vector<std::vector<torch::Tensor>> grads(2);
      std::vector<double> losses(2);
      for (int fused = 0; fused < 2; ++fused) {
        m.fused_loss = fused == 1;
        llmtrain::Transformer model(m);
        model->init_weights(5);
        torch::Tensor loss;
        {
          std::optional<llmtrain::AutocastGuard> ac;
          if (dtype != torch::kFloat) ac.emplace(torch::kCPU, dtype);
          loss = model->loss(idx, tgt);
        }
        loss.backward();
        losses[fused] = loss.item<double>();
        for (const auto& p : model->parameters()) grads[fused].push_back(p.grad().clone());
      }
      EXPECT_NEAR(losses[1], losses[0], tol * std::abs(losses[0]));
      ASSERT_EQ(grads[0].size(), grads[1].size());
      for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_LT(rel_err(grads[1][i], grads[0][i]), tol) << "param " << i;
    }
  }
}
