#include "llmtrain/train/schedule.hpp"

#include <cmath>

#include "llmtrain/core/config.hpp"

namespace llmtrain {

LrSchedule LrSchedule::from_config(const Config& c) {
  LrSchedule s;
  s.learning_rate = c.learning_rate;
  s.min_lr = c.min_lr;
  s.warmup_iters = c.warmup_iters;
  s.lr_decay_iters = c.lr_decay_iters;
  s.decay = c.decay_lr;
  return s;
}

double LrSchedule::at(int64_t iter) const {
  if (!decay) return learning_rate;
  if (iter < warmup_iters)
    return learning_rate * static_cast<double>(iter + 1) / static_cast<double>(warmup_iters + 1);
  if (iter > lr_decay_iters) return min_lr;
  const int64_t span = lr_decay_iters - warmup_iters;
  const double r = span > 0 ? static_cast<double>(iter - warmup_iters) / static_cast<double>(span) : 1.0;
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * r));
  return min_lr + coeff * (learning_rate - min_lr);
}

}  // namespace llmtrain
