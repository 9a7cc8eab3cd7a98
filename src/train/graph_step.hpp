// Private: GraphStep, the training step as one CUDA graph (use_cuda_graphs=True,
// issue 47). The trainer hands it the step's body (forward and backward of every
// micro-batch, the DDP gradient all-reduce, the loss mean over ranks, the
// gradient norm, clipping and the fused AdamW, all on the sync-free path of
// issue 46); GraphStep owns what makes that body capturable:
//   - static inputs: the loader's batches are copied into fixed (accum, B, T)
//     int64 x and y tensors before each step (the graph reads their addresses);
//   - the learning rate as a 0-dim device tensor filled before each step (no
//     learning rate baked into the graph; AdamW's step count is already a
//     device tensor of the optimizer);
//   - a fixed (3) double slot the body writes (loss, gradient norm, found_inf),
//     which the trainer copies to the step's pending row after the step.
// The body must not read a value on the host, nor keep an allocation past the
// step other than in the graph's pool (the gradient buckets are allocated once,
// before; the .grad views point into them).
//
// Modes:
//   capture (CUDA): the first `warmup` calls run the body on a side stream as
//     ordinary steps (PyTorch's whole-network recipe: cuBLAS workspaces, NCCL's
//     lazy set-up and the allocator settle), the next one captures it into one
//     at::cuda::CUDAGraph with a private memory pool (thread-local capture mode:
//     the loader's and the watchdog's threads may use CUDA meanwhile) and
//     replays it; every later call is one replay(). The NCCL calls of the
//     bucket hooks run on the collectives' stream, forked from and joined back
//     to the capturing stream with events, so they are captured too.
//   plain (any device): the body is called as it is, every step. The CPU twin
//     of the captured step (tests compare it bit for bit with the normal step);
//     reached only through LLMTRAIN_TEST_GRAPH_STEP=plain, not a config key.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <torch/torch.h>

namespace llmtrain {

struct Config;

class GraphStep {
 public:
  enum class Mode { capture, plain };
  // What the body reads and writes: the same tensors every step.
  struct Buffers {
    torch::Tensor x, y;  // (accum, B, T) int64: inputs and targets of each micro-batch
    torch::Tensor lr;    // 0-dim: fp32 on CUDA (what the fused AdamW reads), double on CPU (its kernel's argument)
    torch::Tensor slot;  // (3) double: loss (mean over ranks), global gradient norm, found_inf
  };
  using Body = std::function<void(const Buffers&)>;

  GraphStep(Mode mode, torch::Device device, int64_t accum, int64_t batch, int64_t block, Body body,
            int64_t warmup = 3);
  ~GraphStep();
  GraphStep(const GraphStep&) = delete;
  GraphStep& operator=(const GraphStep&) = delete;

  // Before each step: micro-batch `micro`'s (B, T) x and y into the static
  // buffers (a device copy on the current stream), and the learning rate.
  void set_batch(int64_t micro, const torch::Tensor& x, const torch::Tensor& y);
  void set_lr(double lr);
  // Capture mode, once the warm-up steps are done: the next run() replays a
  // graph that capture() must make first. The trainer captures outside its
  // timed phases: what the capture records (the collectives' timing events
  // among them) never ran, and no phase may read it.
  bool capture_due() const;
  // Captures the body into the graph (nothing runs: the step's work is the
  // replay that follows).
  void capture();
  // One step: plain: body(); capture: a warm-up step or a replay.
  void run();
  // One step that is never captured nor replayed (profile_steps: the trace
  // shows the step's ops), on the same buffers; it counts as a warm-up step
  // before the capture.
  void run_uncaptured();
  const Buffers& buffers() const { return buf_; }

  Mode mode() const { return mode_; }
  int64_t replays() const;
  int64_t warmup_steps() const { return warmup_; }
  // What the run log's startup_info.cuda_graphs says (docs/run-log.md).
  std::string describe() const;

  // The private CUDA half (graph_step_cuda.cpp): warm-up, capture, replay.
  class Runner {
   public:
    virtual ~Runner() = default;
    virtual void run(const std::function<void()>& body, bool uncaptured) = 0;
    virtual bool capture_due() const = 0;
    virtual void capture(const std::function<void()>& body) = 0;
    virtual int64_t replays() const = 0;
  };

 private:
  Mode mode_;
  torch::Device device_;
  int64_t warmup_;
  Body body_;
  Buffers buf_;
  std::unique_ptr<Runner> runner_;  // capture mode only
};

// Start-up: use_cuda_graphs=True needs a CUDA device (the key-combination
// refusals are Config::validate's). One line naming the key and the reason.
void check_graph_step_device(const Config& cfg, torch::Device device);
// The test hook of the CPU twin: LLMTRAIN_TEST_GRAPH_STEP=plain runs the
// graph-ready step without capture on any device (other values are refused).
bool graph_step_twin_requested();

}  // namespace llmtrain
