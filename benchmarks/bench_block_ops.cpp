// Top-level ops per transformer block, forward + backward, on the CPU: on a GPU
// each is about one kernel launch (issue 46). Counted with a global
// at::RecordFunction observer: an op is top-level when it is an `aten::` or
// `llmtrain::` op not inside another such op of its thread; view ops (view,
// reshape, transpose, split, ...) and bare allocations (empty*) are left out
// and see through (a copy a reshape makes counts). One block = the difference
// between a 4-layer and a 2-layer model, over 2.
//   build/bin/bench-block-ops            (LLaMA shape, fp32 and bf16 autocast)
// Not a Google Benchmark: it counts, it does not time.
#include <atomic>
#include <cstdio>
#include <optional>
#include <string>
#include <unordered_set>

#include <ATen/record_function.h>
#include <torch/torch.h>

#include "llmtrain/model/precision.hpp"  // defines: AutocastGuard
#include "llmtrain/model/transformer.hpp"  // defines: Transformer, ModelConfig

namespace {

const std::unordered_set<std::string>& transparent() {
  static const std::unordered_set<std::string> names = {
      "aten::view", "aten::reshape", "aten::_reshape_alias", "aten::_unsafe_view", "aten::as_strided",
      "aten::transpose", "aten::t", "aten::permute", "aten::expand", "aten::expand_as", "aten::narrow",
      "aten::slice", "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::split", "aten::split_with_sizes",
      "aten::chunk", "aten::unbind", "aten::detach", "aten::alias", "aten::view_as", "aten::unflatten",
      "aten::flatten", "aten::lift_fresh", "aten::empty", "aten::empty_strided", "aten::empty_like",
      "aten::resize_", "aten::result_type", "aten::is_nonzero", "aten::size", "aten::stride", "aten::dim",
      "aten::numel", "aten::to", "aten::type_as", "aten::contiguous"};
  return names;
}

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
  if (!ours || transparent().count(name)) return nullptr;
  if (depth == 0) ++top_level;
  ++depth;
  auto ctx = std::make_unique<Entered>();
  ctx->nested = true;
  return ctx;
}

void on_end(const at::RecordFunction&, at::ObserverContext* ctx) {
  if (ctx && static_cast<Entered*>(ctx)->nested) --depth;
}

llmtrain::ModelConfig llama(int64_t layers) {
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
  return m;
}

struct Counts {
  long forward = 0, backward = 0;
};

Counts count(int64_t layers, bool bf16) {
  auto m = llama(layers);
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
  for (bool bf16 : {false, true}) {
    const Counts two = count(2, bf16), four = count(4, bf16);
    std::printf("%-22s per block: forward %ld, backward %ld, total %ld  (2 layers: %ld + %ld, 4 layers: %ld + %ld)\n",
                bf16 ? "LLaMA, bf16 autocast" : "LLaMA, fp32", (four.forward - two.forward) / 2,
                (four.backward - two.backward) / 2,
                (four.forward + four.backward - two.forward - two.backward) / 2, two.forward, two.backward,
                four.forward, four.backward);
  }
  return 0;
}
