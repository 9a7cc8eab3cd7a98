// StepProfiler: profile_steps=N or N-M, the LibTorch (Kineto) profiler's trace of
// those iterations as Chrome-trace JSON, one file per rank, under
// out_dir/profile/ (TensorBoard's profiler plugin and Perfetto open it;
// llmtrain-report --profile counts its ops, record/profile_report.hpp).
// User doc: docs/performance.md ("A trace of any step").
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <torch/types.h>

namespace at {
class RecordFunction;
}

namespace llmtrain {

struct Config;

// The iterations of profile_steps, inclusive ("" = none: first > last).
struct ProfileSteps {
  int64_t first = 0, last = -1;
  bool empty() const { return first > last; }
  bool contains(int64_t iter) const { return iter >= first && iter <= last; }
};
// "5" -> [5, 5], "5-6" -> [5, 6], "" -> none; anything else throws an Error
// naming the key and the form expected.
ProfileSteps parse_profile_steps(const std::string& text);

class StepProfiler {
 public:
  // From the config's profile_steps and out_dir; `device` CUDA adds the
  // kernels, runtime calls and device memory to the CPU ops.
  StepProfiler(const Config& cfg, int rank, torch::Device device);
  StepProfiler(const std::string& profile_steps, int rank, const std::string& out_dir, torch::Device device);
  // A trace still running (the run ended inside the range) is saved.
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Around one iteration of the loop: the first of the range starts the
  // profiler, each iteration in it is one `ProfilerStep#<iter>` span (the name
  // torch.profiler gives its steps), the last saves the file.
  void before_step(int64_t iter);
  void after_step(int64_t iter);

  bool enabled() const { return !steps_.empty(); }
  // out_dir/profile/rank<R>_steps<N>-<M>.pt.trace.json (TensorBoard's plugin reads
  // *.pt.trace.json).
  const std::string& path() const { return path_; }

 private:
  void stop_and_save();
  ProfileSteps steps_;
  std::string path_;
  bool cuda_ = false;
  bool running_ = false;
  std::unique_ptr<at::RecordFunction> step_;  // the open ProfilerStep#<iter> span
};

}  // namespace llmtrain
