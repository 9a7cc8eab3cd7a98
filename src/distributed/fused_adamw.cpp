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

void fused_adamw_step(const AdamWLists& lists, const AdamWHyper& h, const AdamWStepArgs& a, double weight_decay) {
  if (lists.empty()) return;
  torch::NoGradGuard no_grad;
  // The kernel reads each tensor's step count from a float tensor on its
  // device (torch.optim keeps one per parameter and increments it before the
  // kernel); one shared tensor serves every entry.
  const std::vector<torch::Tensor> steps(lists.params.size(), a.step);
  if (a.lr_tensor.defined())
    at::_fused_adamw_(lists.params, lists.grads, lists.exp_avgs, lists.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps,
                      a.lr_tensor, h.beta1, h.beta2, weight_decay, h.eps, /*amsgrad=*/false, /*maximize=*/false,
                      a.divisor, a.found_inf);
  else
    at::_fused_adamw_(lists.params, lists.grads, lists.exp_avgs, lists.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps,
                      a.lr, h.beta1, h.beta2, weight_decay, h.eps, /*amsgrad=*/false, /*maximize=*/false, a.divisor,
                      a.found_inf);
}

void fused_adamw_step(const AdamWLists& lists, const AdamWHyper& h, double lr, double weight_decay, int64_t step,
                      double grad_scale) {
  if (lists.empty()) return;
  const auto fp32 = torch::TensorOptions().dtype(torch::kFloat).device(lists.params.front().device());
  AdamWStepArgs a;
  a.step = torch::full({}, static_cast<double>(step), fp32);
  a.lr = lr;
  if (grad_scale != 1.0) a.divisor = torch::full({}, 1.0 / grad_scale, fp32);
  fused_adamw_step(lists, h, a, weight_decay);
}

}  // namespace llmtrain
