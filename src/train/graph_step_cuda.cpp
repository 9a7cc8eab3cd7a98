// CUDA builds: GraphStep's capture mode (train/graph_step.hpp). LibTorch's
// at::cuda::CUDAGraph with a private pool from graph_pool_handle(), as
// torch.cuda.graph does for PyTorch's whole-network capture.
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>

#include "llmtrain/core/error.hpp"  // defines: Error, LLMTRAIN_CHECK
#include "train/graph_step.hpp"     // defines: GraphStep::Runner

namespace llmtrain::detail {

namespace {

// Autocast's cache of cast weights off while the step runs: a cast cached
// outside the capture would be read by the graph without its cast kernel
// (torch.cuda.graph's advice: autocast(cache_enabled=False)).
class AutocastCacheOff {
 public:
  AutocastCacheOff() : prev_(at::autocast::is_autocast_cache_enabled()) { at::autocast::set_autocast_cache_enabled(false); }
  ~AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(prev_); }

 private:
  bool prev_;
};

class CudaGraphRunner final : public GraphStep::Runner {
 public:
  CudaGraphRunner(torch::Device device, int64_t warmup)
      : device_(device.index()), warmup_(warmup),
        // Capture needs a stream other than the legacy default one.
        side_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())),
        pool_(at::cuda::graph_pool_handle()) {}

  void run(const std::function<void()>& body, bool uncaptured) override {
    LLMTRAIN_CHECK(uncaptured || captured_ || steps_ < warmup_,
                   "GraphStep: the warm-up steps are done, but the step was not captured (capture() first)");
    on_side_stream([&] {
      if (uncaptured || !captured_)
        body();  // a warm-up (or uncaptured) step: an ordinary step on the side stream
      else
        replay();
    });
    ++steps_;
  }

  bool capture_due() const override { return !captured_ && steps_ >= warmup_; }

  void capture(const std::function<void()>& body) override {
    on_side_stream([&] { capture_on_side(body); });
  }

  int64_t replays() const override { return replays_; }

 private:
  // `f` on the side stream, ordered after what the current (ambient) stream
  // queued before (the batch copies, the learning rate's fill, the last
  // step's reads) and before what it queues after (the slot's copy to its
  // pending row, the next step's copies into the buffers this one read).
  template <typename F>
  void on_side_stream(F&& f) {
    c10::cuda::CUDAGuard guard(device_);
    const auto ambient = c10::cuda::getCurrentCUDAStream(device_);
    at::cuda::CUDAEvent forked;
    forked.record(ambient);
    forked.block(side_);
    {
      c10::cuda::CUDAStreamGuard on_side(side_);
      AutocastCacheOff no_cache;
      f();
    }
    at::cuda::CUDAEvent joined;
    joined.record(side_);
    joined.block(ambient);
  }

  void capture_on_side(const std::function<void()>& body) {
    // Everything before the capture is done: the warm-up steps' frees are
    // back in the allocator, no kernel of theirs overlaps the capture.
    c10::cuda::device_synchronize();
    // Thread-local mode: only this thread's unsafe calls (a host read, a
    // synchronize) break the capture; the loader's workers and the watchdog's
    // NCCL error polls go on. The autograd engine's device thread launches
    // backward onto the capturing stream, so backward is captured with it.
    graph_.capture_begin(pool_, cudaStreamCaptureModeThreadLocal);
    try {
      body();
    } catch (const std::exception& e) {
      std::string why = e.what();
      if (const auto* c = dynamic_cast<const c10::Error*>(&e)) why = c->what_without_backtrace();
      try {
        graph_.capture_end();  // leaves capture mode; the partial graph is dropped
      } catch (...) {
      }
      throw Error(fmt::format("use_cuda_graphs=True: the training step could not be captured in a CUDA graph: {}; "
                              "set use_cuda_graphs=False",
                              why));
    }
    graph_.capture_end();
    captured_ = true;  // the capture ran nothing: this step's work is the replay that follows
  }

  void replay() {
    graph_.replay();
    ++replays_;
  }

  c10::DeviceIndex device_;
  int64_t warmup_;
  c10::cuda::CUDAStream side_;
  at::cuda::MempoolId_t pool_;
  at::cuda::CUDAGraph graph_;
  bool captured_ = false;
  int64_t steps_ = 0;  // steps run before and after the capture (uncaptured ones too)
  int64_t replays_ = 0;
};

}  // namespace

std::unique_ptr<GraphStep::Runner> make_cuda_graph_runner(torch::Device device, int64_t warmup) {
  return std::make_unique<CudaGraphRunner>(device, warmup);
}

}  // namespace llmtrain::detail
