// The watchdog (issue 19, part 1): the verdict on hand-made states, the limit's
// median-iteration rule, and real heartbeats between ranks (a rank stuck in one
// activity is named by rank 0 with what it was doing; a healthy exchange raises
// no alarm; stop() says goodbye without hanging). The stopped-process case runs
// the real binaries: tests/train/test_e2e.py stalled_rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "llmtrain/core/activity_note.hpp"     // defines: ActivityNote (a file being opened)
#include "llmtrain/distributed/watchdog.hpp"
#include "test_util.hpp"

using llmtrain::RankState;
using llmtrain::Watchdog;
using llmtrain::WatchdogOptions;
using llmtrain::watchdog_verdict;
using llmtrain::testing::runtime;

namespace {
RankState state(int rank, int64_t iter, const std::string& activity, double activity_s, double silent_s = 0.1) {
  RankState s;
  s.rank = rank;
  s.heard = true;
  s.iteration = iter;
  s.activity = activity;
  s.activity_s = activity_s;
  s.silent_s = silent_s;
  return s;
}
bool has(const std::string& m, const std::string& part) { return m.find(part) != std::string::npos; }
}  // namespace

TEST(WatchdogVerdict, HealthyIsSilent) {
  std::vector<RankState> v = {state(0, 5, "iteration 5: forward/backward", 2.0),
                              state(1, 5, "iteration 5: gradient reduction", 0.5, 1.0)};
  EXPECT_EQ(watchdog_verdict(v, 0, 10.0, 5.0, "collective_timeout_s = 10"), "");
}

// kill -STOP of rank 1: its heartbeats stop; rank 0 waits in a collective.
TEST(WatchdogVerdict, AStoppedRankDidNotArrive) {
  std::vector<RankState> v = {state(0, 52, "iteration 52: gradient reduction", 10.4),
                              state(1, 52, "iteration 52: data, forward/backward", 11.3, 11.2)};
  const std::string m = watchdog_verdict(v, 0, 10.0, 5.0, "collective_timeout_s = 10");
  EXPECT_TRUE(has(m, "rank(s) 1 did not arrive")) << m;
  EXPECT_TRUE(has(m, "rank 1 did not arrive: no heartbeat for 11.2 s")) << m;
  EXPECT_TRUE(has(m, "iteration 52, 'iteration 52: data, forward/backward'")) << m;
  EXPECT_TRUE(has(m, "rank 0 is waiting: iteration 52, 'iteration 52: gradient reduction' for 10.4 s")) << m;
  EXPECT_TRUE(has(m, "collective_timeout_s = 10")) << m;
  EXPECT_TRUE(has(m, "MPI_Abort")) << m;
}

// kill -STOP of rank 1 under load (e2e_stalled_rank, Clang, 2026-11-27): the
// last heartbeat to reach rank 0 is an old one, whose activity aged by the
// silence passes the limit before the silence does. Judged by that activity,
// rank 1 looked stuck and rank 0, still under the limit, was named as the one
// that did not arrive. A peer quiet for over stale_s is judged by its silence.
TEST(WatchdogVerdict, AQuietRankIsJudgedBySilenceNotByItsLastActivity) {
  std::vector<RankState> v = {state(0, 3, "iteration 3: gradient reduction", 19.4),
                              state(1, 0, "iteration 0: forward/backward", 20.1, 14.0)};
  // Without the stale rule: the old verdict, naming the waiting rank.
  EXPECT_TRUE(has(watchdog_verdict(v, 0, 20.0, 5.0, "x"), "rank(s) 0 did not arrive"));
  // With it: no verdict while rank 1 is quiet but not yet silent past the limit ...
  EXPECT_EQ(watchdog_verdict(v, 0, 20.0, 5.0, "x", 6.5), "");
  v[0].activity_s = 25.0;  // ... even with rank 0 past the limit, waiting for it,
  EXPECT_EQ(watchdog_verdict(v, 0, 20.0, 5.0, "x", 6.5), "");
  v[1].silent_s = 20.5;  // ... and then rank 1 is named by its silence.
  const std::string m = watchdog_verdict(v, 0, 20.0, 5.0, "x", 6.5);
  EXPECT_TRUE(has(m, "rank(s) 1 did not arrive")) << m;
  EXPECT_TRUE(has(m, "rank 1 did not arrive: no heartbeat for 20.5 s")) << m;
  EXPECT_TRUE(has(m, "rank 0 is waiting")) << m;
  // A peer heard from lately is still judged by its activity: stuck is stuck.
  v = {state(0, 3, "iteration 3: gradient reduction", 25.0), state(1, 3, "iteration 3: checkpoint", 30.0, 1.0)};
  EXPECT_TRUE(has(watchdog_verdict(v, 0, 20.0, 5.0, "x", 6.5), "rank(s) 0, 1 stuck"));
}

// Every heartbeat arrives, but one rank is still computing while the others
// wait in a collective past the limit: it is the one that did not arrive.
TEST(WatchdogVerdict, ARankElsewhereDidNotArrive) {
  std::vector<RankState> v = {state(0, 7, "iteration 7: gradient reduction", 20.0),
                              state(1, 7, "iteration 7: gradient reduction", 19.0),
                              state(2, 7, "iteration 7: data, forward/backward", 3.0)};
  const std::string m = watchdog_verdict(v, 0, 10.0, 5.0, "x");
  EXPECT_TRUE(has(m, "rank(s) 2 did not arrive")) << m;
  EXPECT_TRUE(has(m, "rank 2 did not arrive: it is at iteration 7, 'iteration 7: data, forward/backward'")) << m;
  EXPECT_TRUE(has(m, "rank 1 is waiting")) << m;
}

TEST(WatchdogVerdict, EveryRankStuck) {
  std::vector<RankState> v = {state(0, 7, "iteration 7: gradient reduction", 20.0),
                              state(1, 7, "iteration 7: gradient reduction", 19.0)};
  const std::string m = watchdog_verdict(v, 0, 10.0, 5.0, "x");
  EXPECT_TRUE(has(m, "rank(s) 0, 1 stuck")) << m;
}

TEST(WatchdogVerdict, NeverHeardAndFinishedRanks) {
  RankState never = state(3, -1, "", 0.0, 12.0);
  never.heard = false;
  std::vector<RankState> v = {state(0, 0, "start-up", 12.0), never};
  EXPECT_TRUE(has(watchdog_verdict(v, 0, 10.0, 5.0, "x"), "rank 3 did not arrive: never heard from in 12.0 s"));
  RankState done = state(1, 99, "", 0.0, 30.0);
  done.finished = true;  // a finished rank is not silent: it said goodbye
  v = {state(0, 99, "end of the run", 1.0), done};
  EXPECT_EQ(watchdog_verdict(v, 0, 10.0, 5.0, "x"), "");
  v[0].activity_s = 11.0;  // ... but a rank still waiting for it is told who left
  EXPECT_TRUE(has(watchdog_verdict(v, 0, 10.0, 5.0, "x"), "rank 1 did not arrive: it finished the run"));
}

// A rank other than 0 judges rank 0's silence, and its own stall only after the
// grace (rank 0 normally speaks first, naming everyone).
TEST(WatchdogVerdict, OtherRanksWatchRankZero) {
  std::vector<RankState> v = {state(1, 4, "iteration 4: gradient reduction", 12.0),
                              state(0, 4, "iteration 4: data, forward/backward", 0.2, 11.0)};
  const std::string m = watchdog_verdict(v, 1, 10.0, 5.0, "x");
  EXPECT_TRUE(has(m, "rank(s) 0 did not arrive")) << m;
  v[1].silent_s = 0.3;
  EXPECT_EQ(watchdog_verdict(v, 1, 10.0, 5.0, "x"), "") << "within the grace";
  v[0].activity_s = 15.5;
  EXPECT_TRUE(has(watchdog_verdict(v, 1, 10.0, 5.0, "x"), "rank 1 is waiting"));
  // Ranks other than 0 do not judge each other.
  v = {state(1, 4, "a", 1.0), state(0, 4, "b", 1.0, 0.1), state(2, 4, "c", 1.0, 99.0)};
  EXPECT_EQ(watchdog_verdict(v, 1, 10.0, 5.0, "x"), "");
}

TEST(WatchdogVerdict, ManyRanksAreListedCompactly) {
  std::vector<RankState> v = {state(0, 1, "iteration 1: gradient reduction", 11.0)};
  for (int r = 1; r <= 40; ++r) v.push_back(state(r, 1, "x", 1.0, r == 4 ? 0.1 : 11.0));
  const std::string m = watchdog_verdict(v, 0, 10.0, 5.0, "x");
  EXPECT_TRUE(has(m, "rank(s) 1-3, 5-40 did not arrive")) << m;
  EXPECT_TRUE(has(m, "and 31 more")) << m;
}

TEST(Watchdog, LimitFollowsTheMedianIterationTime) {
  Watchdog w(0, 1, false);
  WatchdogOptions o;
  o.timeout_s = 2.0;
  w.start(o);
  EXPECT_DOUBLE_EQ(w.limit_s(), 2.0);
  for (double t : {1.0, 0.5, 1.0, 9.0}) w.iteration_done(t);
  EXPECT_DOUBLE_EQ(w.limit_s(), 2.0) << "fewer than kMinIterations iterations";
  w.iteration_done(1.0);
  EXPECT_DOUBLE_EQ(w.limit_s(), llmtrain::kIterationMultiple * 1.0);  // the median, not the 9 s outlier
  w.stop();
  w.stop();  // twice is fine
}

// Real heartbeats: rank 1 sits in one activity past the limit while rank 0
// keeps moving; rank 0's watchdog names rank 1 and its activity (it got both
// over the wire). The test hook replaces the abort.
TEST(Watchdog, RankZeroHearsWhatAStuckRankIsDoing) {
  auto& rt = runtime();
  if (rt.world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::mutex mu;
  std::string fired;
  Watchdog w(rt.rank(), rt.world_size(), rt.mpi_thread_level() >= MPI_THREAD_MULTIPLE);
  WatchdogOptions o;
  // Wide margins (20 heartbeats per limit, a stall of 2.5 limits): the verdict,
  // not the timing, is under test, and CI machines are shared.
  o.timeout_s = 2.0;
  o.heartbeat_s = 0.1;
  o.on_timeout = [&](const std::string& m) {
    std::lock_guard<std::mutex> lock(mu);
    if (fired.empty()) fired = m;
  };
  w.start(o);
  // A healthy second first: activities change quickly, no alarm.
  for (int i = 0; i < 10; ++i) {
    w.iteration_begin(i);
    w.activity("iteration " + std::to_string(i) + ": busy");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    w.iteration_done(0.1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(fired, "") << "false alarm on a healthy exchange";
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(5000);
  if (rt.rank() == 1) {
    w.activity("sleeping on purpose");
    // What a rank blocked in H5Fopen looks like (issue 49): the loop's phase and the file.
    const llmtrain::ActivityNote note("opening /data/train_00000.h5");
    std::this_thread::sleep_until(until);
  } else {
    while (std::chrono::steady_clock::now() < until) {
      w.activity("moving on");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  w.idle();
  MPI_Barrier(MPI_COMM_WORLD);
  w.stop();
  if (rt.rank() == 0) {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(has(fired, "rank 1 is waiting")) << fired;
    EXPECT_TRUE(has(fired, "'sleeping on purpose: opening /data/train_00000.h5'")) << fired;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// A file open that never returns while the loop says nothing (idle, e.g. before
// the first iteration) is judged on its own and named (issue 49: a stale Open MPI
// semaphore blocked H5Fopen for ever).
TEST(Watchdog, AFileOpenIsJudgedAndNamedWhenTheLoopIsIdle) {
  std::mutex mu;
  std::string fired;
  Watchdog w(0, 1, false);
  WatchdogOptions o;
  o.timeout_s = 0.5;
  o.heartbeat_s = 0.05;
  o.on_timeout = [&](const std::string& m) {
    std::lock_guard<std::mutex> lock(mu);
    if (fired.empty()) fired = m;
  };
  w.start(o);
  w.idle();
  {
    const llmtrain::ActivityNote note("creating /ckpt/.ckpt_3.h5.tmp");
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  }
  w.stop();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_TRUE(has(fired, "rank(s) 0 stuck")) << fired;
  EXPECT_TRUE(has(fired, "'creating /ckpt/.ckpt_3.h5.tmp'")) << fired;
}
