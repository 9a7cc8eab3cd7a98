#include "llmtrain/train/precision.hpp"

#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <torch/version.h>

#include "llmtrain/core/error.hpp"

namespace llmtrain {

torch::ScalarType compute_dtype(const std::string& dtype, torch::Device device) {
  if (dtype == "float32") return torch::kFloat;
  if (dtype == "bfloat16") return torch::kBFloat16;
  if (dtype == "float16") {
    if (!device.is_cuda())
      throw ConfigError("config key 'dtype': invalid value 'float16' on a CPU device: expected float32 or "
                        "bfloat16 (CPU autocast has no float16)");
    return torch::kHalf;
  }
  throw ConfigError(fmt::format("config key 'dtype': invalid value '{}': expected float32, bfloat16 or float16",
                                dtype));
}

AutocastGuard::AutocastGuard(torch::Device device, torch::ScalarType dtype) {
  if (dtype == torch::kFloat) return;
  active_ = true;
  cuda_ = device.is_cuda();
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  // LibTorch >= 2.4: per-device-type API (the old per-device calls are deprecated).
  const auto type = cuda_ ? at::kCUDA : at::kCPU;
  prev_enabled_ = at::autocast::is_autocast_enabled(type);
  prev_dtype_ = at::autocast::get_autocast_dtype(type);
  at::autocast::set_autocast_dtype(type, dtype);
  at::autocast::set_autocast_enabled(type, true);
#else
  if (cuda_) {
    prev_enabled_ = at::autocast::is_enabled();
    prev_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(true);
  } else {
    prev_enabled_ = at::autocast::is_cpu_enabled();
    prev_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(true);
  }
#endif
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // Leaving the outermost region drops the cached low-precision weight copies, as
  // Python's autocast does; otherwise they would go stale after the optimizer step.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  const auto type = cuda_ ? at::kCUDA : at::kCPU;
  at::autocast::set_autocast_enabled(type, prev_enabled_);
  at::autocast::set_autocast_dtype(type, prev_dtype_);
#else
  if (cuda_) {
    at::autocast::set_enabled(prev_enabled_);
    at::autocast::set_autocast_gpu_dtype(prev_dtype_);
  } else {
    at::autocast::set_cpu_enabled(prev_enabled_);
    at::autocast::set_autocast_cpu_dtype(prev_dtype_);
  }
#endif
}

}  // namespace llmtrain
