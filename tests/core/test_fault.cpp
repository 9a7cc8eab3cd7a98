// The fault injector (core/fault.hpp): a point strikes only where it is armed,
// for the rank and iterations it is armed for, and the environment variables the
// end-to-end tests set arm the same points.
#include <gtest/gtest.h>

#include <cstdlib>

#include "llmtrain/core/error.hpp"
#include "llmtrain/core/fault.hpp"

using namespace llmtrain;

TEST(Fault, UnarmedPointsNeverStrike) {
  fault::disarm_all();
  for (int p = 0; p < fault::kNumPoints; ++p) {
    EXPECT_FALSE(fault::hit(static_cast<fault::Point>(p), 0, 0));
    EXPECT_EQ(fault::value(static_cast<fault::Point>(p)), 0);
  }
}

TEST(Fault, ArmedForOneRankAndIteration) {
  fault::disarm_all();
  fault::Arm a;
  a.rank = 1;
  a.iterations = {6};
  fault::arm(fault::Point::fail_iteration, a);
  EXPECT_TRUE(fault::hit(fault::Point::fail_iteration, 1, 6));
  EXPECT_FALSE(fault::hit(fault::Point::fail_iteration, 0, 6));
  EXPECT_FALSE(fault::hit(fault::Point::fail_iteration, 1, 5));
  EXPECT_FALSE(fault::hit(fault::Point::nan_loss, 1, 6));  // other points stay unarmed
  fault::disarm(fault::Point::fail_iteration);
  EXPECT_FALSE(fault::hit(fault::Point::fail_iteration, 1, 6));
}

TEST(Fault, EveryRankAndEveryIterationWithAValue) {
  fault::disarm_all();
  fault::Arm a;
  a.value = 250;
  fault::arm(fault::Point::iteration_sleep, a);
  EXPECT_TRUE(fault::hit(fault::Point::iteration_sleep, 0, 0));
  EXPECT_TRUE(fault::hit(fault::Point::iteration_sleep, 3, 12345));
  EXPECT_EQ(fault::value(fault::Point::iteration_sleep), 250);
  fault::disarm_all();
}

TEST(Fault, NamesAreTheEnvironmentVariablesTheTestsSet) {
  EXPECT_STREQ(fault::env_name(fault::Point::nan_loss), "LLMTRAIN_TEST_NAN_AT");
  EXPECT_STREQ(fault::env_name(fault::Point::fail_iteration), "LLMTRAIN_TEST_FAIL_AT");
  EXPECT_STREQ(fault::env_name(fault::Point::iteration_sleep), "LLMTRAIN_TEST_ITER_SLEEP_MS");
  EXPECT_STREQ(fault::env_name(fault::Point::kill_during_save), "LLMTRAIN_TEST_KILL_DURING_SAVE");
}
