// The fused kernels' CPU twins against the ATen ops they replace: values and
// gradients, on odd shapes (hidden 72, T 7, B 3, head_dim 12, vocab 67), in fp32
// and bf16; the path choice; the op names in traces; the start-up self-check
// and its fallback (the fault point kernel_wrong_output corrupts one twin).
#include <gtest/gtest.h>

#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <string>

#include "kernel_checks.hpp"             // defines: check_* against ATen, tol_for
#include "llmtrain/core/error.hpp"       // defines: llmtrain::Error
#include "llmtrain/core/fault.hpp"       // defines: fault::arm, Point::kernel_wrong_output
#include "llmtrain/kernels/kernels.hpp"  // defines: the ops, choose, self_check

using namespace llmtrain;
using namespace llmtrain::kernels;
using namespace llmtrain::kernels::testing;

namespace {
const torch::Device kCpu(torch::kCPU);
constexpr auto f32 = torch::kFloat;
constexpr auto bf16 = torch::kBFloat16;
}  // namespace

TEST(KernelTwin, AddRmsNorm) {
  check_add_norm(kCpu, Impl::twin, false, f32, f32, true, false, f32, 3, 7, 72, tol_for(f32));
  check_add_norm(kCpu, Impl::twin, false, bf16, bf16, true, false, bf16, 3, 7, 72, tol_for(bf16));
  // The model's case: an fp32 residual stream, a bf16 branch output, a bf16 GEMM input.
  check_add_norm(kCpu, Impl::twin, false, f32, bf16, true, false, bf16, 3, 7, 72, tol_for(bf16));
  // ln_f / the first block's ln_1: no residual add.
  check_add_norm(kCpu, Impl::twin, false, f32, f32, false, false, f32, 3, 7, 72, tol_for(f32));
}

TEST(KernelTwin, AddLayerNorm) {
  check_add_norm(kCpu, Impl::twin, true, f32, f32, true, true, f32, 3, 7, 72, tol_for(f32));
  check_add_norm(kCpu, Impl::twin, true, bf16, bf16, true, true, bf16, 3, 7, 72, tol_for(bf16));
  check_add_norm(kCpu, Impl::twin, true, f32, bf16, true, true, bf16, 3, 7, 72, tol_for(bf16));
  check_add_norm(kCpu, Impl::twin, true, f32, f32, false, false, f32, 3, 7, 72, tol_for(f32));
}

TEST(KernelTwin, RopeQkNorm) {
  // GQA (3 query heads, 1 KV head), head_dim 12.
  check_rope(kCpu, Impl::twin, f32, 3, 7, 3, 1, 12, true, false, false, tol_for(f32));
  check_rope(kCpu, Impl::twin, bf16, 3, 7, 3, 1, 12, true, false, false, tol_for(bf16));
  // Qwen3: QK-norm folded in.
  check_rope(kCpu, Impl::twin, f32, 3, 7, 3, 1, 12, true, true, false, tol_for(f32));
  check_rope(kCpu, Impl::twin, bf16, 3, 7, 3, 1, 12, true, true, false, tol_for(bf16));
  // Document positions (per-token tables); QK-norm without RoPE (GPT-2-like with qk_norm).
  check_rope(kCpu, Impl::twin, f32, 3, 7, 2, 2, 12, true, true, true, tol_for(f32));
  check_rope(kCpu, Impl::twin, f32, 3, 7, 3, 1, 12, false, true, false, tol_for(f32));
}

TEST(KernelTwin, Swiglu) {
  check_swiglu(kCpu, Impl::twin, f32, {3, 7, 2 * 72}, tol_for(f32));
  check_swiglu(kCpu, Impl::twin, bf16, {3, 7, 2 * 72}, tol_for(bf16));
}

TEST(KernelTwin, GeluTanh) {
  check_gelu(kCpu, Impl::twin, f32, {3, 7, 72}, true, tol_for(f32));
  check_gelu(kCpu, Impl::twin, bf16, {3, 7, 72}, true, tol_for(bf16));
  check_gelu(kCpu, Impl::twin, f32, {3, 7, 72}, false, tol_for(f32));
}

TEST(KernelTwin, LmHeadCrossEntropy) {
  // 21 rows in chunks of 8 (a short last chunk), every 5th row ignored.
  check_xent(kCpu, Impl::twin, f32, 21, 72, 67, 8, true, tol_for(f32));
  check_xent(kCpu, Impl::twin, bf16, 21, 72, 67, 8, true, tol_for(bf16));
  check_xent(kCpu, Impl::twin, f32, 21, 72, 67, 0, false, tol_for(f32));  // one default-sized chunk
}

// The model's case: fp32 hidden and master weight under bf16 autocast: the
// logits exist in bf16 (the GEMM's autocast dtype), the gradients come back in fp32.
TEST(KernelTwin, LmHeadCrossEntropyUnderAutocast) {
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, torch::kBFloat16);
  check_xent(kCpu, Impl::twin, f32, 21, 72, 67, 8, true, tol_for(bf16));
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
}

TEST(KernelTwin, PathChoice) {
  const auto x = torch::zeros({2, 72});
  EXPECT_EQ(choose(Op::add_rmsnorm, x), Impl::twin);
  EXPECT_EQ(choose(Op::add_rmsnorm, x.to(torch::kBFloat16)), Impl::twin);
  EXPECT_EQ(choose(Op::add_rmsnorm, x.to(torch::kHalf)), Impl::aten);  // no fp16 kernel
  EXPECT_EQ(choose(Op::add_rmsnorm, x.to(torch::kDouble)), Impl::aten);
  EXPECT_EQ(choose(Op::add_rmsnorm, x, /*shape_ok=*/false), Impl::aten);
  // head_dim 300 is past the kernel's 256: the unforced op runs ATen, a forced twin says why not.
  const auto qkv = torch::randn({1, 2, 3 * 300});
  EXPECT_NO_THROW(rope_qk_norm(qkv, 1, 1, {}, {}, {}, {}, 1e-6));
  EXPECT_THROW(rope_qk_norm(qkv, 1, 1, {}, {}, {}, {}, 1e-6, Impl::twin), Error);
  // A CUDA kernel cannot take CPU tensors.
  EXPECT_THROW(swiglu(torch::zeros({2, 4}), Impl::cuda), Error);
  set_enabled(Op::swiglu, false);
  EXPECT_EQ(choose(Op::swiglu, x), Impl::aten);
  set_enabled(Op::swiglu, true);
  EXPECT_EQ(choose(Op::swiglu, x), Impl::twin);
}

TEST(KernelTwin, OpsShowInTracesByName) {
  static std::mutex mu;
  static std::set<std::string> seen;
  seen.clear();
  auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        std::lock_guard<std::mutex> lock(mu);
        seen.insert(fn.name());
        return nullptr;
      }).scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
  auto x = torch::randn({3, 7, 72}, torch::requires_grad());
  auto w = torch::ones({72}, torch::requires_grad());
  auto r = add_rmsnorm(x, x * 2, w, 1e-5, torch::kFloat);
  auto s = swiglu(torch::cat({r.normed, r.normed}, -1));
  s.sum().backward();
  at::removeCallback(handle);
  EXPECT_TRUE(seen.count("llmtrain::add_rmsnorm")) << "forward";
  EXPECT_TRUE(seen.count("llmtrain::add_rmsnorm_backward")) << "backward";
  EXPECT_TRUE(seen.count("llmtrain::swiglu"));
  EXPECT_TRUE(seen.count("llmtrain::swiglu_backward"));
  EXPECT_FALSE(seen.count("aten::rms_norm")) << "the twin, not ATen's norm, ran";
}

TEST(KernelSelfCheck, EveryTwinAgreesWithAten) {
  fault::disarm_all();
  for (const Op op : all_ops()) set_enabled(op, true);
  const auto results = self_check(kCpu);
  ASSERT_EQ(results.size(), all_ops().size());
  for (const auto& r : results) {
    EXPECT_TRUE(r.passed) << name(r.op) << ": " << r.detail;
    EXPECT_EQ(r.impl, Impl::twin);
    EXPECT_LE(r.max_error, 1.0) << name(r.op);
    EXPECT_TRUE(enabled(r.op)) << name(r.op);
  }
}

// A twin that computes a wrong value is caught, turned off with one line that
// names it, and the op then runs ATen; the other ops stay on their kernels.
TEST(KernelSelfCheck, WrongKernelFallsBackToAtenWithOneLine) {
  for (const Op bad : {Op::add_rmsnorm, Op::rope_qk_norm, Op::lm_head_cross_entropy}) {
    for (const Op op : all_ops()) set_enabled(op, true);
    fault::Arm a;
    a.value = static_cast<int64_t>(bad);
    fault::arm(fault::Point::kernel_wrong_output, a);
    ::testing::internal::CaptureStdout();
    const auto results = self_check(kCpu);
    const std::string out = ::testing::internal::GetCapturedStdout();
    fault::disarm_all();
    for (const auto& r : results) {
      EXPECT_EQ(r.passed, r.op != bad) << name(r.op) << ": " << r.detail;
      EXPECT_EQ(enabled(r.op), r.op != bad) << name(r.op);
    }
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
    EXPECT_NE(out.find(std::string("llmtrain::") + name(bad)), std::string::npos) << out;
    EXPECT_EQ(choose(bad, torch::zeros({2, 8})), Impl::aten);
    // With the kernel off, the op still computes the right thing (through ATen).
    if (bad == Op::add_rmsnorm)
      check_add_norm(kCpu, Impl::aten, false, f32, f32, true, false, f32, 3, 7, 72, tol_for(f32));
  }
  for (const Op op : all_ops()) set_enabled(op, true);
}
