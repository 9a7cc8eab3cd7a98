// The fused CUDA kernels against the ATen ops they replace on a GPU: values
// and gradients at the model's dtypes and at odd and full-width shapes, and
// the start-up self-check. Exits 77 (skipped) without a CUDA device or in a
// build without the CUDA path.
//
// Tolerances (kernel_checks.hpp, tol_for): bf16 |kernel - ATen| <= 1.6e-2 x
// max|ATen| + 1.6e-2 x |ATen| per element (two bf16 units in the last place:
// both sides do fp32 math and round once); fp32 2e-5 of each.
#include <gtest/gtest.h>

#include "kernel_checks.hpp"             // defines: check_* against ATen, tol_for
#include "llmtrain/kernels/kernels.hpp"  // defines: the ops, self_check
#include "test_util.hpp"                 // defines: exit_skipped

using namespace llmtrain::kernels;
using namespace llmtrain::kernels::testing;

namespace {
constexpr auto f32 = torch::kFloat;
constexpr auto bf16 = torch::kBFloat16;

class NeedsGpu : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!cuda_built()) llmtrain::testing::exit_skipped("this build has no CUDA path (LLMTRAIN_WITH_CUDA off)");
    if (!torch::cuda::is_available()) llmtrain::testing::exit_skipped("no CUDA device");
  }
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new NeedsGpu);
const torch::Device kGpu(torch::kCUDA, 0);
}  // namespace

TEST(KernelGpu, SelfCheckPasses) {
  for (const auto& r : self_check(kGpu)) {
    EXPECT_TRUE(r.passed) << name(r.op) << ": " << r.detail;
    EXPECT_EQ(r.impl, Impl::cuda);
  }
}

TEST(KernelGpu, AddRmsNorm) {
  check_add_norm(kGpu, Impl::cuda, false, f32, bf16, true, false, bf16, 3, 7, 72, tol_for(bf16));
  check_add_norm(kGpu, Impl::cuda, false, f32, f32, true, false, f32, 3, 7, 72, tol_for(f32));
  check_add_norm(kGpu, Impl::cuda, false, bf16, bf16, true, false, bf16, 2, 1024, 2304, tol_for(bf16));
  check_add_norm(kGpu, Impl::cuda, false, f32, bf16, true, false, bf16, 2, 1024, 2304, tol_for(bf16));
  check_add_norm(kGpu, Impl::cuda, false, f32, f32, false, false, bf16, 2, 1024, 8192, tol_for(bf16));
}

TEST(KernelGpu, AddLayerNorm) {
  check_add_norm(kGpu, Impl::cuda, true, f32, bf16, true, true, bf16, 3, 7, 72, tol_for(bf16));
  check_add_norm(kGpu, Impl::cuda, true, f32, bf16, true, true, bf16, 2, 1024, 2304, tol_for(bf16));
  check_add_norm(kGpu, Impl::cuda, true, f32, f32, true, true, f32, 2, 512, 1600, tol_for(f32));
}

TEST(KernelGpu, RopeQkNorm) {
  check_rope(kGpu, Impl::cuda, bf16, 3, 7, 3, 1, 12, true, true, false, tol_for(bf16));
  check_rope(kGpu, Impl::cuda, bf16, 2, 1024, 18, 18, 128, true, false, false, tol_for(bf16));  // LLaMA-2 1.36B
  check_rope(kGpu, Impl::cuda, bf16, 2, 512, 16, 8, 128, true, true, true, tol_for(bf16));      // Qwen3-like
  check_rope(kGpu, Impl::cuda, f32, 2, 256, 4, 2, 256, true, true, false, tol_for(f32));
}

TEST(KernelGpu, Swiglu) {
  check_swiglu(kGpu, Impl::cuda, bf16, {3, 7, 2 * 72}, tol_for(bf16));
  check_swiglu(kGpu, Impl::cuda, bf16, {2, 1024, 2 * 6144}, tol_for(bf16));
  check_swiglu(kGpu, Impl::cuda, f32, {2, 256, 2 * 1000}, tol_for(f32));
}

TEST(KernelGpu, GeluTanh) {
  check_gelu(kGpu, Impl::cuda, bf16, {3, 7, 72}, true, tol_for(bf16));
  check_gelu(kGpu, Impl::cuda, bf16, {2, 1024, 6400}, true, tol_for(bf16));
  check_gelu(kGpu, Impl::cuda, f32, {2, 256, 1000}, false, tol_for(f32));
}

TEST(KernelGpu, LmHeadCrossEntropy) {
  check_xent(kGpu, Impl::cuda, bf16, 21, 72, 67, 8, true, tol_for(bf16));
  check_xent(kGpu, Impl::cuda, bf16, 2048, 2304, 32000, 512, true, tol_for(bf16));
  check_xent(kGpu, Impl::cuda, f32, 300, 256, 5003, 128, false, tol_for(f32));
}
