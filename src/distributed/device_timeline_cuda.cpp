// CUDA builds: DeviceTimeline over timing-enabled events on the current stream.
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>

#include <deque>

#include "llmtrain/core/error.hpp"
#include "llmtrain/distributed/device_timeline.hpp"

namespace llmtrain::detail {

namespace {

class CudaTimeline final : public DeviceTimeline {
 public:
  explicit CudaTimeline(int device_index) : device_(static_cast<c10::DeviceIndex>(device_index)) {}

  int record() override {
    if (used_ == events_.size()) events_.emplace_back(cudaEventDefault);  // timing on
    events_[used_].record(c10::cuda::getCurrentCUDAStream(device_));
    return static_cast<int>(used_++);
  }

  double seconds(int a, int b) const override {
    const auto n = static_cast<int>(used_);
    if (a < 0 || b < 0 || a >= n || b >= n)
      throw Error(fmt::format("DeviceTimeline: events {} and {} asked for, {} recorded this iteration", a, b, n));
    // elapsed_time needs both events done: the caller has synchronized.
    return static_cast<double>(events_[a].elapsed_time(events_[b])) / 1e3;
  }

  void reset() override { used_ = 0; }

 private:
  c10::DeviceIndex device_;
  std::deque<c10::cuda::CUDAEvent> events_;  // deque: elements never move (CUDAEvent is move-only)
  size_t used_ = 0;
};

}  // namespace

std::unique_ptr<DeviceTimeline> make_cuda_timeline(int device_index) {
  return std::make_unique<CudaTimeline>(device_index);
}

}  // namespace llmtrain::detail
