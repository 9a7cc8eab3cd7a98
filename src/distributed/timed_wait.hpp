// Private: the strategies' account of exposed communication. Runs `f` (a wait
// on a collective, or a blocking one) and adds its wall time to `seconds`.
#pragma once
#include <chrono>
#include <utility>

namespace llmtrain {

template <class F>
void add_wait_seconds(double& seconds, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  std::forward<F>(f)();
  seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace llmtrain
