// GPU time of the stretches of a step. On CUDA the host only enqueues: a
// phase's kernels run after its host scope has closed, and a host clock would
// charge their time to wherever the host next waits (the end of the step, a
// .item()). A DeviceTimeline records timing-enabled CUDA events on the
// device's current (compute) stream where each phase opens and closes; the time
// between two of them is the device's time for the work queued between, plus
// any time the stream sat idle waiting for the host to queue more. They are
// read after the iteration's device synchronization (Metrics::end_iter). The
// NCCL collectives keep one too, for the pairs of events around each wait
// (Collectives::device_waits).
#pragma once
#include <memory>

#include <torch/torch.h>

namespace llmtrain {

class DeviceTimeline {
 public:
  virtual ~DeviceTimeline() = default;
  // Records an event on the device's current stream now; returns its index in
  // this iteration (events are reused from one iteration to the next).
  virtual int record() = 0;
  // Seconds from event a to event b; only once the stream has passed b.
  virtual double seconds(int a, int b) const = 0;
  // A new iteration: indices start again at 0.
  virtual void reset() = 0;
};

// A timeline for a CUDA device; null for the CPU (host clocks are the truth
// there) and in builds without CUDA.
std::unique_ptr<DeviceTimeline> make_device_timeline(const torch::Device& device);

}  // namespace llmtrain
