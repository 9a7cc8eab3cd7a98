// Per-element math of cross-entropy over a row of logits, shared by xent.cu and
// its CPU twin: an online log-sum-exp (a running max m and a sum s of exp(x - m),
// one pass over the row) and the gradient softmax - onehot, scaled by 1/n_valid
// before it is rounded to the logits' dtype.
#pragma once
#include "kernels/math_common.hpp"

namespace llmtrain::kernels::math {

// Start: m = -inf, s = 0.
LLMTRAIN_HD void lse_add(float& m, float& s, float x) {
  if (x > m) {
    s = s * expf(m - x) + 1.0f;
    m = x;
  } else {
    s += expf(x - m);
  }
}

// Two partial (m, s) of disjoint parts of a row into one (a reduction's step).
LLMTRAIN_HD void lse_merge(float& m, float& s, float m2, float s2) {
  if (s2 == 0.0f) return;
  if (s == 0.0f) {
    m = m2;
    s = s2;
    return;
  }
  if (m >= m2) {
    s += s2 * expf(m2 - m);
  } else {
    s = s * expf(m - m2) + s2;
    m = m2;
  }
}

LLMTRAIN_HD float lse_value(float m, float s) { return m + logf(s); }

// d loss / d logit for one element; `scale` is 1/n_valid (0 on an ignored row).
LLMTRAIN_HD float xent_grad(float logit, float lse, bool is_target, float scale) {
  return (expf(logit - lse) - (is_target ? 1.0f : 0.0f)) * scale;
}

}  // namespace llmtrain::kernels::math
