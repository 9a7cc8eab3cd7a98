// LM head + cross-entropy in chunks over bf16 (or fp32) logits: the op, its CPU
// twin and its ATen reference. Per chunk: one GEMM makes the logits in the
// compute dtype; the row kernel (xent.cu, or the twin here; xent_math.hpp is
// what both compile) turns them into the rows' losses and overwrites them with
// their gradient, already scaled by 1/n_valid; two GEMMs turn that into
// hidden's gradient (written into its rows in place) and weight's (accumulated
// in fp32 by the GEMM itself on CUDA: no (V, C) temporary per chunk).
#include <algorithm>
#include <atomic>

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <c10/util/BFloat16.h>
#include <fmt/format.h>
#include <torch/autograd.h>

#include "kernels/common.hpp"       // defines: resolve, dt, stream, maybe_corrupt, aten_lm_head_cross_entropy
#include "kernels/xent_math.hpp"    // defines: lse_add, lse_value, xent_grad
#include "llmtrain/core/error.hpp"  // defines: LLMTRAIN_CHECK

namespace llmtrain::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- CPU twin: one row at a time, the kernel's two passes ----
template <typename T>
void twin_rows(T* logits, const int64_t* targets, int64_t ignore_index, float scale, float* loss_rows, int64_t n,
               int64_t V, bool want_grad) {
  at::parallel_for(0, n, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* x = logits + r * V;
      const int64_t y = targets[r];
      const bool valid = y != ignore_index;
      float m = -INFINITY, s = 0.0f;
      for (int64_t c = 0; c < V; ++c) math::lse_add(m, s, static_cast<float>(x[c]));
      const float lse = math::lse_value(m, s);
      loss_rows[r] = !valid ? 0.0f : (y >= 0 && y < V) ? lse - static_cast<float>(x[y]) : NAN;
      if (!want_grad) continue;
      const float sc = valid ? scale : 0.0f;
      for (int64_t c = 0; c < V; ++c) x[c] = T(math::xent_grad(static_cast<float>(x[c]), lse, c == y, sc));
    }
  });
}

// Rows per chunk: about 64 MiB of logits in their dtype, at least 512 rows
// (every chunk reads the whole weight twice), the same for every chunk.
int64_t chunk_rows_for(int64_t rows, int64_t vocab, int64_t elem_bytes) {
  const int64_t most = std::max<int64_t>(512, (int64_t{64} << 20) / (elem_bytes * std::max<int64_t>(vocab, 1)));
  const int64_t r = std::max<int64_t>(rows, 1), chunks = (r + most - 1) / most;
  return (r + chunks - 1) / chunks;
}

// CUDA's GEMM with an fp32 output from bf16 inputs (addmm.dtype_out); where
// this ATen refuses it once, the product and an fp32 add from then on.
std::atomic<bool> g_dtype_gemm_ok{true};

void gemm_into(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b, bool accumulate) {
  if (out.scalar_type() == a.scalar_type()) {
    if (accumulate)
      out.addmm_(a, b);
    else
      at::mm_out(out, a, b);
    return;
  }
  if (out.is_cuda() && g_dtype_gemm_ok) {
    try {
      if (accumulate)
        at::addmm_out(out, out, a, b, out.scalar_type(), /*beta=*/1, /*alpha=*/1);
      else
        at::mm_out(out, a, b, out.scalar_type());
      return;
    } catch (const c10::Error&) {
      g_dtype_gemm_ok = false;
    }
  }
  if (accumulate)
    out.add_(at::mm(a, b));
  else
    out.copy_(at::mm(a, b));
}

struct XentFn : public torch::autograd::Function<XentFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, int64_t ignore_index, int64_t chunk_rows, bool want_x,
                               bool want_w, int64_t compute_i, int64_t impl_i) {
    const auto impl = static_cast<Impl>(impl_i);
    const auto compute = static_cast<torch::ScalarType>(compute_i);
    const int64_t N = hidden.size(0), C = hidden.size(1), V = weight.size(0);
    const auto x = hidden.to(compute).contiguous();  // (N, C)
    const auto w = weight.to(compute).contiguous();  // (V, C)
    const auto tg = targets.to(torch::kLong).contiguous();
    // 1 / n_valid stays on the device (inf with no valid row: the loss is then NaN, as ATen's).
    const auto scale = tg.ne(ignore_index).sum().to(torch::kFloat).reciprocal().reshape({1});
    auto loss_rows = torch::empty({N}, hidden.options().dtype(torch::kFloat));
    torch::Tensor grad_x, grad_w;
    if (want_x) grad_x = torch::empty({N, C}, hidden.options());
    if (want_w) grad_w = torch::zeros({V, C}, weight.options());
    const bool want_grad = want_x || want_w;
    // CPU: the scalar is in host memory already; read through its pointer, not
    // item(), which a trace counts as a host synchronization.
    const float host_scale = impl == Impl::twin ? *scale.data_ptr<float>() : 0.0f;
    for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
      const int64_t n = std::min(chunk_rows, N - r0);
      const auto xc = x.narrow(0, r0, n);
      auto logits = at::mm(xc, w.t());  // (n, V) in the compute dtype
      auto lr = loss_rows.narrow(0, r0, n);
      const int64_t* tp = tg.data_ptr<int64_t>() + r0;
      if (impl == Impl::cuda) {
        cuda::xent_rows(detail::dt(compute), logits.data_ptr(), tp, ignore_index, scale.data_ptr<float>(),
                        lr.data_ptr<float>(), n, V, want_grad, detail::stream());
      } else if (compute == torch::kFloat) {
        twin_rows(logits.data_ptr<float>(), tp, ignore_index, host_scale, lr.data_ptr<float>(), n, V, want_grad);
      } else {
        twin_rows(logits.data_ptr<c10::BFloat16>(), tp, ignore_index, host_scale, lr.data_ptr<float>(), n, V,
                  want_grad);
      }
      if (want_x) {
        auto gx = grad_x.narrow(0, r0, n);  // rows of a contiguous tensor: written in place
        gemm_into(gx, logits, w, /*accumulate=*/false);
      }
      if (want_w) gemm_into(grad_w, logits.t(), xc, /*accumulate=*/true);
    }
    auto loss = (loss_rows.sum() * scale).reshape({});
    if (impl == Impl::twin) detail::maybe_corrupt(Op::lm_head_cross_entropy, loss);
    ctx->save_for_backward({grad_x, grad_w});
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    RECORD_FUNCTION("llmtrain::lm_head_cross_entropy_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const auto& go = grad_out[0];
    // Scaled in place: the gradients made in forward are this node's alone
    // (nothing else holds them), and a copy would add (N, C) and the (V, C)
    // fp32 weight gradient at the start of backward, near the step's peak
    // (370 MB for LLaMA-2 1.36B at 8 x 2048; issue 46). A second backward
    // through the same graph (retain_graph) then fails autograd's version
    // check instead of scaling twice.
    torch::Tensor gx, gw;
    if (saved[0].defined()) gx = saved[0].mul_(go.to(saved[0].scalar_type()));
    if (saved[1].defined()) gw = saved[1].mul_(go.to(saved[1].scalar_type()));
    return {gx, gw, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor lm_head_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                    const torch::Tensor& targets, int64_t ignore_index, int64_t chunk_rows,
                                    std::optional<Impl> forced) {
  LLMTRAIN_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
                 "llmtrain::lm_head_cross_entropy: hidden (N, C) and weight (V, C) expected, got {} and {}",
                 c10::str(hidden.sizes()), c10::str(weight.sizes()));
  LLMTRAIN_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0),
                 "llmtrain::lm_head_cross_entropy: targets (N) expected, got {} for {} rows",
                 c10::str(targets.sizes()), hidden.size(0));
  const auto device_type = hidden.device().type();
  // What the plain path's GEMM runs in: the autocast dtype where autocast is on, else the weight's.
  const auto compute = at::autocast::is_autocast_enabled(device_type) ? at::autocast::get_autocast_dtype(device_type)
                                                                      : weight.scalar_type();
  const bool shape_ok = detail::kernel_dtype(compute) && detail::kernel_dtype(weight.scalar_type()) &&
                        weight.device() == hidden.device() && targets.device() == hidden.device();
  const Impl impl = detail::resolve(Op::lm_head_cross_entropy, hidden, shape_ok, forced,
                                    "a compute dtype other than fp32/bf16, or tensors on different devices");
  if (impl == Impl::aten) return detail::aten_lm_head_cross_entropy(hidden, weight, targets, ignore_index);
  RECORD_FUNCTION("llmtrain::lm_head_cross_entropy", std::vector<c10::IValue>());
  if (chunk_rows <= 0)
    chunk_rows = chunk_rows_for(hidden.size(0), weight.size(0), compute == torch::kFloat ? 4 : 2);
  const bool grad = torch::GradMode::is_enabled();
  return XentFn::apply(hidden, weight, targets, ignore_index, chunk_rows, grad && hidden.requires_grad(),
                       grad && weight.requires_grad(), static_cast<int64_t>(compute), static_cast<int64_t>(impl));
}

namespace detail {

torch::Tensor aten_lm_head_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                         const torch::Tensor& targets, int64_t ignore_index) {
  auto logits = at::linear(hidden, weight);  // (N, V), in the autocast dtype under autocast
  return at::cross_entropy_loss(logits.to(torch::kFloat), targets, {}, at::Reduction::Mean, ignore_index);
}

}  // namespace detail
}  // namespace llmtrain::kernels
