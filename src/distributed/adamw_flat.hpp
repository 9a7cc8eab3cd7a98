// Private: AdamW on flat fp32 shards (ZeRO-1, FSDP), the same arithmetic as
// torch::optim::AdamW (decoupled decay p *= 1 - lr*wd, then the bias-corrected
// Adam step, eps added after the bias-corrected sqrt).
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace llmtrain {

struct AdamWHyper {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

// A range [begin, begin+numel) of a shard that AdamW decays.
struct DecayRange {
  int64_t begin = 0, numel = 0;
};

class FlatAdamW {
 public:
  // `numel`: shard elements; moments are fp32 zeros of that size.
  FlatAdamW(int64_t numel, std::vector<DecayRange> decay, torch::Device device);
  // param: fp32 (numel,), updated in place; grad: (numel,) any float dtype.
  void step(torch::Tensor& param, const torch::Tensor& grad, double lr, const AdamWHyper& h, int64_t step);
  int64_t state_bytes() const { return exp_avg_.nbytes() + exp_avg_sq_.nbytes(); }

 private:
  torch::Tensor exp_avg_, exp_avg_sq_;  // (numel,) fp32
  std::vector<DecayRange> decay_;
};

}  // namespace llmtrain
