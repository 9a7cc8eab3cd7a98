// RunObserver: what the Runtime tells the run's record about the run's end
// (the trainer's RunLog implements it; see distributed/failure_listener.hpp).
#pragma once
#include <string>

namespace llmtrain {

// Both calls come on rank 0, from the failure listener's thread (or from the
// thread reporting rank 0's own failure): implementations are thread-safe
// against the training thread. What they throw is swallowed (the run ends anyway).
class RunObserver {
 public:
  virtual ~RunObserver() = default;
  // A fatal error on `rank` (rank 0's own, or another rank's sent to rank 0),
  // before the job is aborted.
  virtual void on_failure(int rank, const std::string& message) = 0;
  // A stop signal reached rank 0's process: called once, at once (mpirun kills
  // the ranks about a second after forwarding SIGTERM).
  virtual void on_signal(int signal) = 0;
};

}  // namespace llmtrain
