// One traced forward + backward of llmtrain's model on CPU, for
// benchmarks/memory_per_block.py (issue 46: peak memory at most PyTorch
// eager's). The trace is LibTorch's profiler (Kineto) with memory events, the
// same instrument the Python side uses (torch.profiler, profile_memory=True):
// every allocation and free after the profiler starts, with the allocator's
// running total, so one parser reads both sides alike.
//
//   build/bin/bench-saved-memory inputs/bench_llama_small.cfg --dtype=bfloat16 --n_layer=2 \
//       --compile=True --trace=OUT.json
//
// The step is the trainer's (src/train/trainer.cpp): the loss under autocast,
// backward outside it. --grads=none (default): gradients start as none
// (PyTorch's zero_grad(set_to_none=True)), so both sides allocate them inside
// the traced region. --grads=kept: they exist, zeroed, before the step and
// backward accumulates into them, as into the trainer's gradient buckets
// (distributed/grad_buckets.cpp), which hold every gradient from one step to
// the next; their bytes are not in the trace and are printed as
// `held_before_bytes N`. A first untraced forward + backward comes before
// (lazy one-time set-up is not the model's). The ids are uniform below
// vocab_size, seeded.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <ATen/record_function.h>
#include <torch/torch.h>

#include "llmtrain/core/config.hpp"           // defines: parse_command_line, Config
#include "llmtrain/model/model_config.hpp"    // defines: ModelConfig::from_config
#include "llmtrain/model/precision.hpp"       // defines: AutocastGuard, compute_dtype
#include "llmtrain/model/transformer.hpp"     // defines: Transformer
#include "llmtrain/record/step_profiler.hpp"  // defines: StepProfiler (Kineto, memory events on)

int main(int argc, char** argv) {
  std::string trace, grads = "none";
  std::vector<const char*> args;  // the llmtrain command line without --trace and --grads
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--trace=", 8) == 0)
      trace = argv[i] + 8;
    else if (std::strncmp(argv[i], "--grads=", 8) == 0)
      grads = argv[i] + 8;
    else
      args.push_back(argv[i]);
  }
  if (grads != "none" && grads != "kept") {
    std::cerr << "bench-saved-memory: --grads: expected none or kept, got '" << grads << "'\n";
    return 2;
  }
  if (trace.empty()) {
    std::cerr << "bench-saved-memory: --trace=FILE expected (usage: PRESET [--key=value ...] --trace=FILE)\n";
    return 2;
  }
  try {
    const auto cl = llmtrain::parse_command_line(static_cast<int>(args.size()), args.data());
    const auto& c = cl.config;
    if (c.num_threads > 0) torch::set_num_threads(static_cast<int>(c.num_threads));
    const auto m = llmtrain::ModelConfig::from_config(c, c.vocab_size);
    const torch::Device cpu(torch::kCPU);
    const auto dtype = llmtrain::compute_dtype(c.dtype, cpu);
    torch::manual_seed(c.seed);
    llmtrain::Transformer model(m);
    model->init_weights(static_cast<uint64_t>(c.seed));
    model->plan_attention(cpu, dtype);
    model->plan_kernels(cpu, dtype);
    const int64_t B = c.batch_size, T = m.block_size;
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(c.seed) + 1);
    const auto idx = torch::randint(m.vocab_size, {B, T}, gen, torch::kLong);
    const auto targets = torch::randint(m.vocab_size, {B, T}, gen, torch::kLong);
    int64_t held = 0;  // bytes of the gradients that exist before the traced step
    auto step = [&] {
      held = 0;
      for (auto& p : model->parameters()) {
        if (grads == "none") {
          p.mutable_grad().reset();
        } else {
          if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
          p.mutable_grad().zero_();
          held += static_cast<int64_t>(p.grad().nbytes());
        }
      }
      torch::Tensor loss;
      {
        RECORD_USER_SCOPE("memory::forward");  // the spans memory_per_block.py splits the trace by
        llmtrain::AutocastGuard autocast(cpu, dtype);
        loss = model->loss(idx, targets);
      }
      RECORD_USER_SCOPE("memory::backward");
      loss.backward();
    };
    step();
    const auto dir = std::filesystem::temp_directory_path() / ("bench-saved-memory-" + std::to_string(::getpid()));
    {
      llmtrain::StepProfiler prof("1", 0, dir.string(), cpu);
      prof.before_step(1);
      step();
      prof.after_step(1);
      std::filesystem::create_directories(std::filesystem::absolute(trace).parent_path());
      std::filesystem::copy_file(prof.path(), trace, std::filesystem::copy_options::overwrite_existing);
    }
    std::filesystem::remove_all(dir);
    std::cout << "held_before_bytes " << held << "\n";
  } catch (const std::exception& e) {
    std::cerr << "bench-saved-memory: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
