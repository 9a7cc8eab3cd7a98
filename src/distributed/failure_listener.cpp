#include "distributed/failure_listener.hpp"

#include <chrono>
#include <vector>

#include "llmtrain/core/error.hpp"
#include "llmtrain/distributed/run_observer.hpp"
#include "llmtrain/distributed/runtime.hpp"

namespace llmtrain {

namespace {
constexpr int kTagFailure = 1, kTagAck = 2;
}  // namespace

FailureListener::FailureListener(int rank) : rank_(rank) {
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  int provided = 0;
  MPI_CHECK(MPI_Query_thread(&provided));
  // The listener calls MPI while the training thread may sit in a collective.
  if (rank_ == 0 && provided >= MPI_THREAD_MULTIPLE) thread_ = std::thread([this] { loop(); });
}

FailureListener::~FailureListener() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void FailureListener::set_observer(RunObserver* observer) {
  std::lock_guard<std::mutex> lock(mu_);
  observer_ = observer;
}

void FailureListener::call_failure(int rank, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!observer_) return;
  try {
    observer_->on_failure(rank, message);
  } catch (...) {
    // Recording the failure must not add one: the run ends anyway.
  }
}

void FailureListener::report(const std::string& message, double wait_s) {
  if (rank_ == 0) {
    call_failure(0, message);
    return;
  }
  int size = 0;
  MPI_Comm_size(comm_, &size);
  if (size < 2) return;
  MPI_Request send = MPI_REQUEST_NULL, recv = MPI_REQUEST_NULL;
  char ack = 0;
  if (MPI_Isend(message.data(), static_cast<int>(message.size()), MPI_CHAR, 0, kTagFailure, comm_, &send) !=
      MPI_SUCCESS)
    return;
  MPI_Irecv(&ack, 1, MPI_CHAR, 0, kTagAck, comm_, &recv);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  int done = 0;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    MPI_Test(&recv, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Unmatched requests are left to MPI_Abort, which follows.
}

void FailureListener::loop() {
  bool signal_seen = false;
  while (!stop_.load()) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kTagFailure, comm_, &flag, &st) == MPI_SUCCESS && flag) {
      int n = 0;
      MPI_Get_count(&st, MPI_CHAR, &n);
      std::vector<char> buf(static_cast<size_t>(std::max(n, 0)));
      MPI_Recv(buf.data(), n, MPI_CHAR, st.MPI_SOURCE, kTagFailure, comm_, MPI_STATUS_IGNORE);
      call_failure(st.MPI_SOURCE, std::string(buf.begin(), buf.end()));
      const char ack = 1;
      MPI_Send(&ack, 1, MPI_CHAR, st.MPI_SOURCE, kTagAck, comm_);
    }
    const int sig = Runtime::stop_signal();
    if (sig && !signal_seen) {
      signal_seen = true;
      std::lock_guard<std::mutex> lock(mu_);
      if (observer_) {
        try {
          observer_->on_signal(sig);
        } catch (...) {
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace llmtrain
