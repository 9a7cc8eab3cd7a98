// SDPA against the manual backend, causal, forward and gradients, for the head
// layouts of the presets: LLaMA-2 (MHA, 18 x 128), LLaMA-3 and Qwen3 (GQA,
// 16 query heads on 8 KV heads of 128). Also the whole tiny Qwen3 model (QK-norm
// before the attention core) through both backends.
// Error measure: max |sdpa - manual| / max |manual| over the tensor (an
// element-wise ratio is meaningless near zero). Bounds: fp32 1e-5, bf16 1e-2.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <torch/torch.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/model/transformer.hpp"
#include "model/layers.hpp"
#include "test_util.hpp"

using llmtrain::model_detail::AttentionPlan;
using llmtrain::model_detail::causal_attention;
using llmtrain::model_detail::plan_attention;

namespace {

double rel_err(const torch::Tensor& a, const torch::Tensor& ref) {
  auto r = ref.to(torch::kDouble), x = a.to(torch::kDouble);
  return ((x - r).abs().max() / r.abs().max()).item<double>();
}

struct Layout {
  const char* name;
  int64_t H, K, D;
};
const Layout kLayouts[] = {{"llama2_mha", 18, 18, 128}, {"llama3_gqa", 16, 8, 128}, {"qwen3_gqa", 16, 8, 128}};

// Forward and the three input gradients of one backend.
struct Result {
  torch::Tensor y, dq, dk, dv;
};
Result run(const AttentionPlan& plan, const torch::Tensor& q0, const torch::Tensor& k0, const torch::Tensor& v0,
           const torch::Tensor& dy, const torch::Tensor& mask) {
  auto q = q0.detach().clone().requires_grad_(true);
  auto k = k0.detach().clone().requires_grad_(true);
  auto v = v0.detach().clone().requires_grad_(true);
  auto y = causal_attention(q, k, v, plan, mask, 0.0, false);
  y.backward(dy.to(y.scalar_type()));
  return {y.detach(), q.grad(), k.grad(), v.grad()};
}

class SdpaVsManual : public ::testing::TestWithParam<Layout> {};

TEST_P(SdpaVsManual, ForwardAndGradientsFp32AndBf16) {
  const Layout L = GetParam();
  const int64_t B = 2, T = 256;
  auto gen = at::detail::createCPUGenerator(17);
  auto q = torch::randn({B, L.H, T, L.D}, gen);
  auto k = torch::randn({B, L.K, T, L.D}, gen);
  auto v = torch::randn({B, L.K, T, L.D}, gen);
  auto dy = torch::randn({B, L.H, T, L.D}, gen);
  auto mask = torch::full({T, T}, -INFINITY).triu(1);
  AttentionPlan manual;
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const AttentionPlan sdpa = plan_attention(llmtrain::AttentionBackend::sdpa, torch::kCPU, dtype, L.H, L.K, L.D, T, 0.0);
    ASSERT_EQ(sdpa.backend, llmtrain::AttentionBackend::sdpa);
    // Manual in fp32 on the same (rounded) inputs is the reference.
    const auto qd = q.to(dtype), kd = k.to(dtype), vd = v.to(dtype);
    const Result ref = run(manual, qd.to(torch::kFloat), kd.to(torch::kFloat), vd.to(torch::kFloat), dy, mask);
    const Result got = run(sdpa, qd, kd, vd, dy, mask);
    const double bound = dtype == torch::kFloat ? 1e-5 : 1e-2;
    const std::string what = std::string(L.name) + " " + c10::toString(dtype) + " (" + sdpa.kernel_used + ")";
    EXPECT_LE(rel_err(got.y, ref.y), bound) << what << " forward";
    EXPECT_LE(rel_err(got.dq, ref.dq), bound) << what << " dq";
    EXPECT_LE(rel_err(got.dk, ref.dk), bound) << what << " dk";
    EXPECT_LE(rel_err(got.dv, ref.dv), bound) << what << " dv";
    std::printf("%s: y %.2e dq %.2e dk %.2e dv %.2e\n", what.c_str(), rel_err(got.y, ref.y),
                rel_err(got.dq, ref.dq), rel_err(got.dk, ref.dk), rel_err(got.dv, ref.dv));
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, SdpaVsManual, ::testing::ValuesIn(kLayouts),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(SdpaVsManual, IsCausal) {
  // Changing the future must not change the past, through SDPA too.
  const int64_t B = 1, H = 4, K = 2, T = 32, D = 16, t = 20;
  auto gen = at::detail::createCPUGenerator(3);
  auto q = torch::randn({B, H, T, D}, gen), k = torch::randn({B, K, T, D}, gen), v = torch::randn({B, K, T, D}, gen);
  const AttentionPlan sdpa = plan_attention(llmtrain::AttentionBackend::sdpa, torch::kCPU, torch::kFloat, H, K, D, T, 0.0);
  auto y1 = causal_attention(q, k, v, sdpa, {}, 0.0, false);
  auto k2 = k.clone(), v2 = v.clone();
  k2.narrow(2, t, T - t).normal_(0, 1, gen);
  v2.narrow(2, t, T - t).normal_(0, 1, gen);
  auto y2 = causal_attention(q, k2, v2, sdpa, {}, 0.0, false);
  EXPECT_TRUE(torch::equal(y1.narrow(2, 0, t), y2.narrow(2, 0, t)));
  EXPECT_FALSE(torch::allclose(y1.narrow(2, t, T - t), y2.narrow(2, t, T - t)));
}

TEST(SdpaVsManual, WholeQwen3ModelLossAndGradients) {
  llmtrain::Config c;
  c.load_file(llmtrain::testing::source_dir() + "/inputs/tiny_qwen3.cfg");
  llmtrain::ModelConfig m = llmtrain::ModelConfig::from_config(c, 256);
  auto idx = torch::randint(m.vocab_size, {2, 64}, at::detail::createCPUGenerator(5), torch::kLong);
  auto tgt = torch::randint(m.vocab_size, {2, 64}, at::detail::createCPUGenerator(6), torch::kLong);
  std::vector<torch::Tensor> grads[2];
  double losses[2];
  int i = 0;
  for (const auto backend : {llmtrain::AttentionBackend::manual, llmtrain::AttentionBackend::sdpa}) {
    m.attention_backend = backend;
    llmtrain::Transformer model(m);
    model->init_weights(11);
    auto loss = model->loss(idx, tgt);
    loss.backward();
    losses[i] = loss.item<double>();
    for (auto& p : model->parameters()) grads[i].push_back(p.grad().clone());
    ++i;
  }
  EXPECT_LE(std::abs(losses[1] - losses[0]) / std::abs(losses[0]), 1e-5);
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t j = 0; j < grads[0].size(); ++j) EXPECT_LE(rel_err(grads[1][j], grads[0][j]), 1e-4) << "parameter " << j;
}

}  // namespace
