// Helpers shared by the tests.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

#include "llmtrain/core/config.hpp"
#include "llmtrain/distributed/runtime.hpp"

namespace llmtrain::testing {

// The Runtime of this test process (MPI initialized by test_main.cpp).
Runtime& runtime();
// The whole test binary skips (ctest's code 77): prints "SKIPPED: <why>", ends
// main()'s Runtime as its destructor does (failure listener stopped, then
// MPI_Finalize) and exits. A bare MPI_Finalize left the listener's thread in
// MPI_Iprobe, and the skip was a segfault.
[[noreturn]] void exit_skipped(const std::string& why);

inline std::string source_dir() {
  const char* s = std::getenv("LLMTRAIN_SOURCE_DIR");
  return s ? s : LLMTRAIN_TEST_SOURCE_DIR;
}
inline std::string build_dir() {
  const char* s = std::getenv("LLMTRAIN_BUILD_DIR");
  return s ? s : LLMTRAIN_TEST_BUILD_DIR;
}

// A fresh directory for one test, the same path on every rank (created by every
// rank; tests that need it empty remove it on rank 0 before a barrier). One per
// world size: CTest runs a test's _np1/_np2/_np3 variants at the same time.
inline std::filesystem::path scratch_dir(const std::string& name) {
  auto p = std::filesystem::path(build_dir()) / "test-scratch" /
           (name + "_w" + std::to_string(runtime().world_size()));
  std::filesystem::create_directories(p);
  return p;
}

// inputs/<name>.cfg, loaded and validated.
inline Config load_preset(const std::string& name) {
  Config c;
  c.load_file(source_dir() + "/inputs/" + name + ".cfg");
  c.validate();
  return c;
}

}  // namespace llmtrain::testing
