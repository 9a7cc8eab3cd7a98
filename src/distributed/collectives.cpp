#include "llmtrain/distributed/collectives.hpp"

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <torch/torch.h>
#include <c10/util/BFloat16.h>

#include "distributed/collectives_impl.hpp"
#include "distributed/timed_wait.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/distributed/runtime.hpp"

namespace llmtrain {

namespace {
class DoneWork final : public CommWork {
 public:
  void wait() override {}
  bool test() override { return true; }
};
}  // namespace

std::unique_ptr<CommWork> Collectives::allreduce_sum_async(torch::Tensor& t) {
  allreduce_sum(t);
  return std::make_unique<DoneWork>();
}

std::unique_ptr<CommWork> Collectives::reduce_scatter_sum_async(const torch::Tensor& in, torch::Tensor& out) {
  reduce_scatter_sum(in, out);
  return std::make_unique<DoneWork>();
}

std::unique_ptr<CommWork> Collectives::all_gather_async(const torch::Tensor& in, torch::Tensor& out) {
  all_gather(in, out);
  return std::make_unique<DoneWork>();
}

// ---- MPI ----------------------------------------------------------------------

namespace {

// bf16 has no MPI datatype: it travels as a 2-byte opaque type and is summed by a
// user-defined op that widens each pair to fp32, adds and rounds back to bf16
// (round-to-nearest-even, as c10::BFloat16 does). Every reduction step rounds
// once, like NCCL's bf16 sum; callers wanting an fp32 sum reduce an fp32 copy.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const c10::BFloat16*>(in);
  auto* b = static_cast<c10::BFloat16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = c10::BFloat16(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

// `waited`: the issuing MpiCollectives' waited_s_, which wait() adds to.
class MpiWork final : public CommWork {
 public:
  MpiWork(MPI_Request req, double* waited) : req_(req), waited_(waited) {}
  ~MpiWork() override {
    // A request must not be dropped while MPI still writes the buffer.
    if (req_ != MPI_REQUEST_NULL) MPI_Wait(&req_, MPI_STATUS_IGNORE);
  }
  void wait() override {
    if (req_ != MPI_REQUEST_NULL) add_wait_seconds(*waited_, [&] { MPI_CHECK(MPI_Wait(&req_, MPI_STATUS_IGNORE)); });
  }
  bool test() override {
    if (req_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    MPI_CHECK(MPI_Test(&req_, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }

 private:
  MPI_Request req_;
  double* waited_;
};

// One collective handed to the communication thread.
struct CommJob {
  std::function<void()> run;
  std::mutex m;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  std::exception_ptr error;
};

// A thread that runs blocking collectives in the order they were queued (the
// same on every rank, since every rank queues in the same order) on a
// communicator of its own, so they never interleave with the caller's blocking
// calls. The blocking MPI_Allreduce / MPI_Reduce_scatter_block are Open MPI's
// tuned algorithms, faster than libnbc's MPI_Iallreduce schedules, and they
// progress by themselves while the caller computes (no MPI_Test polling).
class CommThread {
 public:
  CommThread() : thread_([this] { loop(); }) {}
  ~CommThread() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  std::shared_ptr<CommJob> submit(std::function<void()> run) {
    auto job = std::make_shared<CommJob>();
    job->run = std::move(run);
    {
      std::lock_guard<std::mutex> lock(m_);
      queue_.push_back(job);
    }
    cv_.notify_one();
    return job;
  }

 private:
  void loop() {
    for (;;) {
      std::shared_ptr<CommJob> job;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and nothing left
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        job->run();
      } catch (...) {
        job->error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(job->m);
        job->done = true;
      }
      job->cv.notify_all();
    }
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<CommJob>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

class ThreadWork final : public CommWork {
 public:
  ThreadWork(std::shared_ptr<CommJob> job, double* waited) : job_(std::move(job)), waited_(waited) {}
  ~ThreadWork() override {
    // The thread may still be writing the buffer.
    std::unique_lock<std::mutex> lock(job_->m);
    job_->cv.wait(lock, [this] { return job_->done.load(); });
  }
  void wait() override {
    add_wait_seconds(*waited_, [this] {
      std::unique_lock<std::mutex> lock(job_->m);
      job_->cv.wait(lock, [this] { return job_->done.load(); });
    });
    if (job_->error) std::rethrow_exception(std::exchange(job_->error, nullptr));
  }
  bool test() override { return job_->done.load(); }

 private:
  std::shared_ptr<CommJob> job_;
  double* waited_;  // the issuing MpiCollectives' waited_s_
};

class MpiCollectives final : public Collectives {
 public:
  explicit MpiCollectives(MpiAsync mode) {
    int provided = MPI_THREAD_SINGLE;
    MPI_CHECK(MPI_Query_thread(&provided));
    // Without MPI_THREAD_MULTIPLE a second thread must not call MPI.
    mode_ = mode == MpiAsync::comm_thread && provided < MPI_THREAD_MULTIPLE ? MpiAsync::nonblocking : mode;
    if (mode_ == MpiAsync::comm_thread) {
      MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &thread_comm_));
      MPI_CHECK(MPI_Comm_set_errhandler(thread_comm_, MPI_ERRORS_RETURN));
      thread_ = std::make_unique<CommThread>();
    }
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &world_));
    MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &bf16_type_));
    MPI_CHECK(MPI_Type_commit(&bf16_type_));
    MPI_CHECK(MPI_Op_create(&bf16_sum, /*commute=*/1, &bf16_sum_op_));
  }
  ~MpiCollectives() override {
    int fin = 0;
    MPI_Finalized(&fin);
    thread_.reset();  // drains the queue first
    if (fin) return;
    if (thread_comm_ != MPI_COMM_NULL) MPI_Comm_free(&thread_comm_);
    MPI_Op_free(&bf16_sum_op_);
    MPI_Type_free(&bf16_type_);
    MPI_Comm_free(&comm_);
  }

  std::string name() const override { return "mpi"; }
  MpiAsync async_mode() const { return mode_; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  void allreduce_sum(torch::Tensor& t) override {
    check(t, "allreduce_sum");
    ++calls_;
    add_wait_seconds(waited_s_, [&] {
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), count(t), type(t), sum_op(t), comm_));
    });
  }

  void broadcast(torch::Tensor& t, int root) override {
    check(t, "broadcast");
    ++calls_;
    add_wait_seconds(waited_s_, [&] { MPI_CHECK(MPI_Bcast(t.data_ptr(), count(t), type(t), root, comm_)); });
  }

  void reduce_scatter_sum(const torch::Tensor& in, torch::Tensor& out) override {
    check_rs(in, out);
    ++calls_;
    add_wait_seconds(waited_s_, [&] {
      MPI_CHECK(MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), count(out), type(out), sum_op(out), comm_));
    });
  }

  void all_gather(const torch::Tensor& in, torch::Tensor& out) override {
    check_ag(in, out);
    ++calls_;
    add_wait_seconds(waited_s_, [&] {
      MPI_CHECK(MPI_Allgather(ag_send(in, out), count(in), type(in), out.data_ptr(), count(in), type(in), comm_));
    });
  }

  std::unique_ptr<CommWork> allreduce_sum_async(torch::Tensor& t) override {
    check(t, "allreduce_sum_async");
    ++calls_;
    if (use_thread(t.nbytes())) {
      void* buf = t.data_ptr();
      const int n = count(t);
      MPI_Datatype ty = type(t);
      MPI_Op op = sum_op(t);
      MPI_Comm comm = thread_comm_;
      return std::make_unique<ThreadWork>(thread_->submit(
          [=] { MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, n, ty, op, comm)); }), &waited_s_);
    }
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), count(t), type(t), sum_op(t), comm_, &req));
    return std::make_unique<MpiWork>(req, &waited_s_);
  }

  std::unique_ptr<CommWork> reduce_scatter_sum_async(const torch::Tensor& in, torch::Tensor& out) override {
    check_rs(in, out);
    ++calls_;
    if (use_thread(in.nbytes())) {
      const void* src = in.data_ptr();
      void* dst = out.data_ptr();
      const int n = count(out);
      MPI_Datatype ty = type(out);
      MPI_Op op = sum_op(out);
      MPI_Comm comm = thread_comm_;
      return std::make_unique<ThreadWork>(thread_->submit(
          [=] { MPI_CHECK(MPI_Reduce_scatter_block(src, dst, n, ty, op, comm)); }), &waited_s_);
    }
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), count(out), type(out), sum_op(out), comm_,
                                        &req));
    return std::make_unique<MpiWork>(req, &waited_s_);
  }

  std::unique_ptr<CommWork> all_gather_async(const torch::Tensor& in, torch::Tensor& out) override {
    check_ag(in, out);
    ++calls_;
    if (use_thread(out.nbytes())) {
      const void* src = ag_send(in, out);
      void* dst = out.data_ptr();
      const int n = count(in);
      MPI_Datatype ty = type(in);
      MPI_Comm comm = thread_comm_;
      return std::make_unique<ThreadWork>(thread_->submit(
          [=] { MPI_CHECK(MPI_Allgather(src, n, ty, dst, n, ty, comm)); }), &waited_s_);
    }
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Iallgather(ag_send(in, out), count(in), type(in), out.data_ptr(), count(in), type(in), comm_, &req));
    return std::make_unique<MpiWork>(req, &waited_s_);
  }

 private:
  // Above 32 MiB Open MPI's temporary buffers allocated on the communication
  // thread come from a glibc per-thread arena, which cannot hold them (its
  // heaps are at most 64 MiB) and mmaps fresh, page-faulting memory on every
  // call: 0.4-0.6 of the blocking call's bandwidth at 64-256 MiB, where the
  // nonblocking collectives (allocating on the caller's thread, main arena)
  // do better. Every rank decides by the same size, so the order of calls on
  // each communicator is the same everywhere. (MALLOC_ARENA_MAX=1 would
  // remove the cause, process-wide: docs/scaling.md.)
  static constexpr size_t kThreadMaxBytes = size_t{32} << 20;
  bool use_thread(size_t bytes) const { return mode_ == MpiAsync::comm_thread && bytes <= kThreadMaxBytes; }

  void check(const torch::Tensor& t, const char* what) const {
    LLMTRAIN_CHECK(t.defined() && t.device().is_cpu() && t.is_contiguous(),
                   "{}: MPI collectives need a defined, contiguous CPU tensor (got {} {})", what,
                   t.defined() ? t.device().str() : "undefined", t.defined() && !t.is_contiguous() ? "non-contiguous" : "");
    LLMTRAIN_CHECK(t.numel() <= std::numeric_limits<int>::max(),
                   "{}: {} elements exceed MPI's int count; split the buffer", what, t.numel());
    type(t);
  }
  void check_rs(const torch::Tensor& in, const torch::Tensor& out) const {
    check(in, "reduce_scatter_sum");
    check(out, "reduce_scatter_sum");
    LLMTRAIN_CHECK(in.numel() == out.numel() * world_ && in.scalar_type() == out.scalar_type(),
                   "reduce_scatter_sum: input has {} elements of {}, expected world_size {} x {} elements of {}",
                   in.numel(), c10::toString(in.scalar_type()), world_, out.numel(),
                   c10::toString(out.scalar_type()));
  }
  void check_ag(const torch::Tensor& in, const torch::Tensor& out) const {
    check(in, "all_gather");
    check(out, "all_gather");
    LLMTRAIN_CHECK(out.numel() == in.numel() * world_ && in.scalar_type() == out.scalar_type(),
                   "all_gather: output has {} elements of {}, expected world_size {} x {} elements of {}",
                   out.numel(), c10::toString(out.scalar_type()), world_, in.numel(),
                   c10::toString(in.scalar_type()));
  }
  // The input already sitting at this rank's place in the output (ZeRO-1
  // updates its shard in place) is MPI_IN_PLACE.
  const void* ag_send(const torch::Tensor& in, const torch::Tensor& out) const {
    const auto* mine = static_cast<const char*>(out.data_ptr()) + rank_ * in.nbytes();
    return in.data_ptr() == mine ? MPI_IN_PLACE : in.data_ptr();
  }
  static int count(const torch::Tensor& t) { return static_cast<int>(t.numel()); }
  MPI_Datatype type(const torch::Tensor& t) const {
    switch (t.scalar_type()) {
      case torch::kFloat: return MPI_FLOAT;
      case torch::kDouble: return MPI_DOUBLE;
      case torch::kBFloat16: return bf16_type_;
      case torch::kLong: return MPI_INT64_T;
      case torch::kInt: return MPI_INT32_T;
      case torch::kByte: return MPI_UINT8_T;
      default:
        throw Error(fmt::format("MPI collectives: dtype {} is not supported (float32, float64, bfloat16, int32, "
                                "int64, uint8 are)", c10::toString(t.scalar_type())));
    }
  }
  MPI_Op sum_op(const torch::Tensor& t) const { return t.scalar_type() == torch::kBFloat16 ? bf16_sum_op_ : MPI_SUM; }

  MPI_Comm comm_ = MPI_COMM_NULL;
  MpiAsync mode_ = MpiAsync::nonblocking;
  MPI_Comm thread_comm_ = MPI_COMM_NULL;  // the communication thread's own
  std::unique_ptr<CommThread> thread_;
  int rank_ = 0, world_ = 1;
  MPI_Datatype bf16_type_ = MPI_DATATYPE_NULL;
  MPI_Op bf16_sum_op_ = MPI_OP_NULL;
};

}  // namespace

std::unique_ptr<Collectives> make_mpi_collectives(MpiAsync mode) { return std::make_unique<MpiCollectives>(mode); }

std::unique_ptr<Collectives> make_collectives(const Runtime& rt, torch::Device device, MpiAsync mpi_async) {
  if (device.is_cuda()) {
#ifdef LLMTRAIN_WITH_CUDA
    return make_nccl_collectives(rt, device);
#else
    throw NotBuiltError("NCCL collectives were asked for a CUDA device, but this llmtrain was built without CUDA");
#endif
  }
  return make_mpi_collectives(mpi_async);
}

}  // namespace llmtrain
