// Precision on the LibTorch 2.x API: autocast regions on CPU for bfloat16 and
// float16, the dynamic loss scaler of float16 runs, TF32 for fp32 matmuls on
// CUDA (a process-wide flag, settable without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <ATen/Context.h>
#include <torch/torch.h>

#include "llmtrain/core/error.hpp"
#include "llmtrain/model/precision.hpp"

namespace {

TEST(Precision, ComputeDtypeNamesTheKey) {
  const torch::Device cpu(torch::kCPU);
  using llmtrain::ComputeDtype;
  EXPECT_EQ(llmtrain::compute_dtype(ComputeDtype::float32, cpu), torch::kFloat);
  EXPECT_EQ(llmtrain::compute_dtype(ComputeDtype::bfloat16, cpu), torch::kBFloat16);
  EXPECT_EQ(llmtrain::compute_dtype(ComputeDtype::float16, cpu), torch::kHalf);
  try {
    llmtrain::compute_dtype(llmtrain::option_from_string<ComputeDtype>("fp8"), cpu);
    FAIL() << "fp8 accepted";
  } catch (const llmtrain::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'dtype'"), std::string::npos) << e.what();
  }
}

TEST(Precision, CpuAutocastRunsMatmulsInTheDtypeAndRestores) {
  const torch::Device cpu(torch::kCPU);
  auto a = torch::randn({8, 8});
  for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
    {
      llmtrain::AutocastGuard g(cpu, dtype);
      EXPECT_EQ(torch::mm(a, a).scalar_type(), dtype);
      {
        llmtrain::AutocastGuard inner(cpu, dtype);  // nesting keeps the region
        EXPECT_EQ(torch::mm(a, a).scalar_type(), dtype);
      }
      EXPECT_EQ(torch::mm(a, a).scalar_type(), dtype);
    }
    EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kFloat);
  }
  {
    llmtrain::AutocastGuard g(cpu, torch::kFloat);  // float32: no autocast
    EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kFloat);
  }
}

TEST(Precision, Float16GradientsUnderflowWithoutLossScalingAndSurviveWithIt) {
  // A tiny gradient through an fp16 matmul: 1e-8 is below fp16's smallest
  // subnormal (6e-8) and flushes to zero unless the loss is scaled first.
  const torch::Device cpu(torch::kCPU);
  auto w = torch::full({4, 4}, 1.0, torch::requires_grad());
  auto x = torch::full({4, 4}, 1.0);
  auto grad_with = [&](double scale) {
    w.mutable_grad() = torch::Tensor();
    {
      llmtrain::AutocastGuard g(cpu, torch::kHalf);
      auto y = torch::mm(x, w);  // fp16
      (y.sum() * 1e-8 * scale).backward();
    }
    return w.grad().abs().max().item<double>() / scale;
  };
  EXPECT_EQ(grad_with(1.0), 0.0);
  EXPECT_NEAR(grad_with(4096.0), 4e-8, 1e-9);  // 65536 itself would overflow fp16 (max 65504) in backward
}

TEST(LossScaler, BacksOffOnOverflowGrowsAfterTheIntervalAndCountsSkips) {
  llmtrain::LossScaler::Options o;
  o.init_scale = 1024;
  o.growth_interval = 3;
  llmtrain::LossScaler s(true, o);
  EXPECT_DOUBLE_EQ(s.scale(), 1024);
  EXPECT_FALSE(s.update(std::numeric_limits<double>::infinity()));
  EXPECT_DOUBLE_EQ(s.scale(), 512);
  EXPECT_FALSE(s.update(std::nan("")));
  EXPECT_DOUBLE_EQ(s.scale(), 256);
  EXPECT_EQ(s.skipped_steps(), 2);
  EXPECT_TRUE(s.update(1.0));
  EXPECT_TRUE(s.update(1.0));
  EXPECT_DOUBLE_EQ(s.scale(), 256);
  EXPECT_TRUE(s.update(1.0));  // third finite step in a row
  EXPECT_DOUBLE_EQ(s.scale(), 512);
  // The state round-trips (checkpoints).
  llmtrain::LossScaler t(true, o);
  t.load_state(s.state());
  EXPECT_DOUBLE_EQ(t.scale(), 512);
  EXPECT_EQ(t.skipped_steps(), 2);
  // Disabled (float32, bfloat16): scale 1, a non-finite norm still refuses the step.
  llmtrain::LossScaler off(false);
  EXPECT_DOUBLE_EQ(off.scale(), 1.0);
  EXPECT_TRUE(off.update(3.0));
  EXPECT_FALSE(off.update(std::numeric_limits<double>::infinity()));
  EXPECT_DOUBLE_EQ(off.scale(), 1.0);
}

TEST(Precision, Tf32IsTurnedOnForCudaMatmulsOnly) {
  auto& ctx = at::globalContext();
  EXPECT_NE(llmtrain::enable_tf32(torch::Device(torch::kCPU)).find("CPU"), std::string::npos);
  EXPECT_NE(ctx.float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL), at::Float32Precision::TF32);
  const std::string line = llmtrain::enable_tf32(torch::Device(torch::kCUDA, 0));
  EXPECT_NE(line.find("TF32"), std::string::npos) << line;
  EXPECT_EQ(ctx.float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL), at::Float32Precision::TF32);
  EXPECT_EQ(ctx.float32Precision(at::Float32Backend::CUDA, at::Float32Op::CONV), at::Float32Precision::TF32);
  // The legacy API that TunableOp, cuBLASLt selection and older code read agrees
  // (LibTorch refuses a mix: "you have used mix of the legacy and new APIs").
  EXPECT_NO_THROW(EXPECT_TRUE(ctx.allowTF32CuBLAS()));
  EXPECT_NO_THROW(EXPECT_EQ(ctx.float32MatmulPrecision(), at::Float32MatmulPrecision::HIGH));
  EXPECT_NO_THROW(EXPECT_TRUE(ctx.allowTF32CuDNN()));
}

}  // namespace
