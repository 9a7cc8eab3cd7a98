// Per-element math of the MLP activations, shared by act.cu and its CPU twin:
// SwiGLU (silu(gate) * up; backward recomputes silu from gate instead of saving
// it) and GPT-2's GELU with the tanh approximation.
#pragma once
#include "kernels/math_common.hpp"

namespace llmtrain::kernels::math {

LLMTRAIN_HD float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

LLMTRAIN_HD float swiglu_fwd(float gate, float up) { return gate * sigmoid(gate) * up; }

// d/dgate and d/dup of silu(gate) * up, times dy.
LLMTRAIN_HD void swiglu_bwd(float gate, float up, float dy, float& dgate, float& dup) {
  const float s = sigmoid(gate);
  const float silu = gate * s;
  dgate = dy * up * s * (1.0f + gate * (1.0f - s));
  dup = dy * silu;
}

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³))), as at::gelu(x, "tanh")
LLMTRAIN_HD float gelu_tanh_fwd(float x) {
  const float u = kGeluC * (x + kGeluA * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

LLMTRAIN_HD float gelu_tanh_bwd(float x, float dy) {
  const float u = kGeluC * (x + kGeluA * x * x * x);
  const float t = tanhf(u);
  return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * x * x));
}

}  // namespace llmtrain::kernels::math
