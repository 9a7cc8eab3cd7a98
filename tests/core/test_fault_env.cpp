// The environment arms the fault points once, on first use (a process of its
// own: the variables are set by CTest before the injector is first asked).
#include <gtest/gtest.h>

#include "llmtrain/core/fault.hpp"

using namespace llmtrain;

TEST(FaultEnvironment, VariablesArmThePoints) {
  // CTest sets LLMTRAIN_TEST_NAN_AT=3,5 LLMTRAIN_TEST_FAIL_AT=1:6 LLMTRAIN_TEST_KILL_DURING_SAVE=0:8
  // LLMTRAIN_TEST_ITER_SLEEP_MS=40 for this test.
  EXPECT_TRUE(fault::hit(fault::Point::nan_loss, 0, 3));
  EXPECT_TRUE(fault::hit(fault::Point::nan_loss, 1, 5));
  EXPECT_FALSE(fault::hit(fault::Point::nan_loss, 0, 4));
  EXPECT_TRUE(fault::hit(fault::Point::fail_iteration, 1, 6));
  EXPECT_FALSE(fault::hit(fault::Point::fail_iteration, 0, 6));
  EXPECT_TRUE(fault::hit(fault::Point::kill_during_save, 0, 8));
  EXPECT_FALSE(fault::hit(fault::Point::kill_during_save, 1, 8));
  EXPECT_EQ(fault::value(fault::Point::iteration_sleep), 40);
}
