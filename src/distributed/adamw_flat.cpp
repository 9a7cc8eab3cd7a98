#include "distributed/adamw_flat.hpp"

#include <cmath>

namespace llmtrain {

FlatAdamW::FlatAdamW(int64_t numel, std::vector<DecayRange> decay, torch::Device device)
    : exp_avg_(torch::zeros({numel}, torch::TensorOptions().dtype(torch::kFloat).device(device))),
      exp_avg_sq_(torch::zeros({numel}, torch::TensorOptions().dtype(torch::kFloat).device(device))),
      decay_(std::move(decay)) {}

void FlatAdamW::step(torch::Tensor& p, const torch::Tensor& grad_in, double lr, const AdamWHyper& h,
                     int64_t step) {
  torch::NoGradGuard no_grad;
  const auto g = grad_in.scalar_type() == torch::kFloat ? grad_in : grad_in.to(torch::kFloat);
  // Same order of operations as torch/csrc/api/src/optim/adamw.cpp.
  if (h.weight_decay != 0)
    for (const auto& r : decay_) p.narrow(0, r.begin, r.numel).mul_(1 - lr * h.weight_decay);
  const double bias_correction1 = 1 - std::pow(h.beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(h.beta2, static_cast<double>(step));
  exp_avg_.mul_(h.beta1).add_(g, 1 - h.beta1);
  exp_avg_sq_.mul_(h.beta2).addcmul_(g, g, 1 - h.beta2);
  const auto denom = (exp_avg_sq_.sqrt() / std::sqrt(bias_correction2)).add_(h.eps);
  p.addcdiv_(exp_avg_, denom, -lr / bias_correction1);
}

}  // namespace llmtrain
