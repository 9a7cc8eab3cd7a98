// Private (Runtime owns it): how a run's record survives the run's end.
//
// Rank 0 writes the run log, but an error may happen on any rank, and the
// launcher kills every process soon after (MPI_Abort, or mpirun's SIGTERM then
// SIGKILL about a second later). A thread on rank 0 listens on a communicator
// of its own for:
//  - another rank's fatal error: the failing rank sends its message and waits
//    (a few seconds at most) for rank 0 to record it, then aborts the job;
//  - a stop signal arriving in this process: the run log is flushed at once,
//    from this thread (not from the signal handler), before the iteration ends.
// The observer (the trainer's RunLog) is called on the listener thread: it must
// be thread-safe against the training thread (RunLog is).
#pragma once
#include <mpi.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

namespace llmtrain {

class RunObserver;

class FailureListener {
 public:
  // Collective over MPI_COMM_WORLD (duplicates it); rank 0 starts the thread.
  explicit FailureListener(int rank);
  ~FailureListener();  // stops the thread; call before MPI_Finalize
  FailureListener(const FailureListener&) = delete;
  FailureListener& operator=(const FailureListener&) = delete;

  // Not owned; nullptr removes it. Once this returns, the old one is not called.
  void set_observer(RunObserver* observer);
  // This rank's fatal error: rank 0 records it directly; another rank sends it
  // to rank 0 and waits up to `wait_s` for the acknowledgement.
  void report(const std::string& message, double wait_s = 5.0);

 private:
  void loop();
  void call_failure(int rank, const std::string& message);

  int rank_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;  // guards the observer, held while it is called
  RunObserver* observer_ = nullptr;
};

}  // namespace llmtrain
