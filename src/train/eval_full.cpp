#include "llmtrain/train/eval_full.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include "llmtrain/core/error.hpp"
#include "llmtrain/data/split_tokens.hpp"
#include "llmtrain/distributed/collectives.hpp"
#include "llmtrain/model/transformer.hpp"
#include "llmtrain/model/precision.hpp"

namespace llmtrain {

FullEvalResult evaluate_full(TransformerImpl& model, const std::string& data_dir, Split split,
                             int64_t block_size, int64_t batch_size, torch::Device device, torch::ScalarType dtype,
                             Collectives& comm) {
  SplitTokens stream(data_dir, split);
  const int64_t T = block_size, B = batch_size;
  const int64_t W = stream.size() > 0 ? (stream.size() - 1) / T : 0;  // window k needs tokens up to kT + T
  if (W == 0)
    throw DataError(fmt::format("eval_full: split '{}' of '{}' has {} tokens, fewer than block_size + 1 = {}",
                                to_string(split), data_dir, stream.size(), T + 1));
  const int64_t batches = (W + B - 1) / B;
  const int rank = comm.rank(), world = comm.world_size();
  // FSDP gathers parameters inside forward: every rank must run as many forwards.
  const bool lockstep = model.forward_hooks() != nullptr;
  const int64_t rounds = lockstep ? (batches + world - 1) / world : 0;

  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  auto sums = torch::zeros({W}, torch::TensorOptions().dtype(torch::kDouble));  // per-window loss sums
  auto run = [&](int64_t j) {
    const int64_t first = j * B, n = std::min(B, W - first);
    auto tokens = stream.read(first * T, n * T + 1);                          // (n T + 1)
    auto x = tokens.narrow(0, 0, n * T).view({n, T}).to(device);              // (n, T)
    auto y = tokens.narrow(0, 1, n * T).view({n, T}).to(device);              // (n, T)
    torch::Tensor logits;
    {
      AutocastGuard autocast(device, dtype);
      logits = model.forward(x);                                              // (n, T, V)
    }
    auto loss = torch::nn::functional::cross_entropy(
        logits.reshape({n * T, -1}).to(torch::kFloat), y.reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));  // (n T)
    sums.narrow(0, first, n).copy_(loss.view({n, T}).to(torch::kDouble).sum(1).cpu());
  };
  int64_t done = 0;
  for (int64_t j = rank; j < batches; j += world, ++done) run(j);
  if (lockstep) {
    for (; done < rounds; ++done) {
      AutocastGuard autocast(device, dtype);
      model.forward(torch::zeros({1, T}, torch::TensorOptions().dtype(torch::kInt64).device(device)));
    }
  }
  auto all = sums.to(device);
  comm.allreduce_sum(all);  // each window is non-zero on one rank only
  const auto host = all.cpu();
  const double* s = host.data_ptr<double>();
  double total = 0;
  for (int64_t k = 0; k < W; ++k) total += s[k];
  if (was_training) model.train();
  FullEvalResult r;
  r.windows = W;
  r.tokens = W * T;
  r.loss = total / static_cast<double>(r.tokens);
  return r;
}

}  // namespace llmtrain
