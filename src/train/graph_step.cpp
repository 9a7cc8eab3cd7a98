#include "train/graph_step.hpp"

#include <cstdlib>

#include <fmt/format.h>

#include "llmtrain/core/config.hpp"  // defines: Config (use_cuda_graphs)
#include "llmtrain/core/error.hpp"   // defines: Error, ConfigError, LLMTRAIN_CHECK

namespace llmtrain {

#ifdef LLMTRAIN_WITH_CUDA
namespace detail {
// graph_step_cuda.cpp: warm-up on a side stream, capture, replay.
std::unique_ptr<GraphStep::Runner> make_cuda_graph_runner(torch::Device device, int64_t warmup);
}  // namespace detail
#endif

GraphStep::GraphStep(Mode mode, torch::Device device, int64_t accum, int64_t batch, int64_t block, Body body,
                     int64_t warmup)
    : mode_(mode), device_(device), warmup_(warmup), body_(std::move(body)) {
  const auto ints = torch::TensorOptions().dtype(torch::kLong).device(device);
  buf_.x = torch::zeros({accum, batch, block}, ints);
  buf_.y = torch::zeros({accum, batch, block}, ints);
  // The CPU fused AdamW reads a tensor learning rate with item() into a
  // double: a double tensor there is the host step's double to the bit. The
  // CUDA kernel reads fp32 device memory.
  buf_.lr = torch::zeros({}, torch::TensorOptions().dtype(device.is_cuda() ? torch::kFloat : torch::kDouble).device(device));
  buf_.slot = torch::zeros({3}, torch::TensorOptions().dtype(torch::kDouble).device(device));
  if (mode_ == Mode::capture) {
#ifdef LLMTRAIN_WITH_CUDA
    LLMTRAIN_CHECK(device.is_cuda(), "GraphStep: capture needs a CUDA device, got {}", device.str());
    runner_ = detail::make_cuda_graph_runner(device, warmup_);
#else
    throw ConfigError("config key 'use_cuda_graphs' = True: this build has no CUDA (built without LLMTRAIN_WITH_CUDA)");
#endif
  }
}

GraphStep::~GraphStep() = default;

void GraphStep::set_batch(int64_t micro, const torch::Tensor& x, const torch::Tensor& y) {
  const auto want = buf_.x[0].sizes();
  LLMTRAIN_CHECK(micro >= 0 && micro < buf_.x.size(0) && x.sizes() == want && y.sizes() == want,
                 "GraphStep: micro-batch {} of {} with x {} and y {}, expected (B, T) = {} each (the captured step "
                 "takes one shape)",
                 micro, buf_.x.size(0), c10::str(x.sizes()), c10::str(y.sizes()), c10::str(want));
  torch::NoGradGuard no_grad;
  buf_.x[micro].copy_(x, /*non_blocking=*/true);
  buf_.y[micro].copy_(y, /*non_blocking=*/true);
}

void GraphStep::set_lr(double lr) { buf_.lr.fill_(lr); }  // a fill kernel, no host wait

void GraphStep::run() {
  if (mode_ == Mode::plain) return body_(buf_);
  runner_->run([this] { body_(buf_); }, /*uncaptured=*/false);
}

bool GraphStep::capture_due() const { return runner_ && runner_->capture_due(); }

void GraphStep::capture() {
  LLMTRAIN_CHECK(capture_due(), "GraphStep::capture: not due (plain mode, warm-up steps left, or captured already)");
  runner_->capture([this] { body_(buf_); });
}

void GraphStep::run_uncaptured() {
  if (mode_ == Mode::plain) return body_(buf_);
  runner_->run([this] { body_(buf_); }, /*uncaptured=*/true);
}

int64_t GraphStep::replays() const { return runner_ ? runner_->replays() : 0; }

std::string GraphStep::describe() const {
  if (mode_ == Mode::plain)
    return "plain: the graph-ready step called without capture (LLMTRAIN_TEST_GRAPH_STEP=plain, the CPU twin)";
  return fmt::format("capture: {} warm-up steps on a side stream, then the whole step (forward, backward, gradient "
                     "all-reduce, loss mean, clipping, AdamW) replayed as one CUDA graph; a replay is timed as a "
                     "whole: forward_backward_ms holds the step, communication_ms and optimizer_ms are 0 on "
                     "replayed steps, data_ms is the copy into the static batch buffers",
                     warmup_);
}

void check_graph_step_device(const Config& cfg, torch::Device device) {
  if (!cfg.use_cuda_graphs || device.is_cuda()) return;
  throw ConfigError(fmt::format("config key 'use_cuda_graphs' = True captures the training step in a CUDA graph: it "
                                "needs a CUDA device, but this run's device is {}; set use_cuda_graphs=False",
                                device.str()));
}

bool graph_step_twin_requested() {
  const char* v = std::getenv("LLMTRAIN_TEST_GRAPH_STEP");
  if (!v || !*v) return false;
  if (std::string(v) == "plain") return true;
  throw ConfigError(fmt::format("environment variable LLMTRAIN_TEST_GRAPH_STEP='{}': expected 'plain' (the CPU "
                                "twin of the captured step, for tests) or unset",
                                v));
}

}  // namespace llmtrain
