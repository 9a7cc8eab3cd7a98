// GoogleTest main for every test binary: MPI through llmtrain::Runtime, results
// printed by rank 0, and the test fails on every rank if it failed on any.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "llmtrain/distributed/runtime.hpp"
#include "test_util.hpp"

namespace llmtrain::testing {
Runtime* g_runtime = nullptr;
Runtime& runtime() { return *g_runtime; }

void exit_skipped(const std::string& why) {
  std::fprintf(stderr, "SKIPPED: %s\n", why.c_str());
  std::fflush(stderr);
  // std::exit does not unwind main(), so its Runtime is ended here, once.
  if (g_runtime) std::destroy_at(g_runtime);
  g_runtime = nullptr;
  std::exit(77);
}

// Ranks other than 0 print only what failed on them, named by rank: a failure on
// rank 1 alone must say what it was, not just fail rank 0's exit code.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  // The name is taken here: OnTestPartResult runs under GoogleTest's lock, where
  // UnitTest::current_test_info() would wait for itself.
  void OnTestStart(const ::testing::TestInfo& t) override {
    test_ = std::string(t.test_suite_name()) + "." + t.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s: %s:%d: Failure\n%s\n", rank_, test_.c_str(),
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
    std::fflush(stderr);
  }

 private:
  int rank_;
  std::string test_;
};
}  // namespace llmtrain::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  llmtrain::Runtime rt(argc, argv);
  llmtrain::testing::g_runtime = &rt;
  if (rt.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new llmtrain::testing::FailurePrinter(rt.rank()));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_failed && !failed && rt.rank() != 0) return 1;
  llmtrain::testing::g_runtime = nullptr;
  return any_failed;
}
