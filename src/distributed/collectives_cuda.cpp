// NcclCollectives (CUDA builds): the torch-facing layer over raw_nccl. Every
// collective runs on one communication stream of its own, ordered against the
// caller's current (compute) stream with events in both directions:
//   compute ──ev_ready──▶ comm stream: NCCL call ──ev_done──▶ compute (wait())
// so gradient traffic overlaps backward kernels and the host never blocks.
#include <mpi.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>

#include "distributed/collectives_impl.hpp"
#include "distributed/raw_nccl.hpp"
#include "distributed/timed_wait.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/distributed/device_timeline.hpp"
#include "llmtrain/distributed/runtime.hpp"
#include "llmtrain/distributed/watchdog.hpp"

namespace llmtrain {

namespace {

nccl::DType nccl_type(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat: return nccl::DType::f32;
    case torch::kBFloat16: return nccl::DType::bf16;
    case torch::kDouble: return nccl::DType::f64;
    default:
      throw Error(fmt::format("NCCL collectives: dtype {} is not supported (float32, bfloat16, float64 are)",
                              c10::toString(t.scalar_type())));
  }
}

// The compute stream's stalls on collectives: a pair of timing events around
// each wait, consecutive on one DeviceTimeline (events 2i and 2i + 1).
struct DeviceWaitLog {
  std::unique_ptr<DeviceTimeline> events;
  int64_t count = 0;
};

// `waited`: the issuing NcclCollectives' waited_s_; `log`: its DeviceWaitLog.
// The blocking calls are this wait too, so each collective counts once.
class NcclWork final : public CommWork {
 public:
  NcclWork(nccl::Event done, c10::DeviceIndex device, double* waited, DeviceWaitLog* log)
      : done_(done), device_(device), waited_(waited), log_(log) {}
  ~NcclWork() override { nccl::event_destroy(done_); }
  // Orders the caller's current stream after the collective; the host goes on
  // (the little host time it takes is what waited_seconds() sees). The events
  // on either side of the dependency time the stream's stall.
  void wait() override {
    add_wait_seconds(*waited_, [&] {
      log_->events->record();  // on the current stream, as the dependency below
      nccl::stream_wait_event(c10::cuda::getCurrentCUDAStream(device_).stream(), done_);
      log_->events->record();
      ++log_->count;
    });
  }
  bool test() override { return nccl::event_done(done_); }

 private:
  nccl::Event done_;
  c10::DeviceIndex device_;
  double* waited_;
  DeviceWaitLog* log_;
};

class NcclCollectives final : public Collectives {
 public:
  NcclCollectives(const Runtime& rt, torch::Device device)
      : watchdog_(rt.watchdog()), rank_(rt.rank()), world_(rt.world_size()), device_(device.index()),
        comm_stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device.index())) {
    c10::cuda::CUDAGuard guard(device_);
    nccl::UniqueId id{};
    if (rank_ == 0) id = nccl::make_unique_id();
    MPI_CHECK(MPI_Bcast(id.bytes, sizeof(id.bytes), MPI_BYTE, 0, MPI_COMM_WORLD));
    comm_ = std::make_unique<nccl::Comm>(id, rank_, world_);
    wait_log_.events = make_device_timeline(device);
    // NCCL has no timeout of its own: a kernel waiting for a peer that never
    // comes waits forever. The watchdog polls the communicator's asynchronous
    // error and, when it ends the job (an error, or a rank that stopped
    // arriving), aborts the communicator first.
    nccl::Comm* c = comm_.get();
    check_id_ = watchdog_.add_check([c] { return c->async_error(); }, [c] { c->abort(); });
  }
  ~NcclCollectives() override { watchdog_.remove_check(check_id_); }

  std::string name() const override { return "nccl"; }
  int64_t device_waits() const override { return wait_log_.count; }
  double device_wait_seconds(int64_t from, int64_t to) const override {
    double s = 0.0;
    for (int64_t i = std::max<int64_t>(from, 0); i < std::min(to, wait_log_.count); ++i)
      s += wait_log_.events->seconds(static_cast<int>(2 * i), static_cast<int>(2 * i + 1));
    return s;
  }
  void reset_device_waits() override {
    wait_log_.events->reset();
    wait_log_.count = 0;
  }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  void allreduce_sum(torch::Tensor& t) override { allreduce_sum_async(t)->wait(); }
  void broadcast(torch::Tensor& t, int root) override {
    check(t, "broadcast");
    enqueue({t}, [&](nccl::Stream s) { comm_->broadcast(t.data_ptr(), t.numel(), nccl_type(t), root, s); })->wait();
  }
  void reduce_scatter_sum(const torch::Tensor& in, torch::Tensor& out) override {
    reduce_scatter_sum_async(in, out)->wait();
  }
  void all_gather(const torch::Tensor& in, torch::Tensor& out) override { all_gather_async(in, out)->wait(); }

  std::unique_ptr<CommWork> allreduce_sum_async(torch::Tensor& t) override {
    check(t, "allreduce_sum");
    return enqueue({t}, [&](nccl::Stream s) { comm_->allreduce_sum(t.data_ptr(), t.numel(), nccl_type(t), s); });
  }
  std::unique_ptr<CommWork> reduce_scatter_sum_async(const torch::Tensor& in, torch::Tensor& out) override {
    check(in, "reduce_scatter_sum");
    check(out, "reduce_scatter_sum");
    LLMTRAIN_CHECK(in.numel() == out.numel() * world_ && in.scalar_type() == out.scalar_type(),
                   "reduce_scatter_sum: input has {} elements, expected world_size {} x {}", in.numel(), world_,
                   out.numel());
    return enqueue({in, out}, [&](nccl::Stream s) {
      comm_->reduce_scatter_sum(in.data_ptr(), out.data_ptr(), out.numel(), nccl_type(out), s);
    });
  }

  std::unique_ptr<CommWork> all_gather_async(const torch::Tensor& in, torch::Tensor& out) override {
    check(in, "all_gather");
    check(out, "all_gather");
    LLMTRAIN_CHECK(out.numel() == in.numel() * world_ && in.scalar_type() == out.scalar_type(),
                   "all_gather: output has {} elements, expected world_size {} x {}", out.numel(), world_,
                   in.numel());
    return enqueue({in, out}, [&](nccl::Stream s) {
      comm_->all_gather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in), s);
    });
  }

 private:
  void check(const torch::Tensor& t, const char* what) const {
    LLMTRAIN_CHECK(t.defined() && t.is_cuda() && t.is_contiguous() && t.device().index() == device_,
                   "{}: NCCL collectives need a contiguous tensor on cuda:{}", what, device_);
    nccl_type(t);
  }

  template <typename F>
  std::unique_ptr<CommWork> enqueue(std::initializer_list<torch::Tensor> tensors, F&& call) {
    ++calls_;
    c10::cuda::CUDAGuard guard(device_);
    const auto compute = c10::cuda::getCurrentCUDAStream(device_);
    // The comm stream starts after everything the compute stream has queued
    // (the gradients being produced).
    nccl::Event ready = nccl::event_create();
    nccl::event_record(ready, compute.stream());
    nccl::stream_wait_event(comm_stream_.stream(), ready);
    nccl::event_destroy(ready);  // destroying a recorded event is safe: CUDA keeps it until it completes
    call(static_cast<nccl::Stream>(comm_stream_.stream()));
    // The caching allocator must not hand these blocks out again before the
    // comm stream is done with them.
    for (const auto& t : tensors)
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), comm_stream_);
    nccl::Event done = nccl::event_create();
    nccl::event_record(done, comm_stream_.stream());
    return std::make_unique<NcclWork>(done, device_, &waited_s_, &wait_log_);
  }

  Watchdog& watchdog_;
  int check_id_ = -1;
  int rank_, world_;
  c10::DeviceIndex device_;
  c10::cuda::CUDAStream comm_stream_;
  std::unique_ptr<nccl::Comm> comm_;
  DeviceWaitLog wait_log_;
};

}  // namespace

std::unique_ptr<Collectives> make_nccl_collectives(const Runtime& rt, torch::Device device) {
  return std::make_unique<NcclCollectives>(rt, device);
}

}  // namespace llmtrain
