// Private: AdamW's update as one pass over parameter, gradient and both moments,
// through PyTorch's fused kernel (at::_fused_adamw_, CPU and CUDA: what
// torch.optim.AdamW(fused=True) runs). Every strategy steps through it: the
// sharded AdamW of DDP, ZeRO-1 and FSDP over the ranges of its shards. The unfused sequence of LibTorch's torch::optim::AdamW read and wrote
// the 16M parameters of the small LLaMA seven times (143-145 ms of a ~2 s CPU
// step); the fused kernel takes 37-46 ms.
//
// The arithmetic is PyTorch's fused AdamW, with g = grad * grad_scale:
//   p *= 1 - lr*wd;  m = lerp(m, g, 1 - beta1);  v = beta2*v + (1 - beta2)*g*g;
//   p -= lr/(1 - beta1^t) * m / (sqrt(v)/sqrt(1 - beta2^t) + eps).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "llmtrain/distributed/strategy.hpp"

namespace llmtrain {

// Tensors that one weight decay applies to, in four parallel lists. Each entry
// is contiguous; within an entry parameter, gradient and moments share dtype
// and device.
struct AdamWLists {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  void add(torch::Tensor p, torch::Tensor g, torch::Tensor m, torch::Tensor v);
  bool empty() const { return params.empty(); }
};

// What one AdamW step reads besides the lists, all on the parameters' device
// so that nothing waits on the host (issue 46: no per-call torch::full).
struct AdamWStepArgs {
  torch::Tensor step;       // 0-dim fp32: the step count, counted from 1 (exact to 2^24)
  double lr = 0;            // the learning rate, where lr_tensor is undefined
  torch::Tensor lr_tensor;  // or 0-dim fp32 (_fused_adamw_.tensor_lr)
  // The kernel's grad_scale: it divides the gradients by it, in place (they are
  // spent after); none = 1.
  std::optional<torch::Tensor> divisor;
  // 0-dim fp32, 1 = leave parameters and moments as they are (the kernel's found_inf).
  std::optional<torch::Tensor> found_inf;
};

// One AdamW step on `lists` with `weight_decay`: one _fused_adamw_ call (one
// launch per list on CUDA, as many tensors as the lists hold).
void fused_adamw_step(const AdamWLists& lists, const AdamWHyper& h, const AdamWStepArgs& a, double weight_decay);

// Step `step` (counted from 1) of AdamW on `lists`, the step count and divisor
// made here. The gradients are multiplied by `grad_scale` (clipping, float16's
// loss scale); where it is not 1 the kernel divides them by its inverse in
// place, so they are spent after.
void fused_adamw_step(const AdamWLists& lists, const AdamWHyper& h, double lr, double weight_decay, int64_t step,
                      double grad_scale);

}  // namespace llmtrain
