// Per-element math of RoPE (the rotate-half form the model uses: element i
// pairs with i + D/2), shared by rope.cu and its CPU twin.
#pragma once
#include "kernels/math_common.hpp"

namespace llmtrain::kernels::math {

// (y1, y2) = (x1 c - x2 s, x2 c + x1 s): a rotation by the position's angle.
LLMTRAIN_HD void rope_fwd(float x1, float x2, float c, float s, float& y1, float& y2) {
  y1 = x1 * c - x2 * s;
  y2 = x2 * c + x1 * s;
}

// The transposed rotation (the inverse angle) carries the gradient back.
LLMTRAIN_HD void rope_bwd(float dy1, float dy2, float c, float s, float& dx1, float& dx2) {
  dx1 = dy1 * c + dy2 * s;
  dx2 = dy2 * c - dy1 * s;
}

}  // namespace llmtrain::kernels::math
