// Learning-rate schedule: linear warm-up, cosine decay to min_lr (nanoGPT's).
#pragma once
#include <cstdint>

namespace llmtrain {

struct Config;

struct LrSchedule {
  double learning_rate = 6e-4, min_lr = 6e-5;
  int64_t warmup_iters = 2000, lr_decay_iters = 600000;
  bool decay = true;  // false: constant learning_rate

  // The config's learning_rate, min_lr, warmup_iters, lr_decay_iters, decay_lr.
  static LrSchedule from_config(const Config& c);
  // Learning rate of iteration `iter` (0-based):
  //   iter < warmup:        lr * (iter + 1) / (warmup + 1)
  //   iter > lr_decay_iters: min_lr
  //   otherwise:            min_lr + 0.5 (1 + cos(pi r)) (lr - min_lr),
  //                         r = (iter - warmup) / (lr_decay_iters - warmup)
  double at(int64_t iter) const;
};

}  // namespace llmtrain
