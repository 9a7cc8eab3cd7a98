// Private: how the Collectives implementations account for the host time they
// block (Collectives::waited_seconds). Runs `f` (a blocking collective, or a
// wait on a nonblocking one) and adds its wall time to `seconds`.
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
