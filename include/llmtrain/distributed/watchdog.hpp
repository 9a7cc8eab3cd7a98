// Watchdog: ends the job when it stops making progress, instead of letting every
// rank wait forever in a collective for a peer that will never arrive (a stopped,
// hung or dead process; a lost node; a NCCL error).
//
// One thread per rank, owned by the Runtime. The training loop only says what it
// is doing (activity(), iteration_begin(), iteration_done()); the thread sends a
// small heartbeat (iteration, activity, how long it has been in it) to rank 0
// every heartbeat interval on a communicator of its own, and rank 0 sends its own
// back to every rank. When rank 0 sees a rank whose heartbeats stopped, or any
// rank (itself included) that has been in one activity longer than the limit, it
// prints one message naming those ranks and what they were last doing, and calls
// MPI_Abort. A rank that stops hearing from rank 0 does the same for rank 0. The
// stopped rank cannot help; the others do.
//
// The limit is collective_timeout_s, raised to kIterationMultiple x the median
// iteration time once kMinIterations iterations are known (a slow but healthy run
// is never cut short). docs/architecture.md ("A stalled rank") has the details.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace llmtrain {

struct Config;

struct WatchdogOptions {
  double timeout_s = 600.0;  // collective_timeout_s: the least limit
  // 0 = timeout_s / 10, clamped to [0.2 s, 5 s].
  double heartbeat_s = 0.0;
  // Test hook: called with the message instead of printing it and aborting the job.
  std::function<void(const std::string&)> on_timeout;
  static WatchdogOptions from_config(const Config& c);
};

// The median-iteration rule: after this many iterations the limit is at least
// kIterationMultiple x their median time.
constexpr double kIterationMultiple = 10.0;
constexpr int64_t kMinIterations = 5;

// What the watchdog knows of one rank at one moment (the verdict's input).
struct RankState {
  int rank = 0;
  bool heard = false;         // a heartbeat has arrived (always true for the observer itself)
  bool finished = false;      // it stopped its watchdog normally (the run ended on that rank)
  double silent_s = 0.0;      // since its last heartbeat arrived (since the watchdog started if none)
  int64_t iteration = -1;     // the iteration it last began (-1: none yet)
  std::string activity;       // e.g. "iteration 52: forward/backward" ("" = idle, never stuck)
  double activity_s = 0.0;    // how long it has been in `activity`, now
};

// The decision: empty when the job is healthy, else the whole message. `ranks`
// holds what `observer` knows (rank 0: every rank; another rank: itself and rank
// 0). A rank not heard from for more than `limit_s` did not arrive; a rank in one
// activity for more than `limit_s` is stuck. A rank other than 0 judges only rank
// 0's silence, and its own stall once `limit_s + grace_s` is over (rank 0 should
// have ended the job by then). A peer not heard from for more than `stale_s`
// (a few heartbeat intervals) is judged by its silence alone: its last report's
// activity, aged by the silence, says nothing of a process that is stopped, and
// taking it for "stuck" named the rank that waited for it (e2e_stalled_rank,
// 2026-11-27). While such a peer is neither heard again nor silent past
// `limit_s`, there is no verdict yet (at most `limit_s` later it is named).
// Pure, for tests.
std::string watchdog_verdict(const std::vector<RankState>& ranks, int observer, double limit_s, double grace_s,
                             const std::string& limit_source,
                             double stale_s = std::numeric_limits<double>::infinity());

class Watchdog {
 public:
  // `rank`/`world_size` of MPI_COMM_WORLD; `mpi_multithreaded` = MPI_THREAD_MULTIPLE
  // was provided (without it there are no heartbeats: each rank only judges itself).
  Watchdog(int rank, int world_size, bool mpi_multithreaded);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Starts the thread (collective: every rank calls it at the same point; it
  // duplicates MPI_COMM_WORLD). A second call is ignored.
  void start(const WatchdogOptions& options);
  // Says goodbye to the other ranks and joins the thread. Called by ~Runtime
  // before MPI_Finalize; safe to call twice or without start().
  void stop();
  bool running() const;

  // Main thread: what this rank is doing from now on (cheap: a lock and a copy).
  void activity(std::string what);
  // "" = idle: not judged (after the run, or between phases that cannot hang).
  void idle() { activity(std::string()); }
  void iteration_begin(int64_t iteration);
  // Wall time of the iteration just finished (feeds the median-iteration rule).
  void iteration_done(double seconds);
  // The limit in force now, and where it comes from ("collective_timeout_s" or the median rule).
  double limit_s() const;

  // Checks run on the watchdog thread each poll: a non-empty string is a fatal
  // error (e.g. a NCCL communicator's asynchronous error) that ends the job like a
  // timeout. `on_abort` runs just before MPI_Abort (e.g. ncclCommAbort, so no
  // kernel waits forever). Returns an id for remove_check.
  int add_check(std::function<std::string()> check, std::function<void()> on_abort);
  void remove_check(int id);
  // Called with the message on the watchdog thread when it ends the job, before
  // the checks' on_abort and MPI_Abort: the Runtime records it in the run log
  // (rank 0 directly, another rank through the failure listener). Bounded: it
  // must not wait for a rank that may be the stalled one for more than seconds.
  void set_before_abort(std::function<void(const std::string&)> before_abort);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain
