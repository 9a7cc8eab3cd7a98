// GoogleTest main for every test binary: MPI through llmtrain::Runtime, results
// printed by rank 0, and the test fails on every rank if it failed on any.
#include <gtest/gtest.h>
#include <mpi.h>

#include "llmtrain/distributed/runtime.hpp"
#include "test_util.hpp"

namespace llmtrain::testing {
Runtime* g_runtime = nullptr;
Runtime& runtime() { return *g_runtime; }
}  // namespace llmtrain::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  llmtrain::Runtime rt(argc, argv);
  llmtrain::testing::g_runtime = &rt;
  if (rt.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_failed && !failed && rt.rank() != 0) return 1;
  llmtrain::testing::g_runtime = nullptr;
  return any_failed;
}
