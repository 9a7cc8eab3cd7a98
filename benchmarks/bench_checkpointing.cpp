// What activation checkpointing costs and saves: forward + backward of one
// micro-batch (the preset's batch_size x block_size, CPU, fp32 or under
// --dtype's autocast as the trainer runs it) of each preset with
// activation_checkpointing = none, full and selective. Per row: the median
// step time over rounds that run the three modes in turn (so a busy machine
// slows all three alike), the peak bytes LibTorch's CPU allocator holds above
// what the step started with, in the forward (with the loss) and in the
// backward (activations, gradients, temporaries; counted by the trainer's
// counting allocator), and activation_bytes(), the model's own account of the
// larger of the two.
//   build/bin/bench-checkpointing [--rounds=N] [--dtype=bfloat16] inputs/tiny_llama.cfg ...
// benchmarks/checkpointing_table.sh runs it over the tiny and small presets.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/model/activations.hpp"
#include "llmtrain/model/transformer.hpp"
#include "llmtrain/record/device_memory.hpp"
#include "llmtrain/model/precision.hpp"

using llmtrain::ActivationCheckpointing;
using llmtrain::ModelConfig;
using llmtrain::Transformer;

namespace {

// The trainer's counting CPU allocator (record/device_memory.hpp), installed
// in main before any tensor: bytes alive now and their peak.
const torch::Device kCpu(torch::kCPU);
int64_t reset_peak() {
  llmtrain::reset_allocated_peak(kCpu);
  return llmtrain::allocated_bytes(kCpu)->current;
}
int64_t peak() { return llmtrain::allocated_bytes(kCpu)->peak; }

struct Case {
  ActivationCheckpointing mode;
  Transformer model{nullptr};
  std::vector<double> ms;
  int64_t forward_peak = 0, backward_peak = 0;  // above the step's start
};

// One step as the trainer runs it: the forward and the loss under autocast
// (dtype below fp32), the backward outside it. With `start`, records the
// peaks of the forward and of the backward above what the step started with.
double step_ms(Case& c, const torch::Tensor& x, const torch::Tensor& y, torch::ScalarType dtype,
               bool measure = false) {
  c.model->zero_grad();
  const int64_t start = reset_peak();
  const auto t0 = std::chrono::steady_clock::now();
  torch::Tensor loss;
  {
    llmtrain::AutocastGuard autocast(torch::kCPU, dtype);
    loss = c.model->loss(x, y);
  }
  if (measure) c.forward_peak = peak() - start;
  reset_peak();
  loss.backward();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (measure) c.backward_peak = peak() - start;
  return ms;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void run_preset(const std::string& path, int rounds, llmtrain::ComputeDtype compute) {
  const auto dtype = llmtrain::compute_dtype(compute, torch::kCPU);
  llmtrain::Config cfg;
  cfg.load_file(path);
  cfg.validate();
  const auto base = ModelConfig::from_config(cfg, 0);
  const int64_t B = cfg.batch_size, T = base.block_size;
  auto gen = at::detail::createCPUGenerator(2);
  auto x = torch::randint(base.vocab_size, {B, T}, gen, torch::kLong);
  auto y = torch::randint(base.vocab_size, {B, T}, gen, torch::kLong);
  std::vector<Case> cases;
  for (auto mode : {ActivationCheckpointing::none, ActivationCheckpointing::full, ActivationCheckpointing::selective}) {
    auto m = base;
    m.recompute = mode;
    Case c{mode, Transformer(m), {}, 0, 0};
    c.model->init_weights(1);
    cases.push_back(std::move(c));
  }
  for (auto& c : cases) {  // warm-up, then the peaks of one step
    step_ms(c, x, y, dtype);
    step_ms(c, x, y, dtype, /*measure=*/true);
  }
  for (int r = 0; r < rounds; ++r)
    for (auto& c : cases) c.ms.push_back(step_ms(c, x, y, dtype));
  const double none_ms = median(cases[0].ms);
  const double mib = 1024.0 * 1024.0;
  std::string name = path.substr(path.find_last_of('/') + 1);
  for (auto& c : cases) {
    const auto& m = c.model->config();
    const double act = llmtrain::activation_bytes(m, compute, B, m.attention_backend);
    std::printf("| %-22s | %-9s | %4lld/%-3lld | %9.1f | %+6.1f%% | %8.1f | %8.1f | %10.1f |\n", name.c_str(),
                llmtrain::to_string(c.mode), static_cast<long long>(m.recomputed_blocks()),
                static_cast<long long>(m.n_layer), median(c.ms), 100.0 * (median(c.ms) / none_ms - 1.0),
                c.forward_peak / mib, c.backward_peak / mib, act / mib);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  llmtrain::count_cpu_allocations();
  int rounds = 10;
  auto dtype = llmtrain::ComputeDtype::float32;
  std::vector<std::string> presets;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--rounds=", 0) == 0)
      rounds = std::stoi(a.substr(9));
    else if (a.rfind("--dtype=", 0) == 0)
      dtype = llmtrain::option_from_string<llmtrain::ComputeDtype>(a.substr(8));
    else
      presets.push_back(a);
  }
  std::printf("dtype %s (autocast below float32), CPU, %d threads, median of %d steps per mode (selective: every "
              "activation_checkpointing_every-th block, as the preset sets it; default 2); peaks above the step's "
              "start\n\n",
              llmtrain::to_string(dtype), torch::get_num_threads(), rounds);
  std::printf("| %-22s | %-9s | %-8s | %-9s | %-7s | %-8s | %-8s | %-10s |\n", "preset", "mode", "recomp.", "step ms",
              "vs none", "fwd MiB", "bwd MiB", "model MiB");
  std::printf("|%s|%s|%s|%s|%s|%s|%s|%s|\n", std::string(24, '-').c_str(), std::string(11, '-').c_str(),
              std::string(10, '-').c_str(), std::string(11, '-').c_str(), std::string(9, '-').c_str(),
              std::string(10, '-').c_str(), std::string(10, '-').c_str(), std::string(12, '-').c_str());
  for (const auto& p : presets) run_preset(p, rounds, dtype);
  return 0;
}
