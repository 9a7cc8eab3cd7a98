#include "distributed/fused_adamw.hpp"

#include <optional>

#include "llmtrain/core/error.hpp"

namespace llmtrain {

void AdamWLists::add(torch::Tensor p, torch::Tensor g, torch::Tensor m, torch::Tensor v) {
  LLMTRAIN_CHECK(p.is_contiguous() && g.is_contiguous() && m.is_contiguous() && v.is_contiguous(),
                 "fused AdamW: parameter, gradient and moments must be contiguous");
  LLMTRAIN_CHECK(g.scalar_type() == p.scalar_type() && m.scalar_type() == p.scalar_type() &&
                     v.scalar_type() == p.scalar_type() && g.numel() == p.numel() && m.numel() == p.numel() &&
                     v.numel() == p.numel(),
                 "fused AdamW: a {} parameter of {} elements with a {} gradient of {} and {} moments of {}",
                 c10::toString(p.scalar_type()), p.numel(), c10::toString(g.scalar_type()), g.numel(),
                 c10::toString(m.scalar_type()), m.numel());
  params.push_back(std::move(p));
  grads.push_back(std::move(g));
  exp_avgs.push_back(std::move(m));
  exp_avg_sqs.push_back(std::move(v));
}

void fused_adamw_step(const AdamWLists& lists, const AdamWHyper& h, double lr, double weight_decay, int64_t step,
                      double grad_scale) {
  if (lists.empty()) return;
  torch::NoGradGuard no_grad;
  const auto device = lists.params.front().device();
  // The kernel reads the step count of each tensor from a float tensor on its
  // device (torch.optim keeps one per parameter and increments it before the
  // kernel); one shared tensor serves every entry.
  const auto step_t = torch::full({}, static_cast<double>(step), torch::TensorOptions().dtype(torch::kFloat).device(device));
  const std::vector<torch::Tensor> steps(lists.params.size(), step_t);
  // The kernel divides the gradients by grad_scale (AMP's loss scale).
  std::optional<torch::Tensor> divisor;
  if (grad_scale != 1.0)
    divisor = torch::full({}, 1.0 / grad_scale, torch::TensorOptions().dtype(torch::kFloat).device(device));
  at::_fused_adamw_(lists.params, lists.grads, lists.exp_avgs, lists.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr,
                    h.beta1, h.beta2, weight_decay, h.eps, /*amsgrad=*/false, /*maximize=*/false, divisor,
                    /*found_inf=*/std::nullopt);
}

}  // namespace llmtrain
