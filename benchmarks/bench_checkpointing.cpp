// What activation checkpointing costs and saves: forward + backward of one
// micro-batch (the preset's batch_size x block_size, fp32, CPU) of each preset
// with activation_checkpointing = none, full and selective. Per row: the median
// step time over rounds that run the three modes in turn (so a busy machine
// slows all three alike), the peak bytes LibTorch's CPU allocator holds above
// what the step started with (activations, gradients, temporaries; counted by a
// wrapper around the CPU allocator), and activation_bytes(), the model's own
// account of what backward keeps.
//   build/bin/bench-checkpointing [--rounds=N] inputs/tiny_llama.cfg ...
// benchmarks/checkpointing_table.sh runs it over the tiny and small presets.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <c10/core/CPUAllocator.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/model/activations.hpp"
#include "llmtrain/model/transformer.hpp"

using llmtrain::ActivationCheckpointing;
using llmtrain::ModelConfig;
using llmtrain::Transformer;

namespace {

// Passes every CPU allocation to the allocator it replaces and counts the
// bytes alive and their peak.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}
  c10::DataPtr allocate(size_t n) override {
    auto* ctx = new Held{inner_->allocate(n), n, this};
    const int64_t now = live_ += static_cast<int64_t>(n);
    int64_t p = peak_.load();
    while (now > p && !peak_.compare_exchange_weak(p, now)) {
    }
    return {ctx->data.get(), ctx, &CountingAllocator::release, ctx->data.device()};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  // Starts a measurement: the peak becomes what is alive now.
  int64_t reset_peak() {
    peak_ = live_.load();
    return peak_;
  }
  int64_t peak() const { return peak_; }

 private:
  struct Held {
    c10::DataPtr data;
    size_t n;
    CountingAllocator* owner;
  };
  static void release(void* p) {
    auto* h = static_cast<Held*>(p);
    h->owner->live_ -= static_cast<int64_t>(h->n);
    delete h;  // frees through the inner allocator's DataPtr
  }
  c10::Allocator* inner_;
  std::atomic<int64_t> live_{0}, peak_{0};
};

CountingAllocator* counting() {
  static auto* a = new CountingAllocator(c10::GetCPUAllocator());  // never destroyed: tensors outlive main
  return a;
}

struct Case {
  ActivationCheckpointing mode;
  Transformer model{nullptr};
  std::vector<double> ms;
  int64_t peak_bytes = 0;
};

double step_ms(Case& c, const torch::Tensor& x, const torch::Tensor& y) {
  c.model->zero_grad();
  const auto t0 = std::chrono::steady_clock::now();
  c.model->loss(x, y).backward();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void run_preset(const std::string& path, int rounds) {
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
    m.checkpointing = mode;
    Case c{mode, Transformer(m), {}, 0};
    c.model->init_weights(1);
    cases.push_back(std::move(c));
  }
  for (auto& c : cases) {  // warm-up, then the peak of one step
    step_ms(c, x, y);
    c.model->zero_grad();
    const int64_t start = counting()->reset_peak();
    step_ms(c, x, y);
    c.peak_bytes = counting()->peak() - start;
  }
  for (int r = 0; r < rounds; ++r)
    for (auto& c : cases) c.ms.push_back(step_ms(c, x, y));
  const double none_ms = median(cases[0].ms);
  const double mib = 1024.0 * 1024.0;
  std::string name = path.substr(path.find_last_of('/') + 1);
  for (auto& c : cases) {
    const auto& m = c.model->config();
    const double act = llmtrain::activation_bytes(m, llmtrain::ComputeDtype::float32, B, m.attention_backend);
    std::printf("| %-22s | %-9s | %4lld/%-3lld | %9.1f | %+6.1f%% | %10.1f | %10.1f |\n", name.c_str(),
                llmtrain::to_string(c.mode), static_cast<long long>(m.recomputed_blocks()),
                static_cast<long long>(m.n_layer), median(c.ms), 100.0 * (median(c.ms) / none_ms - 1.0),
                c.peak_bytes / mib, act / mib);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  c10::SetCPUAllocator(counting(), /*priority=*/100);
  int rounds = 10;
  std::vector<std::string> presets;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--rounds=", 0) == 0)
      rounds = std::stoi(a.substr(9));
    else
      presets.push_back(a);
  }
  std::printf("fp32, CPU, %d threads, median of %d steps per mode (selective: every activation_checkpointing_every-th "
              "block, as the preset sets it; default 2)\n\n",
              torch::get_num_threads(), rounds);
  std::printf("| %-22s | %-9s | %-8s | %-9s | %-7s | %-10s | %-10s |\n", "preset", "mode", "recomp.", "step ms",
              "vs none", "peak MiB", "model MiB");
  std::printf("|%s|%s|%s|%s|%s|%s|%s|\n", std::string(24, '-').c_str(), std::string(11, '-').c_str(),
              std::string(10, '-').c_str(), std::string(11, '-').c_str(), std::string(9, '-').c_str(),
              std::string(12, '-').c_str(), std::string(12, '-').c_str());
  for (const auto& p : presets) run_preset(p, rounds);
  return 0;
}
