#include "model/fused_loss.hpp"

#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
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
    // One op in a profile_steps trace (record/profile_report.hpp counts it as one).
    RECORD_FUNCTION("llmtrain::fused_linear_cross_entropy", std::vector<c10::IValue>({hidden, weight, targets}));
    const int64_t N = hidden.size(0), C = hidden.size(1);
    const auto device_type = hidden.device().type();
    // What the plain path's matmul would run in: the autocast dtype where
    // autocast is on, else the weight's.
    const auto compute = at::autocast::is_autocast_enabled(device_type) ? at::autocast::get_autocast_dtype(device_type)
                                                                        : weight.scalar_type();
    const auto x = hidden.to(compute);
    const auto w = weight.to(compute);
    // CUDA's GEMMs write fp32 from 16-bit inputs (mm / addmm with out_dtype):
    // the logits straight into the fp32 buffer, x's gradient into its fp32
    // tensor, and the weight's gradient accumulated in fp32 by the GEMM itself.
    // The CPU has no such kernel: there a 16-bit product is cast or added.
    const bool gemm_to_fp32 = hidden.is_cuda() && compute != torch::kFloat;
    // No host read: the count of valid targets stays on the device. Each row's
    // gradient is scaled by valid / n_valid (0 on ignored rows), its loss term
    // masked by valid (n_valid = 0 gives nan, as the plain path).
    const auto valid = targets.ne(ignore_index);                                          // (N) bool
    const auto row_weight = valid.to(torch::kFloat).div_(valid.sum().to(torch::kFloat));  // (N) fp32
    torch::Tensor grad_x, grad_w;
    if (want_x) grad_x = torch::empty({N, C}, hidden.options());
    if (want_w) grad_w = torch::zeros_like(weight);
    auto loss_sum = torch::zeros({}, hidden.options().dtype(torch::kFloat));
    // One fp32 logits buffer serves every chunk.
    torch::Tensor buffer;
    if (compute == torch::kFloat || gemm_to_fp32)
      buffer = torch::empty({std::min(chunk_rows, N), w.size(0)}, x.options().dtype(torch::kFloat));
    for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
      const int64_t n = std::min(chunk_rows, N - r0);
      const auto xc = x.narrow(0, r0, n);
      const auto yc = targets.narrow(0, r0, n);
      const auto vc = valid.narrow(0, r0, n);
      const auto wc = row_weight.narrow(0, r0, n).unsqueeze(1);  // (n, 1)
      torch::Tensor logits;  // (n, V) fp32
      if (buffer.defined()) {
        logits = buffer.narrow(0, 0, n);
        if (gemm_to_fp32)
          at::mm_out(logits, xc, w.t(), torch::kFloat);
        else
          at::mm_out(logits, xc, w.t());
      } else {
        logits = at::matmul(xc, w.t()).to(torch::kFloat);
      }
      // Log-probabilities in place: ATen's kernel reads a row for its max and
      // its sum of exponentials before it writes the row (one exp per element
      // there, one more below; logsumexp and a separate subtraction read and
      // wrote the 64 MiB chunk four more times).
      at::_log_softmax_out(logits, logits, 1, /*half_to_float=*/false);
      const auto safe_y = yc.masked_fill(vc.logical_not(), 0).unsqueeze(1);
      const auto picked = logits.gather(1, safe_y).squeeze(1);  // (n) log p(y)
      loss_sum.sub_((picked * vc).sum());
      if (!want_x && !want_w) continue;
      // d loss / d logits = (softmax - onehot(y)) * valid / n_valid, the
      // softmax made in place and scaled in fp32 before any rounding (as the
      // plain path's gradient is).
      logits.exp_();
      logits.scatter_add_(1, safe_y, torch::full({n, 1}, -1.0f, logits.options()));
      logits.mul_(wc);
      const auto g = logits.to(compute);
      if (want_x) {
        auto gx = grad_x.narrow(0, r0, n);  // rows of a contiguous tensor: written in place
        if (gx.scalar_type() == compute)
          at::mm_out(gx, g, w);
        else if (gemm_to_fp32)
          at::mm_out(gx, g, w, gx.scalar_type());
        else
          gx.copy_(at::mm(g, w));
      }
      // Accumulated in place: no (V, C) temporary per chunk where the GEMM can
      // add into grad_w itself.
      if (want_w) {
        if (grad_w.scalar_type() == compute)
          grad_w.addmm_(g.t(), xc);
        else if (gemm_to_fp32)
          at::addmm_out(grad_w, grad_w, g.t(), xc, grad_w.scalar_type());
        else
          grad_w.add_(at::mm(g.t(), xc));
      }
    }
    ctx->save_for_backward({grad_x, grad_w});
    return loss_sum.div_(valid.sum()).to(torch::kFloat);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    RECORD_FUNCTION("llmtrain::fused_linear_cross_entropy_backward", std::vector<c10::IValue>(saved.begin(), saved.end()));
    const auto& go = grad_out[0];
    torch::Tensor gx, gw;
    if (saved[0].defined()) gx = saved[0] * go.to(saved[0].scalar_type());
    if (saved[1].defined()) gw = saved[1] * go.to(saved[1].scalar_type());
    return {gx, gw, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

int64_t default_chunk_rows(int64_t rows, int64_t vocab, bool cuda) {
  // CPU: 64 MiB of fp32 logits, but at least 512 rows: every chunk reads the
  // whole (V, C) weight twice (the logits' product and x's gradient) and writes
  // its gradient once, and BLAS packs the weight each time. On CPU, the small
  // LLaMA's LM head (2048 x 256 x 50304) took 1.31 s a step in chunks of 333
  // rows, 1.19-1.26 s in chunks of 512, 1.17-1.18 s whole.
  // CUDA: at most 512 MiB of fp32 logits (with its 16-bit copy, 768 MiB at once
  // for a 16-bit compute dtype: LLaMA-2's 32000 vocabulary at 8 x 2048 tokens
  // in 4 chunks of 4096 rows, where 64 MiB made 32): every chunk reads and
  // writes the fp32 weight gradient once, and larger GEMMs run nearer peak.
  // Then the rows are shared evenly (4 x 512, not 6 x 333 and a tail of 50
  // that packs the weight as often as a full chunk).
  const int64_t cap = cuda ? (int64_t{512} << 20) : (int64_t{64} << 20);
  const int64_t most = std::max<int64_t>(512, cap / (4 * std::max<int64_t>(vocab, 1)));
  const int64_t chunks = (std::max<int64_t>(rows, 1) + most - 1) / most;
  return (std::max<int64_t>(rows, 1) + chunks - 1) / chunks;
}

torch::Tensor fused_linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                         const torch::Tensor& targets, int64_t ignore_index, int64_t chunk_rows) {
  LLMTRAIN_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
                 "fused cross-entropy: hidden (N, C) and weight (V, C) expected, got {} and {}",
                 c10::str(hidden.sizes()), c10::str(weight.sizes()));
  LLMTRAIN_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0),
                 "fused cross-entropy: targets (N) expected, got {} for {} rows", c10::str(targets.sizes()),
                 hidden.size(0));
  if (chunk_rows <= 0) chunk_rows = default_chunk_rows(hidden.size(0), weight.size(0), hidden.is_cuda());
  // Which gradients to make (forward runs with grad mode off, so it is decided here).
  const bool grad = torch::GradMode::is_enabled();
  return FusedLinearCrossEntropy::apply(hidden, weight, targets, ignore_index, chunk_rows,
                                        grad && hidden.requires_grad(), grad && weight.requires_grad());
}

}  // namespace llmtrain::model_detail
