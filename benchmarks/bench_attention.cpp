// Causal attention forward + backward on CPU: SDPA (LibTorch's fused CPU flash
// kernel, chosen by SDPA's dispatcher) against the manual backend (two matmuls
// and a softmax over a stored (T, T) score matrix), at block 256 and 1024, for
// the LLaMA-3 / Qwen3 head layout (16 query heads on 8 KV heads of 128) and
// plain multi-head attention, in float32 and bfloat16.
//   build/bin/bench-attention --benchmark_counters_tabular=true
// Counters: tokens/s (B x T per iteration) and GFLOP/s of the attention core
// (forward 4 B H T^2 D / 2 for the causal half, backward twice that).
#include <benchmark/benchmark.h>

#include <cmath>
#include <string>

#include <torch/torch.h>

#include "model/layers.hpp"

namespace {

using llmtrain::model_detail::AttentionPlan;
using llmtrain::model_detail::causal_attention;
using llmtrain::model_detail::plan_attention;

void attention_fwd_bwd(benchmark::State& state, llmtrain::AttentionBackend backend, int64_t H, int64_t K,
                       torch::ScalarType dtype) {
  const int64_t T = state.range(0), D = 128, B = 1;
  torch::manual_seed(0);
  const auto opt = torch::TensorOptions().dtype(dtype);
  auto q = torch::randn({B, H, T, D}, opt).requires_grad_(true);
  auto k = torch::randn({B, K, T, D}, opt).requires_grad_(true);
  auto v = torch::randn({B, K, T, D}, opt).requires_grad_(true);
  auto dy = torch::randn({B, H, T, D}, opt);
  const AttentionPlan plan = plan_attention(backend, torch::kCPU, dtype, H, K, D, T, 0.0);
  torch::Tensor mask;
  if (plan.backend == llmtrain::AttentionBackend::manual) mask = torch::full({T, T}, -INFINITY).triu(1);
  state.SetLabel(plan.label());
  for (auto _ : state) {
    auto y = causal_attention(q, k, v, plan, mask, 0.0, /*training=*/true);
    y.backward(dy);
    q.mutable_grad().reset();
    k.mutable_grad().reset();
    v.mutable_grad().reset();
  }
  const double flops = 3.0 * 4.0 * B * H * static_cast<double>(T) * T * D / 2.0;  // fwd + 2x bwd, causal half
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(B * T), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

#define ATTN_BENCH(name, backend, H, K, dtype)                                                  \
  BENCHMARK_CAPTURE(attention_fwd_bwd, name, backend, H, K, dtype)->Arg(256)->Arg(1024)        \
      ->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime()

using llmtrain::AttentionBackend;
ATTN_BENCH(gqa16x8_fp32_sdpa, AttentionBackend::sdpa, 16, 8, torch::kFloat);
ATTN_BENCH(gqa16x8_fp32_manual, AttentionBackend::manual, 16, 8, torch::kFloat);
ATTN_BENCH(gqa16x8_bf16_sdpa, AttentionBackend::sdpa, 16, 8, torch::kBFloat16);
ATTN_BENCH(gqa16x8_bf16_manual, AttentionBackend::manual, 16, 8, torch::kBFloat16);
ATTN_BENCH(mha16_fp32_sdpa, AttentionBackend::sdpa, 16, 16, torch::kFloat);
ATTN_BENCH(mha16_fp32_manual, AttentionBackend::manual, 16, 16, torch::kFloat);

}  // namespace

BENCHMARK_MAIN();
