// Per-element math of the fused norms (RMSNorm, LayerNorm and Qwen3's per-head
// QK-norm), shared by norm.cu / rope.cu and their CPU twins. Rows are reduced in
// fp32; `mean` is 0 and `bias` 0 for RMSNorm.
#pragma once
#include "kernels/math_common.hpp"

namespace llmtrain::kernels::math {

// 1 / sqrt(mean square + eps): mean square is mean(x²) for RMSNorm and the
// variance mean((x - mean)²) for LayerNorm.
LLMTRAIN_HD float inv_rms(float mean_square, float eps) { return 1.0f / sqrtf(mean_square + eps); }

// y = (h - mean) * rstd * w + b
LLMTRAIN_HD float norm_fwd(float h, float mean, float rstd, float w, float b) { return (h - mean) * rstd * w + b; }

// dL/dh of y = xhat * w + b, xhat = (h - mean) * rstd, given g = dy * w and the
// row means mg = mean(g) (LayerNorm; 0 for RMSNorm, whose mean is not
// subtracted) and mgx = mean(g * xhat).
LLMTRAIN_HD float norm_bwd(float g, float xhat, float rstd, float mg, float mgx) {
  return rstd * (g - mg - xhat * mgx);
}

}  // namespace llmtrain::kernels::math
