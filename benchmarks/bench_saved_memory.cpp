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
// the traced region. --grads=buckets: as the trainer holds them (DDP on one
// rank, distributed/grad_buckets.cpp): the backward goes through the
// strategy, whose buckets are made as their first gradients arrive and
// dropped after the optimizer step (the untraced first step's), so they too
// are allocated inside the traced region (finish_gradients() included).
// --grads=kept: they exist, zeroed, before the step and backward accumulates
// into them, as into persistent buckets (use_cuda_graphs=True), which hold
// every gradient from one step to the next; their bytes are not in the trace
// and are printed as `held_before_bytes N`. A first untraced forward + backward comes before
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
#include "llmtrain/distributed/collectives.hpp"  // defines: make_collectives (--grads=buckets)
#include "llmtrain/distributed/runtime.hpp"      // defines: Runtime (MPI, one rank)
#include "llmtrain/distributed/strategy.hpp"     // defines: make_strategy (--grads=buckets: DDP's buckets)
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
  if (grads != "none" && grads != "kept" && grads != "buckets") {
    std::cerr << "bench-saved-memory: --grads: expected none, kept or buckets, got '" << grads << "'\n";
    return 2;
  }
  if (trace.empty()) {
    std::cerr << "bench-saved-memory: --trace=FILE expected (usage: PRESET [--key=value ...] --trace=FILE)\n";
    return 2;
  }
  try {
    int rt_argc = 1;
    char** rt_argv = argv;
    llmtrain::Runtime rt(rt_argc, rt_argv);  // --grads=buckets: a Collectives of one rank
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
    std::unique_ptr<llmtrain::Collectives> comm;
    std::unique_ptr<llmtrain::Strategy> strategy;
    if (grads == "buckets") {
      comm = llmtrain::make_collectives(rt, cpu);
      strategy = llmtrain::make_strategy(llmtrain::StrategyOptions::from_config(c), model, *comm);
    }
    int64_t held = 0;  // bytes of the gradients that exist before the traced step
    auto step = [&] {
      held = 0;
      for (auto& p : model->parameters()) {
        if (grads == "buckets") break;  // the strategy's last step dropped them
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
      if (strategy) {
        strategy->backward(loss, /*last_micro=*/true);
        strategy->finish_gradients();
      } else {
        loss.backward();
      }
    };
    step();
    if (strategy) strategy->step(0.0, 1.0);  // learning rate 0: the weights stay; the buckets are dropped
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
