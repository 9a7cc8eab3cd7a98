// The gradient buckets' life (issue 46): DDP and ZeRO-1 make each bucket when
// its first gradient of a step arrives and drop it after the step, so nothing of
// the gradients is held through the forward. Against the persistent buckets
// (use_cuda_graphs=True) and against autograd's own accumulation: the same
// gradients, norms and parameters bit for bit, at accumulation 1 and 3, with a
// parameter the forward never uses. Run at 1 and 2 ranks.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "llmtrain/core/config.hpp"              // defines: Config
#include "llmtrain/distributed/collectives.hpp"  // defines: Collectives, make_collectives
#include "llmtrain/distributed/strategy.hpp"     // defines: make_strategy, StrategyOptions
#include "llmtrain/record/device_memory.hpp"     // defines: count_cpu_allocations, allocated_bytes
#include "test_util.hpp"

namespace llmtrain {
namespace {

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(7, 13));
    // Never used by forward: no gradient in any micro-step; finish() zeroes it.
    unused = register_parameter("unused", torch::ones({3}));
    fc2 = register_module("fc2", torch::nn::Linear(13, 5));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x))); }  // (N, 7) -> (N, 5)
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::Tensor unused;
};
TORCH_MODULE(Net);

constexpr int kIters = 3, kMicro = 4;

struct Result {
  std::vector<std::vector<torch::Tensor>> grads;  // per iteration, per parameter: .grad after finish
  std::vector<double> norms;
  std::vector<torch::Tensor> params;
  int unused = -1;  // the unused parameter's index
};

// `persistent`: use_cuda_graphs' buckets. Every rank starts from rank 0's
// weights (the strategy broadcasts); its rows of each iteration differ per rank.
Result run(bool zero1, int accum, bool persistent, Collectives& comm) {
  count_cpu_allocations();
  torch::manual_seed(comm.rank() == 0 ? 5 : 50 + comm.rank());
  Net net;
  Config cfg;
  cfg.learning_rate = 1e-2;
  cfg.gradient_accumulation_steps = accum;
  cfg.use_zero1 = zero1;
  auto opts = StrategyOptions::from_config(cfg);
  opts.persistent_grads = persistent;
  auto strategy = make_strategy(opts, ParamGroups{net->parameters(), {net->fc1->bias, net->fc2->bias}, {}}, comm);
  const int W = comm.world_size(), r = comm.rank();
  const int64_t P = 7 * 13 + 13 + 3 + 13 * 5 + 5;  // one bucket (25 MiB), padded to W under ZeRO-1
  const int64_t padded = zero1 ? (P + W - 1) / W * W : P;
  const torch::Device cpu(torch::kCPU);
  Result res;
  for (int it = 0; it < kIters; ++it) {
    torch::manual_seed(900 + it);
    auto x = torch::randn({W * accum * kMicro, 7}), y = torch::randn({W * accum * kMicro, 5});
    // The oracle: a copy of this rank's model whose .grad autograd accumulates
    // itself (the order the buckets add in), summed over ranks by hand (DDP).
    Net ref;
    {
      torch::NoGradGuard no_grad;
      auto src = net->parameters(), dst = ref->parameters();
      for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
    }
    for (int m = 0; m < accum; ++m) {
      const int64_t row = (int64_t{r} * accum + m) * kMicro;
      auto xm = x.narrow(0, row, kMicro), ym = y.narrow(0, row, kMicro);
      strategy->backward(torch::mse_loss(net->forward(xm), ym) / accum, m + 1 == accum);
      (torch::mse_loss(ref->forward(xm), ym) / accum).backward();
    }
    strategy->finish_gradients();
    std::vector<torch::Tensor> grads;
    auto ps = net->parameters(), rs = ref->parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      if (!ps[i].grad().defined()) {
        ADD_FAILURE() << "parameter " << i << " has no gradient after finish_gradients()";
        return res;
      }
      grads.push_back(ps[i].grad().clone());
      auto want = rs[i].grad().defined() ? rs[i].grad().clone() : torch::zeros_like(rs[i]);
      // DDP's .grad is the all-reduced bucket; ZeRO-1's the bucket it reduce-scatters (the local sum).
      if (!zero1) comm.allreduce_sum(want);
      EXPECT_TRUE(torch::equal(grads.back(), want))
          << (zero1 ? "zero1" : "ddp") << " accumulation " << accum << " iteration " << it << " parameter " << i
          << " differs by " << (grads.back() - want).abs().max().item<float>();
    }
    res.grads.push_back(grads);
    const auto held = allocated_bytes(cpu)->current;
    const double norm = strategy->grad_norm();
    res.norms.push_back(norm);
    strategy->step(cfg.learning_rate, clip_coefficient(norm, 1.0));
    if (!persistent) {
      // Between steps: no parameter points into a bucket, and the buckets'
      // memory went back (at least P fp32 gradients; ZeRO-1 its shard too).
      for (auto& p : net->parameters()) EXPECT_FALSE(p.grad().defined());
      EXPECT_GE(held - allocated_bytes(cpu)->current, 4 * P) << "iteration " << it;
    }
    // Weights (fp32) and AdamW's moments (of this rank's shard), and the gradients only when persistent.
    const int64_t opt = strategy->optimizer_state_bytes();
    EXPECT_EQ(strategy->persistent_state_bytes(),
              4 * padded + opt + (persistent ? 4 * padded + (zero1 ? 4 * padded / W : 0) : 0));
  }
  for (auto& p : net->parameters()) {
    if (p.is_same(net->unused)) res.unused = static_cast<int>(res.params.size());
    res.params.push_back(p.detach().clone());
  }
  return res;
}

TEST(GradBuckets, MadePerStepEqualPersistentBitForBit) {
  auto comm = make_collectives(testing::runtime(), torch::kCPU);
  for (bool zero1 : {false, true})
    for (int accum : {1, 3}) {
      SCOPED_TRACE(fmt::format("{} accumulation {} world {}", zero1 ? "zero1" : "ddp", accum, comm->world_size()));
      const auto a = run(zero1, accum, /*persistent=*/false, *comm);
      const auto b = run(zero1, accum, /*persistent=*/true, *comm);
      ASSERT_EQ(a.grads.size(), static_cast<size_t>(kIters));
      ASSERT_EQ(b.grads.size(), static_cast<size_t>(kIters));
      for (int it = 0; it < kIters; ++it)
        for (size_t i = 0; i < a.grads[it].size(); ++i)
          EXPECT_TRUE(torch::equal(a.grads[it][i], b.grads[it][i])) << "iteration " << it << " parameter " << i;
      for (int it = 0; it < kIters; ++it) EXPECT_EQ(a.norms[it], b.norms[it]) << "iteration " << it;
      for (size_t i = 0; i < a.params.size(); ++i) EXPECT_TRUE(torch::equal(a.params[i], b.params[i])) << "parameter " << i;
      // The unused parameter's gradient is zero in every step (finish() zeroed a slot no hook wrote).
      ASSERT_GE(a.unused, 0);
      for (int it = 0; it < kIters; ++it) EXPECT_EQ(a.grads[it][a.unused].abs().max().item<float>(), 0.0f);
    }
}

}  // namespace
}  // namespace llmtrain
