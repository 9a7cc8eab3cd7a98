// Precision: the compute dtype of a run, an RAII autocast region (C++ has no
// autocast guard object; this is a small RAII one, docs/architecture.md), dynamic loss
// scaling for float16, and the TF32 setting of fp32 matmuls on CUDA.
#pragma once
#include <cstdint>
#include <string>

#include <torch/types.h>

#include "llmtrain/core/options.hpp"  // defines: ComputeDtype

namespace llmtrain {

// The config's dtype -> the autocast dtype (float32 = no autocast).
torch::ScalarType compute_dtype(ComputeDtype dtype, torch::Device device);

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
  c10::DeviceType type_ = c10::DeviceType::CPU;
  bool prev_enabled_ = false;
  torch::ScalarType prev_dtype_ = torch::kFloat;
};

// CUDA: fp32 matmuls and convolutions may use TF32 tensor cores (cuBLAS and
// cuDNN), as PyTorch's `torch.backends.cuda.matmul.allow_tf32 = True`. Returns
// the line printed at start-up.
std::string enable_tf32(torch::Device device);
// Whether fp32 matmuls on `device` run on TF32 tensor cores now (CUDA with the
// setting enable_tf32 makes; never on CPU): which peak MFU divides by.
bool tf32_matmuls_enabled(torch::Device device);

// Dynamic loss scaling for float16 (what torch.amp.GradScaler does): the loss is
// multiplied by scale() before backward so small gradients survive fp16; the
// optimizer step divides by it again (through the clip coefficient). A
// non-finite gradient norm means the scale overflowed: the step is skipped and
// the scale halves; after `growth_interval` finite steps in a row it doubles.
// Disabled (scale 1, every step taken) for float32 and bfloat16.
class LossScaler {
 public:
  struct Options {
    double init_scale = 65536.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int64_t growth_interval = 2000;
  };
  explicit LossScaler(bool enabled) : LossScaler(enabled, Options{}) {}
  LossScaler(bool enabled, Options o);
  bool enabled() const { return enabled_; }
  double scale() const { return enabled_ ? scale_ : 1.0; }
  // After one iteration's global gradient norm (of the scaled gradients) is
  // known on every rank: true when the step is to be taken. Updates the scale.
  bool update(double scaled_grad_norm);
  int64_t skipped_steps() const { return skipped_; }
  // State for checkpoints: {scale, finite steps since the last change, skipped}.
  struct State {
    double scale;
    int64_t growth_tracker;
    int64_t skipped;
  };
  State state() const { return {scale_, tracker_, skipped_}; }
  void load_state(const State& s);

 private:
  bool enabled_;
  Options opt_;
  double scale_;
  int64_t tracker_ = 0, skipped_ = 0;
};

}  // namespace llmtrain
