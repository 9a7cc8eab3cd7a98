// Trainer: the training loop. Builds the parts in a fixed, visible order (model,
// strategy, loaders, schedule, metrics) and runs train_step per iteration.
#pragma once
#include <memory>

#include "llmtrain/core/config.hpp"

namespace llmtrain {

class Runtime;

struct TrainResult {
  int64_t iterations = 0;
  double final_train_loss = 0, final_val_loss = 0;  // of the last evaluation (none: evaluated_at < 0)
  int64_t evaluated_at = -1;     // the iteration the last evaluation ran after; -1: no evaluation ran
  double tokens_per_sec = 0;     // global, warm-up iterations excluded
  std::string run_log_path;
  // The number of the signal (SIGUSR1/SIGTERM) that ended the run before
  // max_iters; 0: none did.
  int stop_signal = 0;
  std::string checkpoint;        // the checkpoint written on that signal
};

// Exit code of a run stopped by a signal after its checkpoint: "stopped early,
// resumable" (jobs/common.sh requeues the job on it: LLMTRAIN_REQUEUE_EXIT_CODE).
constexpr int kRequeueExitCode = 124;

// The console's last line: iterations, the last evaluation's losses ("no eval
// yet" when none ran: a 0.0000 would look like a loss), tokens/s, the run log.
std::string format_run_end(const TrainResult& r, const Config& cfg);

class Trainer {
 public:
  Trainer(const Config& config, Runtime& rt);
  ~Trainer();
  // Runs the loop. An error on this rank is recorded in the run log (status
  // failed, with the error) before it propagates.
  TrainResult run();

 private:
  TrainResult run_loop();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain
