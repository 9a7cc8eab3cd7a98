// GraphStep (use_cuda_graphs=True, train/graph_step.hpp) on a CPU: the plain
// mode's buffers and calls, and the refusals (a device that is not CUDA, a
// batch of another shape, the test hook's values). The capture itself needs a
// GPU (tests/gpu: gpu_cuda_graphs); its CPU twin against the normal step is
// e2e_graph_twin.
#include <cstdlib>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "llmtrain/core/config.hpp"  // defines: Config (use_cuda_graphs)
#include "llmtrain/core/error.hpp"   // defines: Error, ConfigError
#include "train/graph_step.hpp"      // defines: GraphStep, check_graph_step_device, graph_step_twin_requested

namespace llmtrain {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(GraphStep, PlainModeCallsTheBodyOnTheStaticBuffers) {
  const torch::Device cpu(torch::kCPU);
  int calls = 0;
  std::vector<const void*> seen;  // the buffers' addresses each call: the same every step
  GraphStep g(GraphStep::Mode::plain, cpu, /*accum=*/2, /*batch=*/3, /*block=*/5,
              [&](const GraphStep::Buffers& b) {
                ++calls;
                seen.push_back(b.x.data_ptr());
                b.slot.copy_(torch::stack({b.x.sum().to(torch::kDouble), b.y.sum().to(torch::kDouble), b.lr}));
              });
  const auto& b = g.buffers();
  EXPECT_EQ(b.x.sizes(), torch::IntArrayRef({2, 3, 5}));
  EXPECT_EQ(b.y.sizes(), torch::IntArrayRef({2, 3, 5}));
  EXPECT_EQ(b.x.scalar_type(), torch::kLong);
  // The CPU fused AdamW reads a tensor learning rate into a double: the buffer is one.
  EXPECT_EQ(b.lr.scalar_type(), torch::kDouble);
  EXPECT_EQ(b.lr.dim(), 0);
  EXPECT_EQ(b.slot.sizes(), torch::IntArrayRef({3}));
  for (int step = 0; step < 3; ++step) {
    const auto x0 = torch::arange(15, torch::kLong).reshape({3, 5}) + step;
    const auto x1 = x0 * 2;
    g.set_batch(0, x0, x0 + 1);
    g.set_batch(1, x1, x1 + 1);
    const double lr = 3e-4 * (step + 1) / 7.0;  // not exact in fp32
    g.set_lr(lr);
    EXPECT_FALSE(g.capture_due());
    g.run();
    EXPECT_EQ(b.slot[0].item<double>(), (x0.sum() + x1.sum()).item<double>());
    EXPECT_EQ(b.slot[1].item<double>(), (x0.sum() + x1.sum()).item<double>() + 30);
    EXPECT_EQ(b.slot[2].item<double>(), lr);  // the host's double, to the bit
  }
  g.run_uncaptured();
  EXPECT_EQ(calls, 4);
  for (const void* p : seen) EXPECT_EQ(p, seen.front());
  EXPECT_EQ(g.replays(), 0);
  EXPECT_NE(g.describe().find("plain"), std::string::npos);
}

TEST(GraphStep, ABatchOfAnotherShapeIsRefused) {
  GraphStep g(GraphStep::Mode::plain, torch::Device(torch::kCPU), 2, 3, 5, [](const GraphStep::Buffers&) {});
  const auto ok = torch::zeros({3, 5}, torch::kLong);
  const std::string e = error_of([&] { g.set_batch(0, torch::zeros({3, 4}, torch::kLong), ok); });
  EXPECT_NE(e.find("micro-batch 0"), std::string::npos) << e;
  EXPECT_NE(e.find("[3, 4]"), std::string::npos) << e;
  EXPECT_NE(e.find("one shape"), std::string::npos) << e;
  EXPECT_FALSE(error_of([&] { g.set_batch(2, ok, ok); }).empty());  // accum is 2: micro-batches 0 and 1
}

TEST(GraphStep, CaptureNeedsACudaDevice) {
  EXPECT_FALSE(error_of([] {
                 GraphStep g(GraphStep::Mode::capture, torch::Device(torch::kCPU), 1, 1, 4,
                             [](const GraphStep::Buffers&) {});
               }).empty());
  Config c;
  c.use_cuda_graphs = true;
  const std::string e = error_of([&] { check_graph_step_device(c, torch::Device(torch::kCPU)); });
  EXPECT_NE(e.find("config key 'use_cuda_graphs' = True"), std::string::npos) << e;
  EXPECT_NE(e.find("needs a CUDA device"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  c.use_cuda_graphs = false;
  EXPECT_NO_THROW(check_graph_step_device(c, torch::Device(torch::kCPU)));
}

TEST(GraphStep, TheTwinIsReachedOnlyThroughItsTestHook) {
  unsetenv("LLMTRAIN_TEST_GRAPH_STEP");
  EXPECT_FALSE(graph_step_twin_requested());
  setenv("LLMTRAIN_TEST_GRAPH_STEP", "plain", 1);
  EXPECT_TRUE(graph_step_twin_requested());
  setenv("LLMTRAIN_TEST_GRAPH_STEP", "capture", 1);
  const std::string e = error_of([] { graph_step_twin_requested(); });
  EXPECT_NE(e.find("LLMTRAIN_TEST_GRAPH_STEP='capture'"), std::string::npos) << e;
  unsetenv("LLMTRAIN_TEST_GRAPH_STEP");
}

}  // namespace
}  // namespace llmtrain
