// Strategies against one process on the concatenated batch: DDP (one bucket and
// many), ZeRO-1, clipping on the global norm, no traffic before the last
// micro-step; FSDP against DDP. The model is a small module of its own with 187 parameters (a
// prime factorization of 11 x 17: no world size divides it).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/distributed/collectives.hpp"
#include "llmtrain/distributed/strategy.hpp"
#include "distributed/fused_adamw.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/model/transformer.hpp"
#include "llmtrain/model/precision.hpp"
#include "test_util.hpp"

namespace llmtrain {
namespace {

struct TinyNetImpl : torch::nn::Module {
  explicit TinyNetImpl(bool with_unused = false) {
    fc1 = register_module("fc1", torch::nn::Linear(7, 13));
    scale = register_parameter("scale", torch::ones({13}));
    // A parameter forward never uses: it gets no gradient, its bucket must
    // still be reduced (from finish_gradients) instead of hanging.
    if (with_unused) unused = register_parameter("unused", torch::ones({3}));
    fc2 = register_module("fc2", torch::nn::Linear(13, 5));
  }
  // x: (N, 7) -> (N, 5)
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x)) * scale); }
  ParamGroups groups() {
    return {parameters(), {fc1->bias, scale, fc2->bias}, {}};
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::Tensor scale, unused;
};
TORCH_MODULE(TinyNet);

constexpr int kIters = 5, kMicroBatch = 4;

TinyNet make_net(uint64_t seed, bool with_unused = false) {
  torch::manual_seed(seed);
  return TinyNet(with_unused);
}

// The whole iteration's data, identical on every rank: (W*A*B, 7), (W*A*B, 5).
std::pair<torch::Tensor, torch::Tensor> batch(int iter, int64_t rows) {
  torch::manual_seed(1000 + iter);
  auto x = torch::randn({rows, 7});
  auto y = torch::randn({rows, 5});
  return {x, y};
}

double clip_coef(double norm, double max_norm) {
  return max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
}

Config config(int accum) {
  Config c;
  c.learning_rate = 1e-2;
  c.weight_decay = 0.1;
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.grad_clip = 0.2;  // below the early norms: clipping is active
  c.gradient_accumulation_steps = accum;
  return c;
}

struct Run {
  std::vector<torch::Tensor> params;
  std::vector<double> norms;
};

// One process, the concatenated batch, torch's AdamW and clipping by hand.
Run run_single(const Config& c, int world) {
  auto net = make_net(7);
  auto g = net->groups();
  std::vector<torch::Tensor> dec = {net->fc1->weight, net->fc2->weight};
  auto base = torch::optim::AdamWOptions(c.learning_rate).betas({c.beta1, c.beta2}).eps(1e-8);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(dec, std::make_unique<torch::optim::AdamWOptions>(
                               torch::optim::AdamWOptions(base).weight_decay(c.weight_decay)));
  groups.emplace_back(g.no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                      torch::optim::AdamWOptions(base).weight_decay(0.0)));
  torch::optim::AdamW opt(std::move(groups), base);
  Run run;
  const int64_t rows = world * c.gradient_accumulation_steps * kMicroBatch;
  for (int it = 0; it < kIters; ++it) {
    auto [x, y] = batch(it, rows);
    opt.zero_grad();
    torch::mse_loss(net->forward(x), y).backward();
    double sq = 0;
    for (auto& p : net->parameters()) sq += p.grad().pow(2).sum().item<double>();
    const double norm = std::sqrt(sq);
    run.norms.push_back(norm);
    torch::NoGradGuard ng;
    for (auto& p : net->parameters()) p.mutable_grad().mul_(clip_coef(norm, c.grad_clip));
    opt.step();
  }
  for (auto& p : net->parameters()) run.params.push_back(p.detach().clone());
  return run;
}

// The same iterations through a strategy, rank r taking its slice of each
// iteration's rows, one micro-batch at a time. Ranks start from different
// weights: the strategy must broadcast rank 0's.
Run run_strategy(const Config& c, Collectives& comm, std::vector<int64_t>* calls_per_micro = nullptr,
                 bool with_unused = false) {
  auto net = make_net(comm.rank() == 0 ? 7 : 100 + comm.rank(), with_unused);
  auto strategy = make_strategy(llmtrain::StrategyOptions::from_config(c), net->groups(), comm);
  const int A = static_cast<int>(c.gradient_accumulation_steps), W = comm.world_size(), r = comm.rank();
  Run run;
  for (int it = 0; it < kIters; ++it) {
    auto [x, y] = batch(it, int64_t{W} * A * kMicroBatch);
    for (int m = 0; m < A; ++m) {
      const int64_t row = (int64_t{r} * A + m) * kMicroBatch;
      auto loss = torch::mse_loss(net->forward(x.narrow(0, row, kMicroBatch)), y.narrow(0, row, kMicroBatch)) / A;
      const auto before = comm.num_calls();
      strategy->backward(loss, m + 1 == A);
      if (calls_per_micro) calls_per_micro->push_back(comm.num_calls() - before);
    }
    strategy->finish_gradients();
    const double norm = strategy->grad_norm();
    run.norms.push_back(norm);
    strategy->step(c.learning_rate, clip_coef(norm, c.grad_clip));
  }
  EXPECT_GE(comm.waited_seconds(), 0.0);
  for (auto& p : net->parameters())
    if (!p.is_same(net->unused)) run.params.push_back(p.detach().clone());
  return run;
}

void expect_same(const Run& a, const Run& b, const char* what) {
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i)
    EXPECT_TRUE(torch::allclose(a.params[i], b.params[i], 1e-4, 1e-5))
        << what << ": parameter " << i << " differs by " << (a.params[i] - b.params[i]).abs().max().item<float>();
  for (size_t i = 0; i < a.norms.size(); ++i) EXPECT_NEAR(a.norms[i], b.norms[i], 1e-5 * a.norms[i]) << what;
}

std::unique_ptr<Collectives> comm() { return make_collectives(testing::runtime(), torch::kCPU); }

TEST(Strategy, DdpEqualsSingleProcessOnConcatenatedBatch) {
  // Both ways of running the bucket reductions: MPI nonblocking collectives
  // (the default) and the communication thread.
  for (auto mode : {MpiAsync::comm_thread, MpiAsync::nonblocking})
  for (int accum : {1, 3}) {
    auto c = make_collectives(testing::runtime(), torch::kCPU, mode);
    auto cfg = config(accum);
    const auto ref = run_single(cfg, c->world_size());
    expect_same(ref, run_strategy(cfg, *c), "ddp, one bucket");
    cfg.ddp_bucket_mb = 200.0 / (1 << 20);  // 200 bytes: several buckets
    expect_same(ref, run_strategy(cfg, *c), "ddp, 200-byte buckets");
  }
}

// The one AdamW update of every strategy (PyTorch's fused kernel) against
// LibTorch's torch::optim::AdamW on gradients scaled beforehand: three steps
// of a decayed and an undecayed tensor, the clip coefficient passed as the
// kernel's gradient scale.
TEST(Strategy, FusedAdamWIsTorchAdamW) {
  torch::manual_seed(3);
  const AdamWHyper h{0.9, 0.95, 1e-8, 0.1};
  const double lr = 1e-2, clip = 0.37;
  std::vector<torch::Tensor> ref = {torch::randn({37, 5}), torch::randn({29})};
  std::vector<torch::Tensor> got = {ref[0].clone(), ref[1].clone()};
  std::vector<torch::Tensor> m = {torch::zeros_like(ref[0]), torch::zeros_like(ref[1])};
  std::vector<torch::Tensor> v = {torch::zeros_like(ref[0]), torch::zeros_like(ref[1])};
  for (auto& t : ref) t.requires_grad_(true);
  auto base = torch::optim::AdamWOptions(lr).betas({h.beta1, h.beta2}).eps(h.eps);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{ref[0]},
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(base).weight_decay(h.weight_decay)));
  groups.emplace_back(std::vector<torch::Tensor>{ref[1]},
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(base).weight_decay(0.0)));
  torch::optim::AdamW opt(std::move(groups), base);
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<torch::Tensor> grads = {torch::randn({37, 5}), torch::randn({29})};
    for (int i = 0; i < 2; ++i) ref[i].mutable_grad() = grads[i] * clip;
    opt.step();
    AdamWLists dec, nodec;
    dec.add(got[0], grads[0].clone(), m[0], v[0]);
    nodec.add(got[1], grads[1].clone(), m[1], v[1]);
    fused_adamw_step(dec, h, lr, h.weight_decay, step, clip);
    fused_adamw_step(nodec, h, lr, 0.0, step, clip);
    for (int i = 0; i < 2; ++i) {
      const auto& st = static_cast<const torch::optim::AdamWParamState&>(
          *opt.state().at(ref[i].unsafeGetTensorImpl()));
      SCOPED_TRACE(fmt::format("step {} tensor {}", step, i));
      EXPECT_TRUE(torch::allclose(got[i], ref[i].detach(), 1e-6, 1e-7));
      EXPECT_TRUE(torch::allclose(m[i], st.exp_avg(), 1e-6, 1e-7));
      EXPECT_TRUE(torch::allclose(v[i], st.exp_avg_sq(), 1e-6, 1e-9));
    }
  }
  // A moment of another dtype is refused with the dtypes named.
  AdamWLists bad;
  try {
    bad.add(torch::zeros({4}), torch::zeros({4}), torch::zeros({4}, torch::kBFloat16), torch::zeros({4}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BFloat16"), std::string::npos) << e.what();
  }
}

TEST(Strategy, ClippedNormIsTheSingleProcessNorm) {
  auto c = comm();
  auto cfg = config(2);
  const auto ref = run_single(cfg, c->world_size());
  const auto ddp = run_strategy(cfg, *c);
  ASSERT_GT(ref.norms[0], cfg.grad_clip);  // clipping was active
  for (size_t i = 0; i < ref.norms.size(); ++i) EXPECT_NEAR(ddp.norms[i], ref.norms[i], 1e-5 * ref.norms[i]);
}

TEST(Strategy, Zero1EqualsDdp) {
  auto c = comm();
  for (double bucket_bytes : {200.0, 25.0 * (1 << 20)}) {
    auto cfg = config(2);
    cfg.ddp_bucket_mb = bucket_bytes / (1 << 20);
    const auto ddp = run_strategy(cfg, *c);
    cfg.use_zero1 = true;
    const auto zero = run_strategy(cfg, *c);
    expect_same(ddp, zero, "zero1 vs ddp");
    expect_same(run_single(cfg, c->world_size()), zero, "zero1 vs single process");
  }
}

// The device-tensor step (grad_norm_tensor, step(lr, grad_scale, found_inf):
// the sync-free step's interface) takes the host step's updates (to the bit
// with the host's learning rate and clip_coefficient's tensor), and found_inf
// = 1 is skip_step(): nothing changes, AdamW's step count included. Every
// strategy, with and without accumulation (the buckets are zeroed lazily).
TEST(Strategy, DeviceTensorStepIsTheHostStepAndFoundInfSkips) {
  auto c = comm();
  for (const char* kind : {"ddp", "zero1", "fsdp"}) {
    for (int accum : {1, 2}) {
      SCOPED_TRACE(fmt::format("{}, accumulation {}", kind, accum));
      auto cfg = config(accum);
      cfg.use_zero1 = std::string(kind) == "zero1";
      cfg.use_fsdp = std::string(kind) == "fsdp";
      const int A = accum, W = c->world_size(), r = c->rank();
      std::vector<std::vector<torch::Tensor>> params;
      std::vector<int64_t> steps;
      // 0: the host step; 1: the device step with the host's learning rate
      // (the trainer's); 2: the device step with an fp32 learning rate tensor.
      for (int mode : {0, 1, 2}) {
        const bool device = mode > 0;
        auto net = make_net(7);
        auto strategy = make_strategy(llmtrain::StrategyOptions::from_config(cfg), net->groups(), *c);
        for (int it = 0; it < kIters; ++it) {
          auto [x, y] = batch(it, int64_t{W} * A * kMicroBatch);
          for (int m = 0; m < A; ++m) {
            const int64_t row = (int64_t{r} * A + m) * kMicroBatch;
            auto loss =
                torch::mse_loss(net->forward(x.narrow(0, row, kMicroBatch)), y.narrow(0, row, kMicroBatch)) / A;
            strategy->backward(loss, m + 1 == A);
          }
          strategy->finish_gradients();
          const bool skip = it == 2;
          if (!device) {
            const double norm = strategy->grad_norm();
            if (skip)
              strategy->skip_step();
            else
              strategy->step(cfg.learning_rate, llmtrain::clip_coefficient(norm, cfg.grad_clip));
          } else {
            const auto norm = strategy->grad_norm_tensor();
            ASSERT_EQ(norm.dim(), 0);
            ASSERT_EQ(norm.scalar_type(), torch::kDouble);
            const auto coef = llmtrain::clip_coefficient(norm, cfg.grad_clip);
            const auto found_inf = torch::full({}, skip ? 1.0 : 0.0);
            if (mode == 1)
              strategy->step(cfg.learning_rate, coef, found_inf);
            else
              strategy->step(torch::full({}, cfg.learning_rate), coef, found_inf);
          }
        }
        steps.push_back(strategy->optimizer_steps());
        strategy->materialize_parameters();
        params.emplace_back();
        for (auto& p : net->parameters()) params.back().push_back(p.detach().clone());
      }
      for (int mode : {0, 1, 2}) EXPECT_EQ(steps[mode], kIters - 1);
      // Bit for bit with the host's learning rate (the trainer's step); an
      // fp32 learning rate tensor rounds it.
      for (size_t i = 0; i < params[0].size(); ++i) {
        EXPECT_TRUE(torch::equal(params[0][i], params[1][i]))
            << "parameter " << i << " differs by " << (params[0][i] - params[1][i]).abs().max().item<float>();
        EXPECT_TRUE(torch::allclose(params[0][i], params[2][i], 1e-5, 1e-6))
            << "parameter " << i << " differs by " << (params[0][i] - params[2][i]).abs().max().item<float>();
      }
    }
  }
}

// DDP and ZeRO-1 keep one copy of the gradients: in the last micro-step
// autograd stores each parameter's bucket view as its .grad (what the
// parameter's hook wrote), so .grad already aliases the bucket before
// finish_gradients() points it there, and no second gradient tensor lives
// through the backward.
TEST(Strategy, LastMicroStepGradIsTheBucketView) {
  auto c = comm();
  for (bool zero1 : {false, true}) {
    for (int accum : {1, 2}) {
      auto cfg = config(accum);
      cfg.use_zero1 = zero1;
      auto net = make_net(7);
      auto strategy = make_strategy(llmtrain::StrategyOptions::from_config(cfg), net->groups(), *c);
      auto [x, y] = batch(0, int64_t{c->world_size()} * accum * kMicroBatch);
      for (int m = 0; m < accum; ++m)
        strategy->backward(torch::mse_loss(net->forward(x.narrow(0, m * kMicroBatch, kMicroBatch)),
                                           y.narrow(0, m * kMicroBatch, kMicroBatch)),
                           m + 1 == accum);
      std::vector<const void*> before;
      for (auto& p : net->parameters()) before.push_back(p.grad().data_ptr());
      strategy->finish_gradients();
      size_t i = 0;
      for (auto& p : net->parameters())
        EXPECT_EQ(p.grad().data_ptr(), before[i++]) << (zero1 ? "zero1" : "ddp") << ", accumulation " << accum;
    }
  }
}

TEST(Strategy, Zero1ShardsOptimizerState) {
  auto c = comm();
  auto cfg = config(1);
  auto net = make_net(7);
  const int64_t ddp_bytes = make_strategy(llmtrain::StrategyOptions::from_config(cfg), net->groups(), *c)->optimizer_state_bytes();
  cfg.use_zero1 = true;
  auto net2 = make_net(7);
  const int64_t zero_bytes = make_strategy(llmtrain::StrategyOptions::from_config(cfg), net2->groups(), *c)->optimizer_state_bytes();
  EXPECT_EQ(ddp_bytes, 187 * 2 * 4);
  // ceil(187 / W) fp32 elements of two moments (one bucket, padded to W).
  const int64_t W = c->world_size();
  EXPECT_EQ(zero_bytes, (187 + W - 1) / W * 2 * 4);
}

TEST(Strategy, AccumulationDoesNotCommunicateBeforeTheLastMicroStep) {
  auto c = comm();
  for (bool zero1 : {false, true}) {
    auto cfg = config(3);
    cfg.use_zero1 = zero1;
    cfg.ddp_bucket_mb = 200.0 / (1 << 20);
    std::vector<int64_t> calls;
    run_strategy(cfg, *c, &calls);
    ASSERT_EQ(calls.size(), size_t{kIters * 3});
    for (size_t i = 0; i < calls.size(); ++i) {
      if (i % 3 != 2)
        EXPECT_EQ(calls[i], 0) << "micro-step " << i % 3 << " communicated";
      else  // buckets start inside the last backward, before finish_gradients
        EXPECT_GT(calls[i], 1) << "no bucket reduction started during the last backward";
    }
  }
}

TEST(Strategy, UnusedParameterDoesNotHangOrChange) {
  auto c = comm();
  for (bool zero1 : {false, true}) {
    auto cfg = config(2);
    cfg.use_zero1 = zero1;
    cfg.ddp_bucket_mb = 200.0 / (1 << 20);
    expect_same(run_single(cfg, c->world_size()), run_strategy(cfg, *c, nullptr, /*with_unused=*/true),
                zero1 ? "zero1 with an unused parameter" : "ddp with an unused parameter");
  }
}

// The Transformer through make_strategy(config, model, comm): DDP and ZeRO-1 on
// W ranks x 2 sequences equal one process on the 2W sequences.
TEST(Strategy, TransformerDdpAndZero1EqualSingleProcess) {
  auto c = comm();
  const int W = c->world_size(), r = c->rank();
  ModelConfig mc;
  mc.vocab_size = mc.padded_vocab = 37;
  mc.block_size = 16;
  mc.n_layer = 2, mc.n_head = 2, mc.n_kv_head = 2, mc.n_embd = 16, mc.head_dim = 8, mc.ffn_hidden = 32;
  auto make = [&](uint64_t seed) {
    Transformer m(mc);
    m->init_weights(seed);
    return m;
  };
  auto data = [&](int it) {
    torch::manual_seed(500 + it);
    return torch::randint(0, mc.vocab_size, {2 * W, mc.block_size + 1}, torch::kLong);  // (2W, T+1)
  };
  constexpr int kSteps = 3;
  // Single process, torch's AdamW on the model's two groups.
  auto ref = make(1);
  auto cfg = config(1);
  auto base = torch::optim::AdamWOptions(cfg.learning_rate).betas({cfg.beta1, cfg.beta2}).eps(1e-8);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(ref->decay_parameters(), std::make_unique<torch::optim::AdamWOptions>(
                                                   torch::optim::AdamWOptions(base).weight_decay(cfg.weight_decay)));
  groups.emplace_back(ref->no_decay_parameters(),
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(base).weight_decay(0.0)));
  torch::optim::AdamW opt(std::move(groups), base);
  std::vector<double> ref_norms;
  for (int it = 0; it < kSteps; ++it) {
    auto d = data(it);
    opt.zero_grad();
    ref->loss(d.narrow(1, 0, mc.block_size), d.narrow(1, 1, mc.block_size)).backward();
    double sq = 0;
    for (auto& p : ref->parameters()) sq += p.grad().pow(2).sum().item<double>();
    ref_norms.push_back(std::sqrt(sq));
    torch::NoGradGuard ng;
    for (auto& p : ref->parameters()) p.mutable_grad().mul_(clip_coef(std::sqrt(sq), cfg.grad_clip));
    opt.step();
  }
  for (bool zero1 : {false, true}) {
    cfg.use_zero1 = zero1;
    cfg.ddp_bucket_mb = 4096.0 / (1 << 20);  // several buckets
    auto model = make(r == 0 ? 1 : 50 + r);
    auto strategy = make_strategy(llmtrain::StrategyOptions::from_config(cfg), model, *c);
    for (int it = 0; it < kSteps; ++it) {
      auto d = data(it).narrow(0, 2 * r, 2);
      strategy->backward(model->loss(d.narrow(1, 0, mc.block_size), d.narrow(1, 1, mc.block_size)), true);
      strategy->finish_gradients();
      const double norm = strategy->grad_norm();
      // Adam is nearly blind to a gradient's scale: the norm is what shows a
      // sum where an average belongs.
      EXPECT_NEAR(norm, ref_norms[it], 1e-5 * ref_norms[it]) << (zero1 ? "zero1" : "ddp") << " step " << it;
      strategy->step(cfg.learning_rate, clip_coef(norm, cfg.grad_clip));
    }
    auto a = ref->parameters(), b = model->parameters();
    ASSERT_EQ(a.size(), b.size());
    // Adam divides by sqrt(v): fp32 reduction-order differences in tiny
    // gradients move parameters by up to ~0.2% of one step (lr = 1e-2), so the
    // bound is 1% of a step.
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-4, 1e-2 * cfg.learning_rate))
          << (zero1 ? "zero1" : "ddp") << " parameter " << i << " differs by "
          << (a[i] - b[i]).abs().max().item<float>();
  }
}

// FSDP over ParamGroups (no model to hook: one resident root unit, gradients
// and optimizer state sharded) against DDP, with accumulation and clipping;
// 187 parameters divide no world size.
TEST(Strategy, FsdpEqualsDdpOnParamGroups) {
  auto c = comm();
  for (int accum : {1, 3}) {
    auto cfg = config(accum);
    const auto ddp = run_strategy(cfg, *c);
    cfg.use_fsdp = true;
    const auto fsdp = run_strategy(cfg, *c);
    ASSERT_GT(ddp.norms[0], cfg.grad_clip);  // clipping was active
    expect_same(ddp, fsdp, "fsdp vs ddp");
    expect_same(run_single(cfg, c->world_size()), fsdp, "fsdp vs single process");
  }
}

// Parameters stored in bf16: FSDP keeps an fp32 master shard (as ZeRO-1 does);
// both must agree to bf16 precision and keep the parameters in bf16.
TEST(Strategy, FsdpBf16ParametersUseFp32MasterLikeZero1) {
  auto c = comm();
  auto cfg = config(2);
  auto run = [&](bool fsdp) {
    cfg.use_zero1 = !fsdp;
    cfg.use_fsdp = fsdp;
    auto net = make_net(7);
    net->to(torch::kBFloat16);
    auto strategy = make_strategy(llmtrain::StrategyOptions::from_config(cfg), net->groups(), *c);
    EXPECT_EQ(strategy->optimizer_state_bytes(), (187 + c->world_size() - 1) / c->world_size() * 3 * 4);
    const int W = c->world_size(), r = c->rank();
    for (int it = 0; it < 3; ++it) {
      auto [x, y] = batch(it, int64_t{W} * 2 * kMicroBatch);
      for (int m = 0; m < 2; ++m) {
        const int64_t row = (int64_t{r} * 2 + m) * kMicroBatch;
        auto out = net->forward(x.narrow(0, row, kMicroBatch).to(torch::kBFloat16)).to(torch::kFloat);
        strategy->backward(torch::mse_loss(out, y.narrow(0, row, kMicroBatch)) / 2, m == 1);
      }
      strategy->finish_gradients();
      const double norm = strategy->grad_norm();
      strategy->step(cfg.learning_rate, clip_coef(norm, cfg.grad_clip));
    }
    std::vector<torch::Tensor> out;
    for (auto& p : net->parameters()) {
      EXPECT_EQ(p.scalar_type(), torch::kBFloat16);
      out.push_back(p.detach().to(torch::kFloat));
    }
    return out;
  };
  const auto zero = run(false);
  const auto fsdp = run(true);
  for (size_t i = 0; i < zero.size(); ++i)
    EXPECT_TRUE(torch::allclose(zero[i], fsdp[i], 1e-2, 1e-2))
        << "parameter " << i << " differs by " << (zero[i] - fsdp[i]).abs().max().item<float>();
}

// The Transformer through a strategy: W ranks x accumulation 2, clipping
// active; its parameters (materialized), gradient norms and persistent bytes.
struct TransformerRun {
  std::vector<torch::Tensor> params;
  std::vector<double> norms;
  int64_t persistent = 0, optimizer = 0;
};
constexpr int kTfSteps = 3, kTfAccum = 2;
TransformerRun run_transformer(const ModelConfig& mc, Collectives& c, Config cfg, bool autocast_bf16 = false) {
  const int W = c.world_size(), r = c.rank();
  Transformer model(mc);
  model->init_weights(r == 0 ? 1 : 60 + r);
  auto strategy = make_strategy(llmtrain::StrategyOptions::from_config(cfg), model, c);
  TransformerRun res;
  res.optimizer = strategy->optimizer_state_bytes();
  for (int it = 0; it < kTfSteps; ++it) {
    torch::manual_seed(700 + it);
    auto d = torch::randint(0, mc.vocab_size, {kTfAccum * W, mc.block_size + 1}, torch::kLong);  // (A*W, T+1)
    for (int m = 0; m < kTfAccum; ++m) {
      auto x = d.narrow(0, r * kTfAccum + m, 1);
      AutocastGuard autocast(torch::kCPU, autocast_bf16 ? torch::kBFloat16 : torch::kFloat);
      auto loss = model->loss(x.narrow(1, 0, mc.block_size), x.narrow(1, 1, mc.block_size)) / kTfAccum;
      strategy->backward(loss, m + 1 == kTfAccum);
    }
    strategy->finish_gradients();
    const double norm = strategy->grad_norm();
    res.norms.push_back(norm);
    strategy->step(cfg.learning_rate, clip_coef(norm, cfg.grad_clip));
    if (it == 0) res.persistent = strategy->persistent_state_bytes();
  }
  strategy->materialize_parameters();
  for (auto& p : model->parameters()) res.params.push_back(p.detach().clone());
  return res;
}

// FSDP (units gathered in forward and again in backward, gradients
// reduce-scattered per unit) equals DDP: parameter and gradient norms.
// Memory: what FSDP keeps between iterations is 1/W of DDP's (plus padding).
void expect_fsdp_equals_ddp(const ModelConfig& mc, Collectives& c, bool prefetch) {
  auto cfg = config(kTfAccum);
  cfg.fsdp_prefetch = prefetch;
  const auto ddp = run_transformer(mc, c, cfg);
  cfg.use_fsdp = true;
  const auto fsdp = run_transformer(mc, c, cfg);
  ASSERT_GT(ddp.norms[0], cfg.grad_clip);  // clipping was active
  for (size_t i = 0; i < ddp.norms.size(); ++i) EXPECT_NEAR(fsdp.norms[i], ddp.norms[i], 1e-5 * ddp.norms[i]);
  ASSERT_EQ(ddp.params.size(), fsdp.params.size());
  for (size_t i = 0; i < ddp.params.size(); ++i)
    EXPECT_TRUE(torch::allclose(ddp.params[i], fsdp.params[i], 1e-4, 1e-2 * cfg.learning_rate))
        << "parameter " << i << " differs by " << (ddp.params[i] - fsdp.params[i]).abs().max().item<float>();
  // DDP: 12 bytes per parameter (fp32 value, two moments; its gradient
  // buckets live from the backward to the step, issue 46). FSDP: 16 per shard
  // element (its gradient shard stays), each unit padded to a multiple of W (L + 2 units).
  const int64_t N = mc.num_params(), W = c.world_size();
  EXPECT_EQ(ddp.persistent, 12 * N);
  EXPECT_GE(fsdp.persistent, 16 * N / W);
  EXPECT_LE(fsdp.persistent, 16 * ((N + W - 1) / W + mc.n_layer + 2));
}

// Parameter counts per unit do not divide 2 or 3.
TEST(Strategy, TransformerFsdpEqualsDdpAndShardsMemory) {
  // FSDP's reduce-scatters (one in flight) and prefetched gathers run async:
  // both MPI ways, with and without prefetch.
  for (auto mode : {MpiAsync::nonblocking, MpiAsync::comm_thread})
  for (bool prefetch : {true, false}) {
    SCOPED_TRACE(fmt::format("{} prefetch {}", mode == MpiAsync::nonblocking ? "nonblocking" : "comm thread", prefetch));
    auto c = make_collectives(testing::runtime(), torch::kCPU, mode);
    ModelConfig mc;
    mc.vocab_size = mc.padded_vocab = 37;
    mc.block_size = 16;
    mc.n_layer = 3, mc.n_head = 2, mc.n_kv_head = 1, mc.n_embd = 14, mc.head_dim = 8, mc.ffn_hidden = 29;
    expect_fsdp_equals_ddp(mc, *c, prefetch);
  }
}

// Activation checkpointing through every strategy, for every tiny preset (with
// dropout on and 2 micro-steps): one step leaves AdamW's first moment, which is
// (1 - beta1) x the averaged gradient without clipping, on every element this
// rank holds, equal to none's within 1e-6 of gradient. FSDP gathers a block
// again before its backward, so the recompute reads gathered parameters; a
// recompute reading freed or stale ones, or a hook that fired twice, fails here.
TEST(Strategy, ActivationCheckpointingKeepsEveryGradientForEachFamilyAndStrategy) {
  auto c = comm();
  const int W = c->world_size(), r = c->rank();
  constexpr int kAccum = 2;
  constexpr int64_t T = 32;
  auto first_moment = [&](ModelConfig mc, StrategyKind kind, ActivationCheckpointing mode) {
    mc.recompute = mode;
    auto cfg = config(kAccum);
    cfg.grad_clip = 0.0;
    cfg.use_zero1 = kind == StrategyKind::zero1;
    cfg.use_fsdp = kind == StrategyKind::fsdp;
    Transformer model(mc);
    model->init_weights(5);
    auto strategy = make_strategy(llmtrain::StrategyOptions::from_config(cfg), model, *c);
    torch::manual_seed(800);
    auto d = torch::randint(0, mc.vocab_size, {kAccum * W, T + 1}, torch::kLong);  // (A*W, T+1)
    for (int m = 0; m < kAccum; ++m) {
      torch::manual_seed(900 + 10 * r + m);  // the dropout draws
      auto x = d.narrow(0, r * kAccum + m, 1);
      strategy->backward(model->loss(x.narrow(1, 0, T), x.narrow(1, 1, T)) / kAccum, m + 1 == kAccum);
    }
    strategy->finish_gradients();
    strategy->step(cfg.learning_rate, 1.0);
    std::vector<torch::Tensor> out;
    for (auto& s : strategy->save_slices(StateTensor::exp_avg)) out.push_back(s.values / (1.0 - cfg.beta1));
    return out;
  };
  for (const char* preset : {"tiny_gpt2", "tiny_llama", "tiny_llama3", "tiny_qwen3"}) {
    auto mc = ModelConfig::from_config(testing::load_preset(preset), 0);
    mc.dropout = 0.1;
    for (auto kind : {StrategyKind::ddp, StrategyKind::zero1, StrategyKind::fsdp}) {
      const auto none = first_moment(mc, kind, ActivationCheckpointing::none);
      for (auto mode : {ActivationCheckpointing::full, ActivationCheckpointing::selective}) {
        SCOPED_TRACE(fmt::format("{} {} {}", preset, to_string(kind), to_string(mode)));
        const auto got = first_moment(mc, kind, mode);
        ASSERT_EQ(got.size(), none.size());
        double largest = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          largest = std::max(largest, none[i].abs().max().item<double>());
          EXPECT_LE((got[i] - none[i]).abs().max().item<double>(), 1e-6) << "slice " << i;
        }
        if (!none.empty()) EXPECT_GT(largest, 1e-4);  // gradients arrived (DDP: rank 0 saves whole tensors)
      }
    }
  }
}

// GPT-2's tied table (wte is the LM head): the embedding unit owns it and stays
// gathered until the end of the backward; learned positions join it.
ModelConfig tiny_gpt2_shape() {
  ModelConfig mc;
  mc.vocab_size = mc.padded_vocab = 37;
  mc.block_size = 16;
  mc.n_layer = 2, mc.n_head = 2, mc.n_kv_head = 2, mc.n_embd = 14, mc.head_dim = 7, mc.ffn_hidden = 29;
  mc.norm = NormKind::layernorm;
  mc.ffn = FfnKind::gelu;
  mc.pos_encoding = PosEncoding::learned;
  mc.bias = true;
  mc.tie_embeddings = true;
  return mc;
}
TEST(Strategy, TransformerFsdpWithTiedEmbeddingsEqualsDdp) {
  auto c = comm();
  for (bool prefetch : {true, false}) {
    SCOPED_TRACE(fmt::format("prefetch {}", prefetch));
    expect_fsdp_equals_ddp(tiny_gpt2_shape(), *c, prefetch);
  }
}

// param_dtype=bfloat16 under bf16 autocast, every strategy: the model's
// parameters are bf16, AdamW keeps fp32 masters (12 bytes per element of its
// shards: master + moments), the saved weights are those masters, and training
// follows the fp32-parameter run: its update differs from fp32's by a small
// part of the update itself (a strategy whose master or gradients went wrong
// would not). reduce_dtype=bfloat16 as well.
TEST(Strategy, Bf16ParametersKeepFp32MastersAndTrackFp32ForEveryStrategy) {
  auto c = comm();
  const int64_t W = c->world_size();
  ModelConfig mc;
  mc.vocab_size = mc.padded_vocab = 37;
  mc.block_size = 16;
  mc.n_layer = 2, mc.n_head = 2, mc.n_kv_head = 1, mc.n_embd = 16, mc.head_dim = 8, mc.ffn_hidden = 32;
  Transformer init(mc);
  init->init_weights(1);
  const auto start = init->parameters();
  for (auto kind : {StrategyKind::ddp, StrategyKind::zero1, StrategyKind::fsdp})
  for (auto reduce : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(fmt::format("{} reduce {}", to_string(kind), c10::toString(reduce)));
    auto cfg = config(kTfAccum);
    cfg.use_zero1 = kind == StrategyKind::zero1;
    cfg.use_fsdp = kind == StrategyKind::fsdp;
    const auto ref = run_transformer(mc, *c, cfg, /*autocast_bf16=*/true);
    cfg.param_dtype = ParamDtype::bfloat16;
    cfg.reduce_dtype = reduce == torch::kBFloat16 ? ReduceDtype::bfloat16 : ReduceDtype::float32;
    const auto bf16 = run_transformer(mc, *c, cfg, /*autocast_bf16=*/true);
    const int64_t N = mc.num_params();
    if (kind == StrategyKind::ddp) EXPECT_EQ(bf16.optimizer, 12 * N);
    else EXPECT_LE(bf16.optimizer, 12 * ((N + W - 1) / W + mc.n_layer + 2));
    EXPECT_EQ(ref.optimizer * 3, bf16.optimizer * 2);  // fp32 parameters are their own master
    double moved = 0, off = 0;
    for (size_t i = 0; i < ref.params.size(); ++i) {
      EXPECT_EQ(bf16.params[i].scalar_type(), torch::kBFloat16);
      moved += (ref.params[i] - start[i]).pow(2).sum().item<double>();
      off += (bf16.params[i].to(torch::kFloat) - ref.params[i]).pow(2).sum().item<double>();
    }
    EXPECT_GT(moved, 0);
    EXPECT_LT(std::sqrt(off / moved), 0.25) << "bf16 parameters moved " << std::sqrt(off / moved)
                                            << " of the fp32 update away from it";
    for (size_t i = 0; i < ref.norms.size(); ++i) EXPECT_NEAR(bf16.norms[i], ref.norms[i], 0.05 * ref.norms[i]);
  }
}

// The weights a checkpoint saves under param_dtype=bfloat16 are the fp32
// masters, made from the fp32 initial values (not from their bf16 rounding),
// which the bf16 parameters are rounded from.
TEST(Strategy, Bf16ParametersSaveFp32Masters) {
  auto c = comm();
  ModelConfig mc;
  mc.vocab_size = mc.padded_vocab = 37;
  mc.block_size = 16;
  mc.n_layer = 2, mc.n_head = 2, mc.n_kv_head = 1, mc.n_embd = 16, mc.head_dim = 8, mc.ffn_hidden = 32;
  auto cfg = config(1);
  cfg.param_dtype = ParamDtype::bfloat16;
  Transformer model(mc);
  model->init_weights(1);
  Transformer fp32(mc);
  fp32->init_weights(1);
  cfg.use_fsdp = true;
  auto fsdp = make_strategy(llmtrain::StrategyOptions::from_config(cfg), model, *c);
  fsdp->materialize_parameters();
  const auto params = model->parameters(), exact = fp32->parameters();
  // The masters start from the fp32 values, not from their bf16 rounding.
  for (const auto& sl : fsdp->save_slices(StateTensor::weights)) {
    ASSERT_EQ(sl.values.scalar_type(), torch::kFloat);
    const auto want = exact[static_cast<size_t>(sl.param)].detach().reshape({-1}).narrow(0, sl.offset, sl.values.numel());
    EXPECT_TRUE(torch::equal(sl.values, want)) << "parameter " << sl.param;
    const auto held = params[static_cast<size_t>(sl.param)].detach().reshape({-1}).narrow(0, sl.offset, sl.values.numel());
    EXPECT_TRUE(torch::equal(sl.values.to(torch::kBFloat16), held)) << "parameter " << sl.param;
  }
}
// Passes every collective on and logs it ("ag" all-gather, "rs" reduce-scatter,
// "ar" allreduce, "bc" broadcast) in the order it was issued.
class RecordingCollectives final : public Collectives {
 public:
  RecordingCollectives(Collectives& inner, std::vector<std::string>& log) : in_(inner), log_(log) {}
  std::string name() const override { return in_.name(); }
  int rank() const override { return in_.rank(); }
  int world_size() const override { return in_.world_size(); }
  void allreduce_sum(torch::Tensor& t) override { log_.push_back("ar"), in_.allreduce_sum(t); }
  void broadcast(torch::Tensor& t, int root) override { log_.push_back("bc"), in_.broadcast(t, root); }
  void reduce_scatter_sum(const torch::Tensor& i, torch::Tensor& o) override {
    log_.push_back("rs"), in_.reduce_scatter_sum(i, o);
  }
  void all_gather(const torch::Tensor& i, torch::Tensor& o) override { log_.push_back("ag"), in_.all_gather(i, o); }
  std::unique_ptr<CommWork> allreduce_sum_async(torch::Tensor& t) override {
    return log_.push_back("ar"), in_.allreduce_sum_async(t);
  }
  std::unique_ptr<CommWork> reduce_scatter_sum_async(const torch::Tensor& i, torch::Tensor& o) override {
    return log_.push_back("rs"), in_.reduce_scatter_sum_async(i, o);
  }
  std::unique_ptr<CommWork> all_gather_async(const torch::Tensor& i, torch::Tensor& o) override {
    return log_.push_back("ag"), in_.all_gather_async(i, o);
  }

 private:
  Collectives& in_;
  std::vector<std::string>& log_;
};

// Around the strategy's hooks: logs "fwd i" when block i's body starts and
// "bwd i" when its backward starts (the gradient of its output arrives).
class RecordingHooks final : public ForwardHooks {
 public:
  RecordingHooks(std::shared_ptr<ForwardHooks> inner, std::vector<std::string>& log) : in_(std::move(inner)), log_(log) {}
  void before_forward() override { in_->before_forward(); }
  torch::Tensor run_embedding(const std::function<torch::Tensor()>& body) override { return in_->run_embedding(body); }
  torch::Tensor before_head(const torch::Tensor& x) override { return in_->before_head(x); }
  torch::Tensor run_block(int64_t i, const torch::Tensor& x,
                          const std::function<torch::Tensor(const torch::Tensor&)>& body) override {
    return in_->run_block(i, x, [&, i](const torch::Tensor& h) {
      log_.push_back(fmt::format("fwd {}", i));
      auto y = body(h);
      y.register_hook([this, i](torch::Tensor g) {
        log_.push_back(fmt::format("bwd {}", i));
        return g;
      });
      return y;
    });
  }

 private:
  std::shared_ptr<ForwardHooks> in_;
  std::vector<std::string>& log_;
};

// Prefetch: unit k+1's all-gather is issued before unit k computes in
// forward (the embedding's issues block 0's), block i-1's before block i's
// backward; without it each gather comes right before its unit. The same
// sequence on every rank (the test runs at 2 and 3 ranks), and the same loss.
TEST(Strategy, FsdpPrefetchIssuesTheNextBlocksGatherBeforeTheCurrentBlockComputes) {
  auto c = comm();
  ModelConfig mc;
  mc.vocab_size = mc.padded_vocab = 19;
  mc.block_size = 8;
  mc.n_layer = 3, mc.n_head = 2, mc.n_kv_head = 2, mc.n_embd = 8, mc.head_dim = 4, mc.ffn_hidden = 12;
  torch::manual_seed(5);
  const auto tokens = torch::randint(0, mc.vocab_size, {2, mc.block_size + 1}, torch::kLong);
  auto run = [&](bool prefetch, double* loss_out) {
    std::vector<std::string> log;
    RecordingCollectives rec(*c, log);
    Transformer model(mc);
    model->init_weights(3);
    auto cfg = config(1);
    cfg.use_fsdp = true;
    cfg.fsdp_prefetch = prefetch;
    auto strategy = make_strategy(llmtrain::StrategyOptions::from_config(cfg), model, rec);
    model->set_forward_hooks(std::make_shared<RecordingHooks>(model->forward_hooks(), log));
    log.clear();  // the start-up broadcasts
    auto loss = model->loss(tokens.narrow(1, 0, mc.block_size), tokens.narrow(1, 1, mc.block_size));
    log.push_back("|");
    strategy->backward(loss, /*last_micro=*/true);
    *loss_out = loss.item<double>();
    std::string s;
    for (const auto& e : log) s += (s.empty() ? "" : ", ") + e;
    return s;
  };
  double with = 0, without = 0;
  // Units in forward order: embedding, blocks 0-2, head. Forward: the
  // embedding (gathered), block 0 (prefetched by the embedding), block 1 ...,
  // the head (prefetched by block 2); backward: the head's reduce-scatter,
  // block 2 (gathered), block 1 (prefetched) ...; the embedding's
  // reduce-scatter last (its backward reads no weights: never gathered again).
  EXPECT_EQ(run(true, &with),
            "ag, ag, ag, fwd 0, ag, fwd 1, ag, fwd 2, |, rs, ag, ag, bwd 2, rs, ag, bwd 1, rs, bwd 0, rs, rs");
  EXPECT_EQ(run(false, &without),
            "ag, ag, fwd 0, ag, fwd 1, ag, fwd 2, ag, |, rs, ag, bwd 2, rs, ag, bwd 1, rs, ag, bwd 0, rs, rs");
  EXPECT_EQ(with, without);
}

TEST(Strategy, FsdpHooksOutliveTheStrategyWithAClearError) {
  auto c = comm();
  ModelConfig mc;
  mc.vocab_size = mc.padded_vocab = 11;
  mc.block_size = 4;
  mc.n_layer = 1, mc.n_head = 1, mc.n_kv_head = 1, mc.n_embd = 8, mc.head_dim = 8, mc.ffn_hidden = 8;
  Transformer model(mc);
  auto cfg = config(1);
  cfg.use_fsdp = true;
  make_strategy(llmtrain::StrategyOptions::from_config(cfg), model, *c).reset();
  EXPECT_THROW(model->forward(torch::zeros({1, 4}, torch::kLong)), std::exception);
}

}  // namespace
}  // namespace llmtrain
