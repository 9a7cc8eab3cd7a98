// Checkpoint I/O: save and load time of a full training state (fp32 weights +
// both AdamW moments) through llmtrain's Checkpointer, every rank writing its
// ZeRO-1 shard in parallel (one writer per rank). Prints one JSON line (rank 0)
// per repetition; benchmarks/checkpoint_table.sh runs it at 1 and 2 ranks next
// to dd of the same bytes on the same disk and prints the table.
//   mpiexec -n 2 build/bin/bench-checkpoint --dir /path/on/the/disk [--layers 8 --width 1024 --repeats 3]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include <mpi.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/distributed/collectives.hpp"
#include "llmtrain/distributed/runtime.hpp"
#include "llmtrain/distributed/strategy.hpp"
#include "llmtrain/model/params.hpp"
#include "llmtrain/model/transformer.hpp"
#include "llmtrain/checkpoint/checkpoint.hpp"
#include "llmtrain/train/checkpoint_parts.hpp"

namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Drops the page cache (root only) so a load reads the disk; says whether it could.
bool drop_page_cache() {
  ::sync();
  const int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "3", 1) == 1;
  ::close(fd);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  return llmtrain::run_main(argc, argv, [&](llmtrain::Runtime& rt) {
    std::string dir;
    int64_t layers = 8, width = 1024, repeats = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string k = argv[i], v = argv[i + 1];
      if (k == "--dir") dir = v;
      else if (k == "--layers") layers = std::stoll(v);
      else if (k == "--width") width = std::stoll(v);
      else if (k == "--repeats") repeats = std::stoll(v);
      else throw llmtrain::Error("bench-checkpoint: unknown option " + k + " (--dir --layers --width --repeats)");
    }
    if (dir.empty()) throw llmtrain::Error("bench-checkpoint: --dir DIR (a directory on the disk to measure)");
    rt.setup_device(llmtrain::DeviceKind::cpu, 1);
    llmtrain::ModelConfig mc;  // LLaMA-2-like: RMSNorm, RoPE, SwiGLU, vocabulary 32000
    mc.vocab_size = mc.padded_vocab = 32000;
    mc.block_size = 128;
    mc.n_layer = layers, mc.n_head = width / 64, mc.n_kv_head = width / 64, mc.n_embd = width, mc.head_dim = 64;
    mc.ffn_hidden = (8 * width / 3 + 255) / 256 * 256;
    llmtrain::Transformer model(mc);
    model->init_weights(1);
    auto comm = llmtrain::make_collectives(rt, torch::kCPU);
    llmtrain::StrategyOptions so;
    so.kind = llmtrain::StrategyOptions::Kind::zero1;
    auto strategy = llmtrain::make_strategy(so, model, *comm);
    const std::string out = (fs::path(dir) / ("bench_np" + std::to_string(rt.world_size()))).string();
    if (rt.is_root()) fs::remove_all(out);
    rt.barrier();
    llmtrain::Checkpointer ckpt(out, /*keep_last=*/1, rt, {strategy->name(), nlohmann::json::object()});
    llmtrain::TrainState state;
    state.best_val_loss = 1.0;
    ckpt.add(std::make_unique<llmtrain::StrategyCheckpoint>(llmtrain::parameter_table(mc), *strategy));
    ckpt.add(std::make_unique<llmtrain::TrainStateCheckpoint>(state));
    ckpt.add(std::make_unique<llmtrain::RngCheckpoint>(torch::Device(torch::kCPU)));
    for (int64_t r = 0; r < repeats; ++r) {
      state.iteration = r + 1;
      rt.barrier();
      auto t0 = std::chrono::steady_clock::now();
      const std::string path = ckpt.save(state.iteration);
      rt.barrier();
      const double save_s = seconds_since(t0);
      const double bytes = static_cast<double>(fs::file_size(path));
      bool cold = false;
      if (rt.is_root()) cold = drop_page_cache();
      rt.barrier();
      t0 = std::chrono::steady_clock::now();
      const auto loaded = ckpt.load_latest();
      rt.barrier();
      const double load_s = seconds_since(t0);
      if (!loaded) throw llmtrain::Error("bench-checkpoint: nothing loaded");
      if (rt.is_root()) {
        nlohmann::json j = {{"ranks", rt.world_size()},      {"params", mc.num_params()}, {"bytes", bytes},
                            {"save_s", save_s},               {"load_s", load_s},
                            {"save_gbps", bytes / save_s / 1e9}, {"load_gbps", bytes / load_s / 1e9},
                            {"load_cold_cache", cold}};
        std::printf("%s\n", j.dump().c_str());
        std::fflush(stdout);
      }
    }
    if (rt.is_root()) fs::remove_all(out);
    return 0;
  });
}
