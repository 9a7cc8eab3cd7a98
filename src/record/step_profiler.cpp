// StepProfiler (record/step_profiler.hpp): Kineto through LibTorch's C++
// profiler API (torch/csrc/autograd/profiler_kineto.h), as torch.profiler
// drives it from Python.
#include "llmtrain/record/step_profiler.hpp"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include <filesystem>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "llmtrain/core/config.hpp"  // defines: Config (profile_steps, out_dir)
#include "llmtrain/core/error.hpp"   // defines: Error
#include "llmtrain/core/log.hpp"     // defines: log::info

namespace llmtrain {

// Named, not anonymous: a unity build puts other sources' helpers in this translation unit.
namespace step_profiler_detail {

namespace prof = torch::profiler::impl;

// Shapes (for the op counts by shape and the cost check) and memory events;
// no Python stacks in a C++ program. On CUDA the runtime's synchronizations
// are their own events (enable_cuda_sync_events), so host waits show.
prof::ProfilerConfig profiler_config(bool cuda) {
  prof::ExperimentalConfig experimental;
  experimental.enable_cuda_sync_events = cuda;
  return prof::ProfilerConfig(prof::ProfilerState::KINETO, /*report_input_shapes=*/true, /*profile_memory=*/true,
                              /*with_stack=*/false, /*with_flops=*/false, /*with_modules=*/false, experimental);
}

std::set<prof::ActivityType> activities(bool cuda) {
  std::set<prof::ActivityType> a = {prof::ActivityType::CPU};
  if (cuda) a.insert(prof::ActivityType::CUDA);
  return a;
}

}  // namespace step_profiler_detail

ProfileSteps parse_profile_steps(const std::string& text) {
  if (text.empty()) return {};
  static const std::regex form(R"(\s*(\d+)\s*(?:-\s*(\d+))?\s*)");
  std::smatch m;
  LLMTRAIN_CHECK(std::regex_match(text, m, form),
                 "profile_steps: expected an iteration N or a range N-M (e.g. 5 or 5-6), got '{}'", text);
  ProfileSteps s;
  s.first = std::stoll(m[1].str());
  s.last = m[2].matched ? std::stoll(m[2].str()) : s.first;
  LLMTRAIN_CHECK(s.last >= s.first, "profile_steps: the range {} ends before it starts (N-M with M >= N)", text);
  return s;
}

StepProfiler::StepProfiler(const Config& cfg, int rank, torch::Device device)
    : StepProfiler(cfg.profile_steps, rank, cfg.out_dir, device) {}

StepProfiler::StepProfiler(const std::string& profile_steps, int rank, const std::string& out_dir,
                           torch::Device device)
    : steps_(parse_profile_steps(profile_steps)), cuda_(device.is_cuda()) {
  if (steps_.empty()) return;
  const std::filesystem::path dir = std::filesystem::path(out_dir) / "profile";
  std::filesystem::create_directories(dir);
  path_ = (dir / fmt::format("rank{}_steps{}-{}.pt.trace.json", rank, steps_.first, steps_.last)).string();
  // Kineto's set-up (CUPTI on a GPU) before the loop, not inside the first traced step.
  torch::autograd::profiler::prepareProfiler(step_profiler_detail::profiler_config(cuda_),
                                            step_profiler_detail::activities(cuda_));
}

StepProfiler::~StepProfiler() {
  try {
    stop_and_save();
  } catch (const std::exception& e) {
    log::warn_all("profile_steps: the trace could not be saved to {}: {}", path_, e.what());
  }
}

void StepProfiler::before_step(int64_t iter) {
  if (!steps_.contains(iter)) return;
  if (!running_) {
    torch::autograd::profiler::enableProfiler(step_profiler_detail::profiler_config(cuda_),
                                               step_profiler_detail::activities(cuda_));
    running_ = true;
  }
  // One span per iteration, the name torch.profiler's schedule gives its steps:
  // the report and TensorBoard's step view split the trace by it.
  step_ = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  if (step_->isActive()) step_->before(fmt::format("ProfilerStep#{}", iter));
}

void StepProfiler::after_step(int64_t iter) {
  if (!running_ || !steps_.contains(iter)) return;
  if (cuda_) torch::cuda::synchronize();  // the step's kernels end inside the trace
  step_.reset();                          // ends the ProfilerStep span
  if (iter >= steps_.last) stop_and_save();
}

void StepProfiler::stop_and_save() {
  if (!running_) return;
  step_.reset();
  running_ = false;
  auto result = torch::autograd::profiler::disableProfiler();
  result->save(path_);
  log::info("profile_steps: trace of iterations {}-{} in {} (rank 0's; every rank writes its own)", steps_.first,
            steps_.last, path_);
}

}  // namespace llmtrain
