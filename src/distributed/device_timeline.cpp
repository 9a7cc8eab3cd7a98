// make_device_timeline: the CUDA timeline in CUDA builds (device_timeline_cuda.cpp),
// none on the CPU.
#include "llmtrain/distributed/device_timeline.hpp"

namespace llmtrain {

#ifdef LLMTRAIN_WITH_CUDA
namespace detail {
std::unique_ptr<DeviceTimeline> make_cuda_timeline(int device_index);
}
#endif

std::unique_ptr<DeviceTimeline> make_device_timeline(const torch::Device& device) {
#ifdef LLMTRAIN_WITH_CUDA
  if (device.is_cuda()) return detail::make_cuda_timeline(device.has_index() ? device.index() : 0);
#else
  (void)device;
#endif
  return nullptr;
}

}  // namespace llmtrain
