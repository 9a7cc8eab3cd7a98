// Top-level ops per transformer block, forward + backward, on the CPU: on a GPU
// each is about one kernel launch (issue 46). Counted with a global
// at::RecordFunction observer by the rule of llmtrain-report --profile
// (record/profile_report.hpp, the one definition): an op is top-level when it is
// an `aten::` or `llmtrain::` op not inside another such op of its thread;
// views, aliases and allocations (is_view_op) are left out and see through (a
// copy a reshape makes counts). One block = the difference between a 4-layer
// and a 2-layer model, over 2. compile=True rows: the fused kernels
// (docs/kernels.md). The optimizer is not here (one fused AdamW per group, no
// per-block ops); a whole step's count is compare_pytorch.sh --op_count's.
//   build/bin/bench-block-ops            (LLaMA shape, fp32 and bf16 autocast, compile False / True)
// Not a Google Benchmark: it counts, it does not time.
#include <atomic>
#include <cstdio>
#include <optional>
#include <string>

#include <ATen/record_function.h>
#include <torch/torch.h>

#include "llmtrain/model/precision.hpp"  // defines: AutocastGuard
#include "llmtrain/model/transformer.hpp"  // defines: Transformer, ModelConfig
#include "llmtrain/record/profile_report.hpp"  // defines: is_view_op (what a top-level op is)

namespace {

std::atomic<bool> counting{false};
std::atomic<long> top_level{0};
thread_local int depth = 0;

struct Entered : at::ObserverContext {
  bool nested = false;
};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (!counting.load()) return nullptr;
  const std::string name = fn.name();
  const bool ours = name.rfind("aten::", 0) == 0 || name.rfind("llmtrain::", 0) == 0;
  if (!ours || llmtrain::is_view_op(name)) return nullptr;  // llmtrain-report --profile's rule
  if (depth == 0) ++top_level;
  ++depth;
  auto ctx = std::make_unique<Entered>();
  ctx->nested = true;
  return ctx;
}

void on_end(const at::RecordFunction&, at::ObserverContext* ctx) {
  if (ctx && static_cast<Entered*>(ctx)->nested) --depth;
}

llmtrain::ModelConfig llama(int64_t layers, bool compile) {
  llmtrain::ModelConfig m;
  m.vocab_size = m.padded_vocab = 256;
  m.block_size = 64;
  m.n_layer = layers;
  m.n_head = 4;
  m.n_kv_head = 4;
  m.n_embd = 128;
  m.head_dim = 32;
  m.ffn_hidden = 384;
  m.attention_backend = llmtrain::AttentionBackend::sdpa;
  m.fused_loss = m.fused_kernels = compile;
  return m;
}

struct Counts {
  long forward = 0, backward = 0;
};

Counts count(int64_t layers, bool bf16, bool compile) {
  auto m = llama(layers, compile);
  llmtrain::Transformer model(m);
  model->init_weights(1);
  model->train();
  auto x = torch::randint(m.vocab_size, {2, m.block_size}, torch::kLong);
  auto y = torch::randint(m.vocab_size, {2, m.block_size}, torch::kLong);
  Counts c;
  for (int warm = 0; warm < 2; ++warm) {  // the second pass counts (first-call caches settled)
    model->zero_grad();
    torch::Tensor loss;
    top_level = 0;
    counting = warm == 1;
    {
      std::optional<llmtrain::AutocastGuard> autocast;
      if (bf16) autocast.emplace(torch::Device(torch::kCPU), torch::kBFloat16);
      loss = model->loss(x, y);
    }
    c.forward = top_level.exchange(0);
    loss.backward();
    c.backward = top_level.exchange(0);
    counting = false;
  }
  return c;
}

}  // namespace

int main() {
  torch::set_num_threads(1);
  at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                            .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE,
                                     at::RecordScope::BACKWARD_FUNCTION}));
  for (bool compile : {false, true}) {
    for (bool bf16 : {false, true}) {
      const Counts two = count(2, bf16, compile), four = count(4, bf16, compile);
      std::printf("%-22s compile=%-5s per block: forward %ld, backward %ld, total %ld  (2 layers: %ld + %ld, "
                  "4 layers: %ld + %ld)\n",
                  bf16 ? "LLaMA, bf16 autocast" : "LLaMA, fp32", compile ? "True" : "False",
                  (four.forward - two.forward) / 2, (four.backward - two.backward) / 2,
                  (four.forward + four.backward - two.forward - two.backward) / 2, two.forward, two.backward,
                  four.forward, four.backward);
    }
  }
  return 0;
}
