// Forward + backward of one micro-batch for each model family at a small size,
// and the attention backends side by side. Counters: tokens/s and achieved
// GFLOP/s by docs/mfu.md's rule (flops_per_token = 6N + 12 L H Q T covers forward
// and backward).
//   build/bin/bench-model --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <string>

#include <torch/torch.h>

#include "llmtrain/model/transformer.hpp"

using llmtrain::ModelConfig;
using llmtrain::Transformer;

namespace {

// Byte-level vocabulary, 4 layers of width 256: small enough for a 2-core CPU,
// large enough that matmuls dominate.
ModelConfig small(const std::string& family, int64_t block_size) {
  ModelConfig m;
  m.vocab_size = m.padded_vocab = 256;
  m.block_size = block_size;
  m.n_layer = 4;
  m.n_head = 4;
  m.n_kv_head = 4;
  m.n_embd = 256;
  m.head_dim = 64;
  m.ffn_hidden = 768;  // 8/3 * 256 rounded up to 256
  if (family == "llama3" || family == "qwen3") {
    m.n_kv_head = 2;
    m.rope_theta = family == "llama3" ? 5e5 : 1e6;
  }
  if (family == "qwen3") {
    m.qk_norm = true;
    m.head_dim = 96;  // n_head * head_dim = 384 != n_embd, as Qwen3
  }
  if (family == "gpt2") {
    m.norm = llmtrain::NormKind::layernorm;
    m.pos_encoding = llmtrain::PosEncoding::learned;
    m.ffn = llmtrain::FfnKind::gelu;
    m.ffn_hidden = 1024;
    m.bias = true;
    m.tie_embeddings = true;
  }
  return m;
}

void run_fwd_bwd(benchmark::State& state, ModelConfig m, int64_t batch) {
  Transformer model(m);
  if (model->attention_backend_used() != m.attention_backend) {
    state.SkipWithError((std::string("backend ") + llmtrain::to_string(m.attention_backend) +
                         " is not available here (falls back to " +
                         llmtrain::to_string(model->attention_backend_used()) + ")")
                            .c_str());
    return;
  }
  model->init_weights(1);
  auto gen = at::detail::createCPUGenerator(2);
  auto x = torch::randint(m.vocab_size, {batch, m.block_size}, gen, torch::kLong);
  auto y = torch::randint(m.vocab_size, {batch, m.block_size}, gen, torch::kLong);
  for (auto _ : state) {
    model->zero_grad();
    auto loss = model->loss(x, y);
    loss.backward();
    benchmark::DoNotOptimize(loss.item<float>());
  }
  const double tokens = static_cast<double>(batch * m.block_size) * static_cast<double>(state.iterations());
  state.counters["tokens/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(tokens * m.flops_per_token() / 1e9, benchmark::Counter::kIsRate);
  state.counters["params"] = static_cast<double>(m.num_params());
  state.SetLabel(m.arch_string() + " threads=" + std::to_string(torch::get_num_threads()));
}

void BM_Family(benchmark::State& state, const std::string& family) {
  auto m = small(family, 256);
  m.attention_backend = llmtrain::AttentionBackend::manual;
  run_fwd_bwd(state, m, 8);
}

void BM_Backend(benchmark::State& state, const std::string& backend) {
  auto m = small("llama3", 1024);  // long enough for attention to matter
  m.attention_backend = llmtrain::option_from_string<llmtrain::AttentionBackend>(backend);
  run_fwd_bwd(state, m, 2);
}

}  // namespace

BENCHMARK_CAPTURE(BM_Family, gpt2, std::string("gpt2"))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Family, llama, std::string("llama"))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Family, llama3, std::string("llama3"))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Family, qwen3, std::string("qwen3"))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Backend, manual, std::string("manual"))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Backend, sdpa, std::string("sdpa"))->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
