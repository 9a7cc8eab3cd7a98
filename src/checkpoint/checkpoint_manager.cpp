#include "llmtrain/checkpoint/checkpoint_manager.hpp"

#include <chrono>

#include <fmt/format.h>

#include "llmtrain/core/config.hpp"           // defines: Config (the checkpoint keys)
#include "llmtrain/core/error.hpp"            // defines: Error, CheckpointSaveFailed
#include "llmtrain/core/log.hpp"              // defines: log::info, log::warn (rank 0 only)
#include "llmtrain/distributed/watchdog.hpp"  // defines: Watchdog::activity
#include "llmtrain/record/run_log.hpp"        // defines: RunLog (checkpoints[], events[])

namespace llmtrain {

CheckpointPolicy CheckpointPolicy::from_config(const Config& c) {
  CheckpointPolicy p;
  p.interval = c.checkpoint_interval;
  p.always_on_eval = c.always_save_checkpoint;
  p.async = c.checkpoint_async;
  return p;
}

CheckpointManager::CheckpointManager(std::unique_ptr<Checkpointer> checkpointer, CheckpointPolicy policy,
                                     Watchdog& watchdog)
    : checkpointer_(std::move(checkpointer)), policy_(policy), watchdog_(watchdog) {}

CheckpointManager::~CheckpointManager() = default;

std::optional<LoadedCheckpoint> CheckpointManager::load_latest() {
  auto loaded = checkpointer_->load_latest();
  if (loaded) last_saved_iteration_ = loaded->iteration;
  return loaded;
}

void CheckpointManager::after_iteration(int64_t iteration, bool bad_step) {
  if (policy_.interval <= 0 || iteration % policy_.interval != 0 || bad_step) return;
  save(iteration, "checkpoint_interval", /*may_async=*/true);
  run_log_->flush(/*force=*/true);
}

void CheckpointManager::after_evaluation(int64_t iteration, bool improved) {
  if (improved || policy_.always_on_eval) save(iteration, improved ? "val loss improved" : "evaluation", /*may_async=*/true);
}

std::string CheckpointManager::on_stop_signal(int64_t iteration) {
  return save(iteration, "stop signal", /*may_async=*/false);
}

void CheckpointManager::finish() {
  collect_async_save();  // the run ends when its last checkpoint is on disk
  if (save_failure_.empty()) return;
  run_log_->flush(/*force=*/true);  // the run's last state is in no checkpoint: not a success
  throw Error(fmt::format("the run's last checkpoint could not be saved: {}", save_failure_));
}

// Saves the training state after `iteration` iterations (once per iteration).
// Returns the path ("" for an asynchronous save still being written, or a
// failed save).
std::string CheckpointManager::save(int64_t iteration, const char* why, bool may_async) {
  LLMTRAIN_CHECK(run_log_ != nullptr, "CheckpointManager: record_to(run log) before the first save");
  collect_async_save();
  const std::string dir_latest = checkpointer_->latest_path();
  if (last_saved_iteration_ == iteration && !dir_latest.empty()) return dir_latest;
  watchdog_.activity(fmt::format("checkpoint save after iteration {} ({})", iteration, why));
  const auto t0 = std::chrono::steady_clock::now();
  if (may_async && policy_.async) {
    checkpointer_->save_async(iteration);
    async_reason_ = why;
    last_saved_iteration_ = iteration;
    return "";
  }
  std::string path;
  try {
    path = checkpointer_->save(iteration);
  } catch (const CheckpointSaveFailed& e) {  // on every rank together; nothing half-written is left
    save_failure_ = e.what();
    run_log_->add_event({{"iter", iteration}, {"kind", "checkpoint_failed"}, {"message", save_failure_}});
    log::warn("{}; training goes on, the next save retries", save_failure_);
    return "";
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  last_saved_iteration_ = iteration;
  save_failure_.clear();
  run_log_->add_checkpoint({{"iter", iteration}, {"path", path}, {"reason", why}, {"seconds", seconds}});
  log::info("checkpoint {} ({}, {:.2f} s)", path, why, seconds);
  return path;
}

// Waits for the asynchronous save in flight, if any, and records it.
void CheckpointManager::collect_async_save() {
  const auto r = checkpointer_->wait();
  if (!r) return;
  if (!r->error.empty()) {
    if (last_saved_iteration_ == r->iteration) last_saved_iteration_ = -1;
    save_failure_ = r->error;
    const std::string msg = fmt::format("the asynchronous checkpoint after iteration {} failed; training goes on "
                                        "and the next save retries: {}", r->iteration, r->error);
    run_log_->add_event({{"iter", r->iteration}, {"kind", "checkpoint_failed"}, {"message", msg}});
    log::warn("{}", msg);
    return;
  }
  save_failure_.clear();
  run_log_->add_checkpoint({{"iter", r->iteration}, {"path", r->path}, {"reason", async_reason_},
                            {"seconds", r->snapshot_seconds}, {"async", true}, {"write_seconds", r->write_seconds}});
  log::info("checkpoint {} ({}, asynchronous: {:.2f} s blocking, {:.2f} s written in the background)", r->path,
            async_reason_, r->snapshot_seconds, r->write_seconds);
}

}  // namespace llmtrain
