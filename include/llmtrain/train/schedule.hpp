// Learning-rate schedule: linear warm-up, cosine decay to min_lr (nanoGPT's).
#pragma once
#include <cstdint>

namespace llmtrain {

struct Config;

struct LrSchedule {
  double learning_rate, min_lr;
  int64_t warmup_iters, lr_decay_iters;
  bool decay;

  explicit LrSchedule(const Config& c);
  // Learning rate of iteration `iter` (0-based):
  //   iter < warmup:        lr * (iter + 1) / (warmup + 1)
  //   iter > lr_decay_iters: min_lr
  //   otherwise:            min_lr + 0.5 (1 + cos(pi r)) (lr - min_lr),
  //                         r = (iter - warmup) / (lr_decay_iters - warmup)
  double at(int64_t iter) const;
};

}  // namespace llmtrain
