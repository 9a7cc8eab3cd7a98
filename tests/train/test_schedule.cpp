#include <gtest/gtest.h>

#include <cmath>

#include <torch/torch.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/train/schedule.hpp"

using llmtrain::Config;
using llmtrain::LrSchedule;

TEST(LrSchedule, WarmupCosineAndFloor) {
  Config c;
  c.learning_rate = 1e-3;
  c.min_lr = 1e-4;
  c.warmup_iters = 10;
  c.lr_decay_iters = 110;
  const LrSchedule s = LrSchedule::from_config(c);
  EXPECT_DOUBLE_EQ(s.at(0), 1e-3 * 1 / 11);
  EXPECT_DOUBLE_EQ(s.at(9), 1e-3 * 10 / 11);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);                       // top of the cosine
  EXPECT_NEAR(s.at(60), 1e-4 + 0.5 * (1e-3 - 1e-4), 1e-15);  // half way
  EXPECT_NEAR(s.at(110), 1e-4, 1e-15);
  EXPECT_DOUBLE_EQ(s.at(1000), 1e-4);
  for (int64_t i = 11; i < 110; ++i) EXPECT_LT(s.at(i), s.at(i - 1)) << i;
}

TEST(LrSchedule, ConstantWhenDecayOff) {
  Config c;
  c.decay_lr = false;
  c.learning_rate = 3e-4;
  const LrSchedule s = LrSchedule::from_config(c);
  EXPECT_DOUBLE_EQ(s.at(0), 3e-4);
  EXPECT_DOUBLE_EQ(s.at(123456), 3e-4);
}
