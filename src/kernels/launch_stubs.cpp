// The launchers of launch.hpp in a build without CUDA (LLMTRAIN_WITH_CUDA off):
// the wrappers never pick the cuda path there (kernels::choose), and a forced
// one throws before it reaches these; they exist so that the wrappers link.
#ifndef LLMTRAIN_WITH_CUDA
#include "kernels/launch.hpp"       // defines: the launchers' signatures
#include "llmtrain/core/error.hpp"  // defines: NotBuiltError

namespace llmtrain::kernels::cuda {
namespace {
[[noreturn]] void not_built() {
  throw NotBuiltError("the fused CUDA kernels are not in this build (LLMTRAIN_WITH_CUDA is off)");
}
}  // namespace

void norm_fwd(DT, DT, DT, const void*, const void*, const float*, const float*, void*, void*, float*, float*, int64_t,
              int64_t, float, bool, Stream) {
  not_built();
}
void norm_bwd(DT, DT, DT, const void*, const void*, const void*, const float*, const float*, const float*, void*,
              void*, float*, float*, int64_t, int64_t, bool, Stream) {
  not_built();
}
void rope_fwd(DT, const void*, const float*, const float*, int64_t, const float*, const float*, void*, void*, void*,
              int64_t, int64_t, int64_t, int64_t, int64_t, float, Stream) {
  not_built();
}
void rope_bwd(DT, const void*, const void*, const void*, const void*, const float*, const float*, int64_t,
              const float*, const float*, void*, float*, int64_t, int64_t, int64_t, int64_t, int64_t, float, Stream) {
  not_built();
}
void swiglu_fwd(DT, const void*, void*, int64_t, int64_t, Stream) { not_built(); }
void swiglu_bwd(DT, const void*, const void*, void*, int64_t, int64_t, Stream) { not_built(); }
void gelu_fwd(DT, const void*, const float*, void*, int64_t, int64_t, Stream) { not_built(); }
void gelu_bwd(DT, const void*, const float*, const void*, void*, int64_t, int64_t, Stream) { not_built(); }
void xent_rows(DT, void*, const int64_t*, int64_t, const float*, float*, int64_t, int64_t, bool, Stream) {
  not_built();
}

}  // namespace llmtrain::kernels::cuda
#endif
