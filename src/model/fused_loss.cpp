#include "model/fused_loss.hpp"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include <algorithm>

#include "llmtrain/core/error.hpp"

namespace llmtrain::model_detail {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The gradients are made in forward (the loss is the end of the graph, so
// they are known up to the scalar that backward brings) and kept until then.
struct FusedLinearCrossEntropy : public torch::autograd::Function<FusedLinearCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, int64_t ignore_index, int64_t chunk_rows,
                               bool want_x, bool want_w) {
    const int64_t N = hidden.size(0), C = hidden.size(1);
    const auto device_type = hidden.device().type();
    // What the plain path's matmul would run in: the autocast dtype where
    // autocast is on, else the weight's.
    const auto compute = at::autocast::is_autocast_enabled(device_type) ? at::autocast::get_autocast_dtype(device_type)
                                                                        : weight.scalar_type();
    const auto x = hidden.to(compute);
    const auto w = weight.to(compute);
    const auto valid = targets.ne(ignore_index);
    const int64_t n_valid = valid.sum().item<int64_t>();
    const double scale = 1.0 / static_cast<double>(n_valid);  // inf with no valid target: nan, as the plain path
    torch::Tensor grad_x, grad_w;
    if (want_x) grad_x = torch::empty({N, C}, hidden.options());
    if (want_w) grad_w = torch::zeros_like(weight);
    auto loss_sum = torch::zeros({}, hidden.options().dtype(torch::kFloat));
    for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
      const int64_t n = std::min(chunk_rows, N - r0);
      const auto xc = x.narrow(0, r0, n);
      const auto yc = targets.narrow(0, r0, n);
      const auto vc = valid.narrow(0, r0, n);
      auto logits = at::matmul(xc, w.t()).to(torch::kFloat);      // (n, V) fp32
      const auto lse = at::logsumexp(logits, -1);                   // (n)
      const auto safe_y = yc.masked_fill(vc.logical_not(), 0).unsqueeze(1);
      const auto picked = logits.gather(1, safe_y).squeeze(1);      // (n)
      loss_sum.add_(((lse - picked) * vc).sum());
      if (!want_x && !want_w) continue;
      // d loss / d logits = (softmax - onehot(y)) / n_valid on valid rows, 0 elsewhere;
      // computed in place in the logits' buffer.
      logits.sub_(lse.unsqueeze(1)).exp_();
      logits.scatter_add_(1, safe_y, torch::full({n, 1}, -1.0f, logits.options()));
      logits.mul_((vc.to(torch::kFloat) * scale).unsqueeze(1));
      const auto g = logits.to(compute);
      if (want_x) {
        auto gx = grad_x.narrow(0, r0, n);  // rows of a contiguous tensor: written in place
        if (gx.scalar_type() == compute) {
          at::mm_out(gx, g, w);
        } else {
          gx.copy_(at::mm(g, w));
        }
      }
      // Accumulated in place: no (V, C) temporary per chunk.
      if (want_w) {
        if (grad_w.scalar_type() == compute) {
          grad_w.addmm_(g.t(), xc);
        } else {
          grad_w.add_(at::mm(g.t(), xc));
        }
      }
    }
    ctx->save_for_backward({grad_x, grad_w});
    return loss_sum.mul_(scale).to(torch::kFloat);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const auto& go = grad_out[0];
    torch::Tensor gx, gw;
    if (saved[0].defined()) gx = saved[0] * go.to(saved[0].scalar_type());
    if (saved[1].defined()) gw = saved[1] * go.to(saved[1].scalar_type());
    return {gx, gw, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

int64_t default_chunk_rows(int64_t vocab) {
  // 64 MiB of fp32 logits: large enough that the chunk's matmuls run at full
  // speed and that the (V, C) weight gradient is read and written only a few
  // times per step (at 8 MiB, 41 rows at vocabulary 50304, the step took 1.7x
  // the plain path's time on CPU); still a fraction of the whole logits.
  return std::max<int64_t>(1, (int64_t{64} << 20) / (4 * std::max<int64_t>(vocab, 1)));
}

torch::Tensor fused_linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                         const torch::Tensor& targets, int64_t ignore_index, int64_t chunk_rows) {
  LLMTRAIN_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
                 "fused cross-entropy: hidden (N, C) and weight (V, C) expected, got {} and {}",
                 c10::str(hidden.sizes()), c10::str(weight.sizes()));
  LLMTRAIN_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0),
                 "fused cross-entropy: targets (N) expected, got {} for {} rows", c10::str(targets.sizes()),
                 hidden.size(0));
  if (chunk_rows <= 0) chunk_rows = default_chunk_rows(weight.size(0));
  // Which gradients to make (forward runs with grad mode off, so it is decided here).
  const bool grad = torch::GradMode::is_enabled();
  return FusedLinearCrossEntropy::apply(hidden, weight, targets, ignore_index, chunk_rows,
                                        grad && hidden.requires_grad(), grad && weight.requires_grad());
}

}  // namespace llmtrain::model_detail
