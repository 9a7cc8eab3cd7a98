// compile=True's model (fused_kernels: the project's kernels of src/kernels/ in
// the blocks, the final norm and the loss) against compile=False's ATen path:
// the same loss and every parameter's gradient, for each model family, on odd
// shapes, in fp32 and under bf16 autocast; every fused op shows in a trace as
// one llmtrain:: op; a shape a kernel cannot take falls back with one start-up
// line; the self-check turns a wrong kernel off (fault point kernel_wrong_output).
#include <gtest/gtest.h>

#include <ATen/record_function.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "llmtrain/core/fault.hpp"         // defines: fault::arm, Point::kernel_wrong_output
#include "llmtrain/kernels/kernels.hpp"    // defines: Op, enabled, set_enabled
#include "llmtrain/model/precision.hpp"    // defines: AutocastGuard
#include "llmtrain/model/transformer.hpp"  // defines: Transformer, ModelConfig

using llmtrain::ModelConfig;
using llmtrain::kernels::Op;

namespace {

// Odd sizes: T 13, width 40, head_dim 10, 4 heads over 2 KV heads, ffn 56, vocab 97 (padded 104).
ModelConfig base() {
  ModelConfig m;
  m.vocab_size = 97, m.padded_vocab = 104, m.block_size = 13;
  m.n_layer = 2, m.n_head = 4, m.n_kv_head = 4, m.n_embd = 40, m.head_dim = 10, m.ffn_hidden = 56;
  return m;
}

struct Family {
  std::string name;
  ModelConfig m;
};

std::vector<Family> families() {
  std::vector<Family> out;
  out.push_back({"llama2", base()});
  ModelConfig l3 = base();
  l3.n_kv_head = 2;
  l3.rope_theta = 500000.0;
  out.push_back({"llama3 (GQA)", l3});
  ModelConfig q = l3;
  q.qk_norm = true;
  q.tie_embeddings = true;
  out.push_back({"qwen3 (QK-norm, tied)", q});
  ModelConfig g = base();
  g.norm = llmtrain::NormKind::layernorm;
  g.pos_encoding = llmtrain::PosEncoding::learned;
  g.ffn = llmtrain::FfnKind::gelu;
  g.bias = true;
  g.tie_embeddings = true;
  out.push_back({"gpt2", g});
  ModelConfig docs = l3;
  docs.document_masking = true;
  docs.eos_id = 5;
  out.push_back({"llama3, document masking", docs});
  ModelConfig recompute = l3;
  recompute.recompute = llmtrain::ActivationCheckpointing::full;
  out.push_back({"llama3, activation checkpointing", recompute});
  ModelConfig manual = q;
  manual.attention_backend = llmtrain::AttentionBackend::manual;
  out.push_back({"qwen3, manual attention", manual});
  return out;
}

double rel_err(const torch::Tensor& a, const torch::Tensor& ref) {
  auto r = ref.to(torch::kDouble), x = a.to(torch::kDouble);
  return ((x - r).abs().max() / r.abs().max().clamp_min(1e-30)).item<double>();
}

struct Result {
  double loss = 0;
  std::vector<std::string> names;
  std::vector<torch::Tensor> grads;
};

Result run(ModelConfig m, bool compile, torch::ScalarType dtype, const torch::Tensor& idx, const torch::Tensor& tgt,
           torch::Device device = torch::kCPU) {
  m.fused_loss = m.fused_kernels = compile;
  llmtrain::Transformer model(m);
  model->init_weights(7);
  model->to(device);
  model->plan_attention(device, dtype);
  torch::Tensor loss;
  {
    std::optional<llmtrain::AutocastGuard> ac;
    if (dtype != torch::kFloat) ac.emplace(device, dtype);
    loss = model->loss(idx.to(device), tgt.to(device));
  }
  loss.backward();
  Result r;
  r.loss = loss.item<double>();
  for (const auto& p : model->named_parameters()) {
    r.names.push_back(p.key());
    r.grads.push_back(p.value().grad().defined() ? p.value().grad().cpu() : torch::zeros_like(p.value()).cpu());
  }
  return r;
}

void expect_same(const ModelConfig& m, torch::ScalarType dtype, double tol, torch::Device device = torch::kCPU) {
  torch::manual_seed(11);
  auto idx = torch::randint(m.vocab_size, {3, m.block_size}, torch::kLong);
  auto tgt = torch::randint(m.vocab_size, {3, m.block_size}, torch::kLong);
  tgt.index_put_({1, 4}, -1);  // an ignored target
  const Result plain = run(m, false, dtype, idx, tgt, device), fused = run(m, true, dtype, idx, tgt, device);
  EXPECT_NEAR(fused.loss, plain.loss, tol * std::abs(plain.loss));
  ASSERT_EQ(plain.grads.size(), fused.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i)
    EXPECT_LT(rel_err(fused.grads[i], plain.grads[i]), tol) << plain.names[i];
}

void all_on() {
  for (const Op op : llmtrain::kernels::all_ops()) llmtrain::kernels::set_enabled(op, true);
}

}  // namespace

TEST(FusedKernelsModel, Float32EqualsTheAtenPath) {
  all_on();
  for (const auto& f : families()) {
    SCOPED_TRACE(f.name);
    expect_same(f.m, torch::kFloat, 2e-4);
  }
}

// bf16 autocast: both sides round the GEMM inputs to bf16, but at different
// points (the fused norm writes bf16 once; the ATen path rounds RoPE and the
// activation in bf16 where the kernels keep fp32): a few bf16 units apart.
TEST(FusedKernelsModel, Bfloat16AutocastEqualsTheAtenPath) {
  all_on();
  for (const auto& f : families()) {
    SCOPED_TRACE(f.name);
    expect_same(f.m, torch::kBFloat16, 5e-2);
  }
}

// On a GPU (skipped without one): the CUDA kernels in the model against the
// ATen path on the same GPU, bf16 autocast, head_dim 16 (the flash and cuDNN
// kernels take multiples of 8). The GPU check runs it with test_kernels_gpu.
TEST(FusedKernelsModel, CudaBfloat16EqualsTheAtenPath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!llmtrain::kernels::cuda_built()) GTEST_SKIP() << "a build without the CUDA kernels";
  all_on();
  for (auto f : families()) {
    SCOPED_TRACE(f.name);
    f.m.head_dim = 16;
    expect_same(f.m, torch::kBFloat16, 5e-2, torch::Device(torch::kCUDA, 0));
  }
}

namespace {
std::mutex g_names_mu;
std::multiset<std::string>* g_names = nullptr;
std::unique_ptr<at::ObserverContext> record_name(const at::RecordFunction& fn) {
  std::lock_guard<std::mutex> lock(g_names_mu);
  const std::string n = fn.name();
  if (g_names && n.rfind("llmtrain::", 0) == 0) g_names->insert(n);
  return nullptr;
}
}  // namespace

// Each fused op is one llmtrain:: op forward and one backward, per use.
TEST(FusedKernelsModel, TraceShowsOneOpPerFusedKernel) {
  all_on();
  for (const auto& f : families()) {
    if (f.m.document_masking || f.m.attention_backend == llmtrain::AttentionBackend::manual ||
        f.m.recompute != llmtrain::ActivationCheckpointing::none)
      continue;
    SCOPED_TRACE(f.name);
    ModelConfig m = f.m;
    m.fused_loss = m.fused_kernels = true;
    llmtrain::Transformer model(m);
    model->init_weights(1);
    auto idx = torch::randint(m.vocab_size, {2, m.block_size}, torch::kLong);
    std::multiset<std::string> names;
    g_names = &names;
    auto handle = at::addGlobalCallback(at::RecordFunctionCallback(record_name));
    model->loss(idx, idx).backward();
    at::removeCallback(handle);
    g_names = nullptr;
    const bool ln = m.norm == llmtrain::NormKind::layernorm;
    const std::string norm = ln ? "llmtrain::add_layernorm" : "llmtrain::add_rmsnorm";
    const std::string act = m.ffn == llmtrain::FfnKind::gelu ? "llmtrain::gelu_tanh" : "llmtrain::swiglu";
    const auto L = static_cast<size_t>(m.n_layer);
    EXPECT_EQ(names.count(norm), 2 * L + 1);  // ln_1, ln_2 per block, ln_f
    EXPECT_EQ(names.count(norm + "_backward"), 2 * L + 1);
    EXPECT_EQ(names.count("llmtrain::rope_qk_norm"), L);
    EXPECT_EQ(names.count("llmtrain::rope_qk_norm_backward"), L);
    EXPECT_EQ(names.count(act), L);
    EXPECT_EQ(names.count(act + "_backward"), L);
    EXPECT_EQ(names.count("llmtrain::lm_head_cross_entropy"), 1u);
    EXPECT_EQ(names.count("llmtrain::lm_head_cross_entropy_backward"), 1u);
  }
}

// A shape a kernel cannot take: one start-up line naming it and why, the
// others still fused, and the model still right (that op on ATen).
TEST(FusedKernelsModel, ShapeAKernelCannotTakeFallsBackWithOneLine) {
  all_on();
  ModelConfig m = base();
  m.n_head = m.n_kv_head = 1;
  m.head_dim = 258;  // rope_qk_norm takes head_dim <= 256
  m.n_layer = 1;
  m.fused_loss = m.fused_kernels = true;
  llmtrain::Transformer model(m);
  ::testing::internal::CaptureStdout();
  const auto lines = model->plan_kernels(torch::kCPU, torch::kFloat);
  const std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(lines.size(), 1u) << out;
  EXPECT_NE(lines[0].find("llmtrain::rope_qk_norm"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("head_dim = 258"), std::string::npos) << lines[0];
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;  // the fallback and the summary
  EXPECT_NE(out.find("llmtrain::add_rmsnorm"), std::string::npos) << out;
  for (const Op op : llmtrain::kernels::all_ops()) EXPECT_TRUE(llmtrain::kernels::enabled(op));
  expect_same(m, torch::kFloat, 2e-4);
  // A dtype no kernel takes: every op of the model says so once.
  ::testing::internal::CaptureStdout();
  const auto half = model->plan_kernels(torch::kCPU, torch::kHalf);
  ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(half.size(), 4u);
  // compile=False: nothing to plan, nothing printed.
  m.fused_loss = m.fused_kernels = false;
  llmtrain::Transformer plain(m);
  ::testing::internal::CaptureStdout();
  EXPECT_TRUE(plain->plan_kernels(torch::kCPU, torch::kFloat).empty());
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
}

// The start-up self-check (kernels::self_check, run by plan_kernels) finds a
// kernel that disagrees with ATen, turns it off with one line naming it, and
// the model then computes through ATen: the same loss and gradients.
TEST(FusedKernelsModel, SelfCheckTurnsAWrongKernelOff) {
  all_on();
  for (const auto& f : families()) {
    if (f.name != "llama3 (GQA)") continue;
    ModelConfig m = f.m;
    m.fused_loss = m.fused_kernels = true;
    llmtrain::Transformer model(m);
    llmtrain::fault::Arm a;
    a.value = static_cast<int64_t>(Op::swiglu);
    llmtrain::fault::arm(llmtrain::fault::Point::kernel_wrong_output, a);
    ::testing::internal::CaptureStdout();
    const auto lines = model->plan_kernels(torch::kCPU, torch::kFloat);
    const std::string out = ::testing::internal::GetCapturedStdout();
    llmtrain::fault::disarm_all();
    EXPECT_FALSE(llmtrain::kernels::enabled(Op::swiglu));
    for (const Op op : llmtrain::kernels::all_ops())
      if (op != Op::swiglu) EXPECT_TRUE(llmtrain::kernels::enabled(op)) << llmtrain::kernels::name(op);
    ASSERT_EQ(lines.size(), 1u) << out;
    EXPECT_NE(lines[0].find("llmtrain::swiglu"), std::string::npos) << lines[0];
    // One warning from the self-check, naming the kernel; the summary leaves it out.
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;
    const auto first_line = out.substr(0, out.find('\n'));
    EXPECT_NE(first_line.find("llmtrain::swiglu"), std::string::npos) << out;
    const auto summary = out.substr(out.find('\n') + 1);
    EXPECT_EQ(summary.find("swiglu"), std::string::npos) << summary;
    expect_same(m, torch::kFloat, 2e-4);  // swiglu on ATen, the rest fused
  }
  all_on();
}
