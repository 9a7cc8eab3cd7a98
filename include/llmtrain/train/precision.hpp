// Precision: the compute dtype of a run and an RAII autocast region (C++ has no
// autocast guard object; this is the small one STYLE.md asks for).
#pragma once
#include <string>

#include <torch/types.h>

namespace llmtrain {

// float32 | bfloat16 | float16 -> the autocast dtype (float32 = no autocast).
// Throws ConfigError where the device cannot do it (float16 autocast on CPU).
torch::ScalarType compute_dtype(const std::string& dtype, torch::Device device);

// Enables autocast for `device` to `dtype` while alive; no-op for float32.
// Parameters stay fp32 (the master weights); matmuls run in `dtype`.
class AutocastGuard {
 public:
  AutocastGuard(torch::Device device, torch::ScalarType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  bool cuda_ = false;
  bool prev_enabled_ = false;
  torch::ScalarType prev_dtype_ = torch::kFloat;
};

}  // namespace llmtrain
