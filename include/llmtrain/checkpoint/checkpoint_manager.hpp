// When a checkpoint is saved, and what happens when a save fails: the one
// owner of the save policy (torchtitan's CheckpointManager). The loop calls it
// at four points: after an iteration (checkpoint_interval), after an
// evaluation (val loss improved, or always_save_checkpoint), on a stop signal,
// and at the end of the run. Every call is collective: every rank makes it at
// the same point and gets the same outcome.
//
// A failed save is a warning: training goes on and the next save retries; a
// run whose last state is in no checkpoint fails at its end (finish()).
// checkpoint_async=True: saves after evaluations and on the interval only take
// the snapshot; their outcome is recorded when the next save or the end waits.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "llmtrain/checkpoint/checkpoint.hpp"  // defines: Checkpointer, LoadedCheckpoint

namespace llmtrain {

struct Config;
class RunLog;
class Watchdog;

struct CheckpointPolicy {
  int64_t interval = 0;         // checkpoint_interval: every that many iterations (0: never)
  bool always_on_eval = false;  // always_save_checkpoint: at every evaluation, not only on improvement
  bool async = false;           // checkpoint_async: interval and evaluation saves in the background
  static CheckpointPolicy from_config(const Config& c);
};

class CheckpointManager {
 public:
  // `watchdog` names each save as the rank's activity; it outlives this.
  CheckpointManager(std::unique_ptr<Checkpointer> checkpointer, CheckpointPolicy policy, Watchdog& watchdog);
  ~CheckpointManager();

  Checkpointer& checkpointer() { return *checkpointer_; }
  // Loads the newest loadable checkpoint (Checkpointer::load_latest); its
  // iteration counts as saved.
  std::optional<LoadedCheckpoint> load_latest();
  // The run log each save (checkpoints[]) and each failure (events[]) is
  // recorded in; before any save (the trainer opens it after resuming). It
  // outlives this.
  void record_to(RunLog& run_log) { run_log_ = &run_log; }

  // After `iteration` iterations: every checkpoint_interval iterations, except
  // during a run of bad steps (`bad_step`): the last checkpoint stays the last good state.
  void after_iteration(int64_t iteration, bool bad_step);
  // Whether after_iteration(iteration, ...) may save (checkpoint_interval): the
  // trainer records its pending steps first (their bad-step flags, counters).
  bool interval_due(int64_t iteration) const { return policy_.interval > 0 && iteration % policy_.interval == 0; }
  // After an evaluation at `iteration` iterations: when val loss improved, or
  // at every evaluation with always_save_checkpoint.
  void after_evaluation(int64_t iteration, bool improved);
  // On a stop signal: a synchronous save (the job is about to end). Returns
  // its path ("" when it failed: the failure is recorded and finish() throws).
  std::string on_stop_signal(int64_t iteration);
  // At the end of the run: waits for the save in flight; throws Error when
  // the run's last state could not be saved.
  void finish();

  // Path `latest` points to, or "" (for messages).
  std::string latest_path() const { return checkpointer_->latest_path(); }

 private:
  std::string save(int64_t iteration, const char* why, bool may_async);
  void collect_async_save();

  std::unique_ptr<Checkpointer> checkpointer_;
  CheckpointPolicy policy_;
  RunLog* run_log_ = nullptr;
  Watchdog& watchdog_;
  int64_t last_saved_iteration_ = -1;
  std::string async_reason_;  // why the asynchronous save in flight was taken
  std::string save_failure_;  // the last failed save, until a later one succeeds
};

}  // namespace llmtrain
