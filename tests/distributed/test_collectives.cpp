// MpiCollectives: every operation and dtype against values computed by hand.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <thread>

#include "llmtrain/distributed/collectives.hpp"
#include "test_util.hpp"

namespace llmtrain {
namespace {

std::unique_ptr<Collectives> comm() { return make_collectives(testing::runtime(), torch::kCPU); }

TEST(Collectives, AllreduceSumPerDtype) {
  auto c = comm();
  const int W = c->world_size(), r = c->rank();
  EXPECT_EQ(c->name(), "mpi");
  for (auto dt : {torch::kFloat, torch::kDouble, torch::kBFloat16}) {
    // rank r holds (r+1) * [0, 1, ..., 9]: small integers, exact in bf16.
    auto t = (torch::arange(10, torch::kFloat) * (r + 1)).to(dt);
    c->allreduce_sum(t);
    const auto want = torch::arange(10, torch::kFloat) * (W * (W + 1) / 2);
    EXPECT_TRUE(torch::equal(t.to(torch::kFloat), want)) << c10::toString(dt);
  }
}

TEST(Collectives, Bf16SumRoundsEachStep) {
  auto c = comm();
  // 1 + (W-1) * 2^-9: each partial sum rounds to bf16 (ulp 2^-7 at 1), so the
  // small terms vanish one by one; an fp32 sum rounded once would give 1 + 2^-7
  // at W = 3.
  auto t = torch::full({4}, c->rank() == 0 ? 1.0f : 1.0f / 512, torch::kFloat).to(torch::kBFloat16);
  c->allreduce_sum(t);
  EXPECT_EQ(t[0].item<float>(), 1.0f);
}

TEST(Collectives, BroadcastFromRoot) {
  auto c = comm();
  const int root = c->world_size() - 1;
  auto t = torch::full({7}, static_cast<float>(c->rank()));
  c->broadcast(t, root);
  EXPECT_TRUE(torch::equal(t, torch::full({7}, static_cast<float>(root))));
}

TEST(Collectives, ReduceScatterAndAllGather) {
  auto c = comm();
  const int W = c->world_size(), r = c->rank();
  const int64_t n = 5;  // does not divide anything on purpose
  auto in = torch::arange(W * n, torch::kFloat) + 100 * r;
  auto out = torch::empty({n});
  c->reduce_scatter_sum(in, out);
  // sum over ranks q of (i + 100 q) for i in [r*n, (r+1)*n)
  auto want = (torch::arange(r * n, (r + 1) * n, torch::kFloat) * W) + 100.0 * (W * (W - 1) / 2);
  EXPECT_TRUE(torch::allclose(out, want));

  auto gathered = torch::empty({W * n});
  auto mine = torch::full({n}, static_cast<float>(r));
  c->all_gather(mine, gathered);
  for (int q = 0; q < W; ++q)
    EXPECT_TRUE(torch::equal(gathered.narrow(0, q * n, n), torch::full({n}, static_cast<float>(q))));

  // In place: the input is this rank's slice of the output.
  auto flat = torch::full({W * n}, -1.0f);
  flat.narrow(0, r * n, n).fill_(static_cast<float>(10 * r));
  auto slice = flat.narrow(0, r * n, n);
  c->all_gather(slice, flat);
  for (int q = 0; q < W; ++q)
    EXPECT_TRUE(torch::equal(flat.narrow(0, q * n, n), torch::full({n}, static_cast<float>(10 * q))));
}

TEST(Collectives, AsyncMatchesBlockingAndCountsCalls) {
  for (auto mode : {MpiAsync::comm_thread, MpiAsync::nonblocking}) {
    auto c = make_collectives(testing::runtime(), torch::kCPU, mode);
    const int W = c->world_size(), r = c->rank();
    const auto before = c->num_calls();
    auto a = torch::ones({1000});
    auto w1 = c->allreduce_sum_async(a);
    auto in = torch::ones({W * 3}, torch::kDouble);
    auto out = torch::empty({3}, torch::kDouble);
    auto w2 = c->reduce_scatter_sum_async(in, out);
    // Several queued at once, each with its own values: they complete in
    // order and into their own buffers, while the caller runs a blocking
    // collective of its own.
    std::vector<torch::Tensor> bufs;
    std::vector<std::unique_ptr<CommWork>> works;
    for (int k = 0; k < 5; ++k) {
      bufs.push_back(torch::full({4096 * (k + 1)}, static_cast<float>(k + r)));
      works.push_back(c->allreduce_sum_async(bufs.back()));
    }
    auto b = torch::ones({7}, torch::kLong);
    c->allreduce_sum(b);
    EXPECT_TRUE(torch::equal(b, torch::full({7}, W, torch::kLong)));
    while (!w1->test()) {
    }
    w2->wait();
    for (auto& w : works) w->wait();
    EXPECT_TRUE(torch::equal(a, torch::full({1000}, static_cast<float>(W))));
    EXPECT_TRUE(torch::equal(out, torch::full({3}, static_cast<double>(W), torch::kDouble)));
    for (int k = 0; k < 5; ++k)  // sum over ranks of (k + r)
      EXPECT_TRUE(torch::equal(bufs[k], torch::full({4096 * (k + 1)}, static_cast<float>(k * W + W * (W - 1) / 2))))
          << "buffer " << k;
    EXPECT_EQ(c->num_calls() - before, 8);
    // Above 32 MiB the thread mode hands over to the nonblocking path.
    auto big = torch::ones({(int64_t{33} << 20) / 4});
    c->allreduce_sum_async(big)->wait();
    EXPECT_TRUE(torch::equal(big, torch::full_like(big, static_cast<float>(W))));
  }
}

// FSDP prefetches block parameters and ZeRO-1 overlaps its parameter gathers:
// several all-gathers in flight at once, separate and in place, fp32 and bf16,
// both MPI modes, finish into their own buffers.
TEST(Collectives, AsyncAllGatherMatchesBlocking) {
  for (auto mode : {MpiAsync::comm_thread, MpiAsync::nonblocking}) {
    auto c = make_collectives(testing::runtime(), torch::kCPU, mode);
    const int W = c->world_size(), r = c->rank();
    const auto before = c->num_calls();
    std::vector<torch::Tensor> ins, outs;
    std::vector<std::unique_ptr<CommWork>> works;
    for (int k = 0; k < 4; ++k) {
      const int64_t n = 1000 * (k + 1) + 3;
      const auto dtype = k % 2 ? torch::kBFloat16 : torch::kFloat;
      ins.push_back(torch::full({n}, static_cast<float>(10 * r + k), dtype));
      outs.push_back(torch::full({W * n}, -1.0f, dtype));
      works.push_back(c->all_gather_async(ins.back(), outs.back()));
    }
    // In place, while the others are in flight.
    const int64_t m = 257;
    auto flat = torch::full({W * m}, -1.0f);
    flat.narrow(0, r * m, m).fill_(static_cast<float>(7 * r));
    auto slice = flat.narrow(0, r * m, m);
    auto w_in_place = c->all_gather_async(slice, flat);
    for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();  // any order
    while (!w_in_place->test()) {
    }
    for (int k = 0; k < 4; ++k) {
      const int64_t n = ins[k].numel();
      for (int q = 0; q < W; ++q)
        EXPECT_TRUE(torch::equal(outs[k].narrow(0, q * n, n), torch::full({n}, static_cast<float>(10 * q + k),
                                                                          outs[k].scalar_type())))
            << "buffer " << k << " slice " << q;
    }
    for (int q = 0; q < W; ++q)
      EXPECT_TRUE(torch::equal(flat.narrow(0, q * m, m), torch::full({m}, static_cast<float>(7 * q))));
    EXPECT_EQ(c->num_calls() - before, 5);
    auto bad = torch::ones({5});
    if (W > 1) EXPECT_THROW(c->all_gather_async(bad, bad), std::exception);
  }
}

// waited_seconds() counts the host time blocked in collectives: a rank that
// arrives 50 ms late makes the others wait about that long, in a blocking call
// and in CommWork::wait() alike; issuing nonblocking work and test() count
// nothing. Both MPI ways of running the nonblocking forms.
TEST(Collectives, WaitedSecondsCountsTheBlockedHostTime) {
  for (auto mode : {MpiAsync::nonblocking, MpiAsync::comm_thread}) {
    auto c = make_collectives(testing::runtime(), torch::kCPU, mode);
    const bool late = c->rank() == 0;
    auto arrive = [&] {
      if (late) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    };
    auto t = torch::ones({1000});
    double before = c->waited_seconds();
    arrive();
    c->allreduce_sum(t);
    const double blocking = c->waited_seconds() - before;
    before = c->waited_seconds();
    arrive();
    auto work = c->allreduce_sum_async(t);
    work->test();
    const double issued = c->waited_seconds() - before;
    work->wait();
    const double waited = c->waited_seconds() - before;
    EXPECT_EQ(issued, 0.0);
    EXPECT_GT(blocking, 0.0);
    EXPECT_GT(waited, 0.0);
    if (c->world_size() > 1 && !late) {
      EXPECT_GE(blocking, 0.03);
      EXPECT_GE(waited, 0.03);
    }
  }
}

TEST(Collectives, RefusesBadBuffers) {
  auto c = comm();
  auto t = torch::ones({4, 4}).t();
  EXPECT_THROW(c->allreduce_sum(t), std::exception);  // non-contiguous
  auto h = torch::ones({4}, torch::kHalf);
  EXPECT_THROW(c->allreduce_sum(h), std::exception);
  auto in = torch::ones({5}), out = torch::ones({5});
  if (c->world_size() > 1) EXPECT_THROW(c->reduce_scatter_sum(in, out), std::exception);
}

}  // namespace
}  // namespace llmtrain
