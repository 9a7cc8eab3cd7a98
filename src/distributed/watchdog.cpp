// Watchdog (include/llmtrain/distributed/watchdog.hpp): heartbeats on a
// communicator of their own, the verdict, and the abort.
#include "llmtrain/distributed/watchdog.hpp"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "llmtrain/core/activity_note.hpp"  // defines: activity_notes (e.g. the file being opened)
#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/core/log.hpp"

namespace llmtrain {

WatchdogOptions WatchdogOptions::from_config(const Config& c) {
  WatchdogOptions o;
  o.timeout_s = c.collective_timeout_s;
  return o;
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// "1, 3-5, 9" (at most 12 groups, then "... (N ranks)").
std::string rank_list(std::vector<int> r) {
  std::sort(r.begin(), r.end());
  std::string out;
  int groups = 0;
  for (size_t i = 0; i < r.size();) {
    size_t j = i;
    while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
    if (groups++ == 12) return out + fmt::format(", ... ({} ranks)", r.size());
    if (!out.empty()) out += ", ";
    out += j > i + 1 ? fmt::format("{}-{}", r[i], r[j]) : j == i + 1 ? fmt::format("{}, {}", r[i], r[j])
                                                                     : fmt::format("{}", r[i]);
    i = j + 1;
  }
  return out;
}

std::string doing(const RankState& s) {
  if (s.activity.empty()) return s.iteration >= 0 ? fmt::format("idle after iteration {}", s.iteration) : "idle";
  return fmt::format("'{}' for {:.1f} s", s.activity, s.activity_s);
}

}  // namespace

std::string watchdog_verdict(const std::vector<RankState>& ranks, int observer, double limit_s, double grace_s,
                             const std::string& limit_source, double stale_s) {
  std::vector<const RankState*> silent, stuck, elsewhere, finished;
  bool stale = false;  // a peer gone quiet, not yet silent past the limit
  for (const auto& s : ranks) {
    const bool self = s.rank == observer;
    // Another rank judges only rank 0 (rank 0 judges everyone) and, later, itself.
    if (observer != 0 && !self && s.rank != 0) continue;
    if (s.finished) {
      finished.push_back(&s);
      continue;
    }
    const double stuck_after = self && observer != 0 ? limit_s + grace_s : limit_s;
    if (!self && s.silent_s > limit_s)
      silent.push_back(&s);
    else if (!self && s.heard && s.silent_s > stale_s)
      stale = true;
    else if (!s.activity.empty() && s.activity_s > stuck_after)
      stuck.push_back(&s);
    else
      elsewhere.push_back(&s);
  }
  if (silent.empty() && stuck.empty()) return "";
  if (silent.empty() && stale) return "";  // it is named by its silence, or heard from again, within limit_s

  // Who the stuck ranks wait for: the silent ones; else those doing something
  // else (or already finished); else nobody can tell.
  std::vector<int> culprits;
  for (const auto* s : silent) culprits.push_back(s->rank);
  if (culprits.empty())
    for (const auto* s : elsewhere) culprits.push_back(s->rank);
  if (culprits.empty())
    for (const auto* s : finished) culprits.push_back(s->rank);
  std::string msg = fmt::format("watchdog: no progress within the limit of {:.0f} s ({}); ", limit_s, limit_source);
  if (!culprits.empty()) {
    msg += fmt::format("rank(s) {} did not arrive; ", rank_list(culprits));
  } else {
    std::vector<int> all;
    for (const auto* s : stuck) all.push_back(s->rank);
    msg += fmt::format("rank(s) {} stuck; ", rank_list(all));
  }
  msg += "ending the job (MPI_Abort).";
  constexpr size_t kMaxLines = 8;
  auto lines = [&](const std::vector<const RankState*>& v, auto&& line) {
    for (size_t i = 0; i < v.size() && i < kMaxLines; ++i) msg += "\n  " + line(*v[i]);
    if (v.size() > kMaxLines) msg += fmt::format("\n  ... and {} more like these", v.size() - kMaxLines);
  };
  lines(silent, [](const RankState& s) {
    if (!s.heard)
      return fmt::format("rank {} did not arrive: never heard from in {:.1f} s (not started, stopped, hung or dead)",
                         s.rank, s.silent_s);
    return fmt::format("rank {} did not arrive: no heartbeat for {:.1f} s (process stopped, hung or dead); "
                       "its last report: iteration {}, {}",
                       s.rank, s.silent_s, s.iteration, doing(s));
  });
  if (silent.empty())
    lines(elsewhere, [](const RankState& s) {
      return fmt::format("rank {} did not arrive: it is at iteration {}, {}", s.rank, s.iteration, doing(s));
    });
  if (silent.empty() && elsewhere.empty())
    lines(finished, [](const RankState& s) {
      return fmt::format("rank {} did not arrive: it finished the run (after iteration {})", s.rank, s.iteration);
    });
  lines(stuck, [&](const RankState& s) {
    return fmt::format("rank {} is {}: iteration {}, {}", s.rank, culprits.empty() ? "stuck" : "waiting",
                       s.iteration, doing(s));
  });
  return msg;
}

// ---- the thread ----------------------------------------------------------------

namespace {

constexpr int kTag = 7919;

// One heartbeat, as bytes on the wire (same binary on every rank).
struct Beat {
  int32_t rank = 0;
  int32_t finished = 0;
  int64_t iteration = -1;
  double activity_s = 0.0;
  char activity[240] = {0};  // room for the loop's phase and a file path
};

struct Peer {
  bool heard = false, finished = false;
  Clock::time_point last{};
  int64_t iteration = -1;
  std::string activity;
  double activity_s = 0.0;  // as reported
};

}  // namespace

struct Watchdog::Impl {
  int rank, world;
  bool mt;
  WatchdogOptions opts;
  double heartbeat_s = 1.0;

  // The main thread's state.
  mutable std::mutex m;
  std::string activity;
  Clock::time_point activity_start = Clock::now();
  int64_t iteration = -1;
  std::vector<double> iteration_times;  // the last 101
  size_t next_time = 0;

  // The thread.
  std::thread thread;
  std::mutex stop_m;
  std::condition_variable stop_cv;
  bool stopping = false;
  std::atomic<bool> running{false};
  bool fired = false;
  MPI_Comm comm = MPI_COMM_NULL;
  Clock::time_point started{};
  std::vector<Peer> peers;
  std::vector<Beat> send_buf;
  std::vector<MPI_Request> send_req;
  Beat recv_buf;
  MPI_Request recv_req = MPI_REQUEST_NULL;

  std::mutex checks_m;
  std::function<void(const std::string&)> before_abort;  // under checks_m
  std::map<int, std::pair<std::function<std::string()>, std::function<void()>>> checks;
  int next_check = 0;

  Impl(int r, int w, bool multi) : rank(r), world(w), mt(multi && w > 1) {}

  // Limit in force and its source, under `m`.
  std::pair<double, std::string> limit_locked() const {
    const std::string floor = fmt::format("collective_timeout_s = {:g}", opts.timeout_s);
    if (static_cast<int64_t>(iteration_times.size()) < kMinIterations) return {opts.timeout_s, floor};
    std::vector<double> t = iteration_times;
    std::nth_element(t.begin(), t.begin() + static_cast<long>(t.size() / 2), t.end());
    const double median = t[t.size() / 2];
    const double by_median = kIterationMultiple * median;
    if (by_median <= opts.timeout_s) return {opts.timeout_s, floor};
    return {by_median, fmt::format("{:g} x the median iteration time {:.3g} s; {}", kIterationMultiple, median, floor)};
  }

  Beat my_beat(Clock::time_point now, bool finished) const {
    Beat b;
    b.rank = rank;
    b.finished = finished ? 1 : 0;
    std::lock_guard<std::mutex> lock(m);
    b.iteration = iteration;
    const auto [what, for_s] = current_locked(now);
    b.activity_s = for_s;
    std::snprintf(b.activity, sizeof b.activity, "%s", what.c_str());
    return b;
  }

  // The loop's activity with what this process is inside of now (core/activity_note.hpp:
  // e.g. an HDF5 file open), under `m`. A note alone (the loop idle) is judged like an
  // activity, from when the note was opened.
  std::pair<std::string, double> current_locked(Clock::time_point now) const {
    const ActivityNotes notes = activity_notes();
    if (activity.empty()) return {notes.text, notes.oldest_s};
    const double for_s = seconds_between(activity_start, now);
    if (notes.text.empty()) return {activity, for_s};
    return {activity + ": " + notes.text, for_s};
  }

  void send_beats(Clock::time_point now, bool finished) {
    const Beat b = my_beat(now, finished);
    for (int dst = 0; dst < world; ++dst) {
      if (dst == rank || (rank != 0 && dst != 0)) continue;
      auto& req = send_req[dst];
      if (req != MPI_REQUEST_NULL) {
        int done = 0;
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done) continue;  // the last one is still on its way (a slow or stopped peer): do not pile up
      }
      send_buf[dst] = b;
      MPI_Isend(&send_buf[dst], sizeof(Beat), MPI_BYTE, dst, kTag, comm, &req);
    }
  }

  void receive_beats(Clock::time_point now) {
    for (;;) {
      int got = 0;
      MPI_Status st;
      if (MPI_Test(&recv_req, &got, &st) != MPI_SUCCESS || !got) return;
      const int from = recv_buf.rank;
      if (from >= 0 && from < world) {
        auto& p = peers[from];
        p.heard = true;
        p.finished = p.finished || recv_buf.finished != 0;
        p.last = now;
        p.iteration = recv_buf.iteration;
        p.activity.assign(recv_buf.activity, strnlen(recv_buf.activity, sizeof recv_buf.activity));
        p.activity_s = recv_buf.activity_s;
      }
      post_receive();
    }
  }

  void post_receive() {
    MPI_Irecv(&recv_buf, sizeof(Beat), MPI_BYTE, rank == 0 ? MPI_ANY_SOURCE : 0, kTag, comm, &recv_req);
  }

  std::vector<RankState> states(Clock::time_point now) const {
    std::vector<RankState> out;
    RankState self;
    self.rank = rank;
    self.heard = true;
    {
      std::lock_guard<std::mutex> lock(m);
      self.iteration = iteration;
      std::tie(self.activity, self.activity_s) = current_locked(now);
    }
    out.push_back(self);
    if (!mt) return out;
    for (int r = 0; r < world; ++r) {
      if (r == rank || (rank != 0 && r != 0)) continue;
      const auto& p = peers[r];
      RankState s;
      s.rank = r;
      s.heard = p.heard;
      s.finished = p.finished;
      s.silent_s = seconds_between(p.heard ? p.last : started, now);
      s.iteration = p.iteration;
      s.activity = p.activity;
      s.activity_s = p.activity.empty() ? 0.0 : p.activity_s + (p.heard ? s.silent_s : 0.0);
      out.push_back(s);
    }
    return out;
  }

  [[noreturn]] void end_job(const std::string& msg) {
    log::write_err_all("error: " + msg);
    std::fflush(stderr);
    std::fflush(stdout);
    {
      std::lock_guard<std::mutex> lock(checks_m);
      if (before_abort) {
        try {
          before_abort(msg);
        } catch (...) {
        }
      }
      for (auto& [id, c] : checks) {
        try {
          if (c.second) c.second();
        } catch (...) {
        }
      }
    }
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }

  void fire(const std::string& msg) {
    fired = true;
    if (opts.on_timeout) {
      opts.on_timeout(msg);
      return;
    }
    end_job(msg);
  }

  std::string run_checks() {
    std::lock_guard<std::mutex> lock(checks_m);
    for (auto& [id, c] : checks) {
      std::string e;
      try {
        e = c.first ? c.first() : std::string();
      } catch (const std::exception& ex) {
        e = ex.what();
      }
      if (!e.empty()) return e;
    }
    return "";
  }

  void loop() {
    const double poll_s = std::clamp(heartbeat_s / 5, 0.02, 0.5);
    Clock::time_point next_send = Clock::now();
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(stop_m);
        if (stop_cv.wait_for(lock, std::chrono::duration<double>(poll_s), [&] { return stopping; })) break;
      }
      const auto now = Clock::now();
      if (mt) {
        if (now >= next_send) {
          send_beats(now, false);
          next_send = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(heartbeat_s));
        }
        receive_beats(now);
      }
      if (fired) continue;
      if (const std::string e = run_checks(); !e.empty()) {
        fire(fmt::format("watchdog: {}; ending the job (MPI_Abort).", e));
        continue;
      }
      std::pair<double, std::string> limit;
      {
        std::lock_guard<std::mutex> lock(m);
        limit = limit_locked();
      }
      // Without heartbeats (world of 1, or no MPI_THREAD_MULTIPLE) nobody else
      // judges this rank: no grace.
      const double grace = mt ? 2 * heartbeat_s + 0.25 * limit.first : 0.0;
      // A peer is stale after three heartbeat intervals without one, poll included.
      const double stale_s = 3 * heartbeat_s + poll_s;
      const std::string v = watchdog_verdict(states(now), rank, limit.first, grace, limit.second, stale_s);
      if (!v.empty()) fire(v);
    }
    if (mt) goodbye();
  }

  // Tells the others this rank is done (so they stop expecting heartbeats), then
  // lets go of every request; the communicator is left to MPI_Finalize.
  void goodbye() {
    send_beats(Clock::now(), true);
    const auto until = Clock::now() + std::chrono::seconds(2);
    for (auto& req : send_req) {
      while (req != MPI_REQUEST_NULL && Clock::now() < until) {
        int done = 0;
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      // A peer that stopped receiving: the buffer lives until after MPI_Finalize.
      if (req != MPI_REQUEST_NULL) MPI_Request_free(&req);
    }
    if (recv_req != MPI_REQUEST_NULL) {
      MPI_Cancel(&recv_req);
      MPI_Wait(&recv_req, MPI_STATUS_IGNORE);
    }
  }
};

Watchdog::Watchdog(int rank, int world_size, bool mpi_multithreaded)
    : impl_(std::make_unique<Impl>(rank, world_size, mpi_multithreaded)) {}

Watchdog::~Watchdog() { stop(); }

void Watchdog::start(const WatchdogOptions& options) {
  auto& m = *impl_;
  if (m.running) return;
  LLMTRAIN_CHECK(options.timeout_s > 0, "watchdog: collective_timeout_s must be > 0, got {}", options.timeout_s);
  m.opts = options;
  m.heartbeat_s = options.heartbeat_s > 0 ? options.heartbeat_s : std::clamp(options.timeout_s / 10, 0.2, 5.0);
  m.started = Clock::now();
  {
    std::lock_guard<std::mutex> lock(m.m);
    m.activity_start = m.started;
  }
  if (m.mt) {
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &m.comm));
    MPI_CHECK(MPI_Comm_set_errhandler(m.comm, MPI_ERRORS_RETURN));
    m.peers.assign(static_cast<size_t>(m.world), Peer{});
    m.send_buf.assign(static_cast<size_t>(m.world), Beat{});
    m.send_req.assign(static_cast<size_t>(m.world), MPI_REQUEST_NULL);
    m.post_receive();
  }
  m.stopping = false;
  m.fired = false;
  m.running = true;
  m.thread = std::thread([&m] { m.loop(); });
}

void Watchdog::stop() {
  auto& m = *impl_;
  if (!m.running) return;
  {
    std::lock_guard<std::mutex> lock(m.stop_m);
    m.stopping = true;
  }
  m.stop_cv.notify_all();
  m.thread.join();
  m.running = false;
}

bool Watchdog::running() const { return impl_->running; }

void Watchdog::activity(std::string what) {
  auto& m = *impl_;
  std::lock_guard<std::mutex> lock(m.m);
  m.activity = std::move(what);
  m.activity_start = Clock::now();
}

void Watchdog::iteration_begin(int64_t iteration) {
  std::lock_guard<std::mutex> lock(impl_->m);
  impl_->iteration = iteration;
}

void Watchdog::iteration_done(double seconds) {
  auto& m = *impl_;
  std::lock_guard<std::mutex> lock(m.m);
  constexpr size_t kKeep = 101;
  if (m.iteration_times.size() < kKeep) {
    m.iteration_times.push_back(seconds);
  } else {
    m.iteration_times[m.next_time] = seconds;
    m.next_time = (m.next_time + 1) % kKeep;
  }
}

double Watchdog::limit_s() const {
  std::lock_guard<std::mutex> lock(impl_->m);
  return impl_->limit_locked().first;
}

int Watchdog::add_check(std::function<std::string()> check, std::function<void()> on_abort) {
  auto& m = *impl_;
  std::lock_guard<std::mutex> lock(m.checks_m);
  const int id = m.next_check++;
  m.checks[id] = {std::move(check), std::move(on_abort)};
  return id;
}

void Watchdog::set_before_abort(std::function<void(const std::string&)> before_abort) {
  std::lock_guard<std::mutex> lock(impl_->checks_m);
  impl_->before_abort = std::move(before_abort);
}

void Watchdog::remove_check(int id) {
  std::lock_guard<std::mutex> lock(impl_->checks_m);
  impl_->checks.erase(id);
}

}  // namespace llmtrain
