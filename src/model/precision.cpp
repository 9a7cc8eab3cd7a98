#include "llmtrain/model/precision.hpp"

#include <cmath>

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <fmt/format.h>

#include "llmtrain/core/error.hpp"

namespace llmtrain {

torch::ScalarType compute_dtype(ComputeDtype dtype, torch::Device device) {
  (void)device;  // every dtype has an autocast on CPU and CUDA in LibTorch 2.x
  switch (dtype) {
    case ComputeDtype::float32: return torch::kFloat;
    case ComputeDtype::bfloat16: return torch::kBFloat16;
    case ComputeDtype::float16: return torch::kHalf;
  }
  throw Error(fmt::format("compute_dtype: no dtype {}", static_cast<int>(dtype)));
}

AutocastGuard::AutocastGuard(torch::Device device, torch::ScalarType dtype) {
  if (dtype == torch::kFloat) return;
  active_ = true;
  type_ = device.type();
  LLMTRAIN_CHECK(at::autocast::is_autocast_available(type_), "autocast is not available on device type {}",
                 c10::DeviceTypeName(type_));
  prev_enabled_ = at::autocast::is_autocast_enabled(type_);
  prev_dtype_ = at::autocast::get_autocast_dtype(type_);
  at::autocast::set_autocast_dtype(type_, dtype);
  at::autocast::set_autocast_enabled(type_, true);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // Leaving the outermost region drops the cached low-precision weight copies, as
  // Python's autocast does; otherwise they would go stale after the optimizer step.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(type_, prev_enabled_);
  at::autocast::set_autocast_dtype(type_, prev_dtype_);
}

std::string enable_tf32(torch::Device device) {
  if (!device.is_cuda()) return "fp32 matmuls: IEEE fp32 (CPU)";
  auto& ctx = at::globalContext();
  // Through the legacy setters, which set the new per-backend precision too:
  // code that still reads the legacy state (TunableOp, allowTF32CuBLAS(),
  // float32MatmulPrecision()) sees the same setting, where setting only the new
  // API makes those readers throw ("mix of the legacy and new APIs").
  ctx.setAllowTF32CuBLAS(true);
  ctx.setAllowTF32CuDNN(true);
  ctx.setFloat32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL, at::Float32Precision::TF32);
  ctx.setFloat32Precision(at::Float32Backend::CUDA, at::Float32Op::CONV, at::Float32Precision::TF32);
  return "fp32 matmuls: TF32 on CUDA (cuBLAS, cuDNN)";
}

bool tf32_matmuls_enabled(torch::Device device) {
  if (!device.is_cuda()) return false;
  return at::globalContext().float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL) ==
         at::Float32Precision::TF32;
}

LossScaler::LossScaler(bool enabled, Options o) : enabled_(enabled), opt_(o), scale_(o.init_scale) {
  LLMTRAIN_CHECK(o.init_scale > 0 && o.growth_factor > 1 && o.backoff_factor > 0 && o.backoff_factor < 1 &&
                     o.growth_interval > 0,
                 "LossScaler: invalid options");
}

bool LossScaler::update(double scaled_grad_norm) {
  const bool finite = std::isfinite(scaled_grad_norm);
  if (!enabled_) return finite;
  if (!finite) {
    scale_ *= opt_.backoff_factor;
    tracker_ = 0;
    ++skipped_;
    return false;
  }
  if (++tracker_ >= opt_.growth_interval) {
    scale_ *= opt_.growth_factor;
    tracker_ = 0;
  }
  return true;
}

void LossScaler::load_state(const State& s) {
  LLMTRAIN_CHECK(s.scale > 0 && std::isfinite(s.scale), "loss scale {} in the saved state is not positive", s.scale);
  scale_ = s.scale;
  tracker_ = s.growth_tracker;
  skipped_ = s.skipped;
}

}  // namespace llmtrain
