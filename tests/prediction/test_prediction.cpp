// The performance model (prediction/cost_model.hpp): its terms respond to the
// inputs the way the code behaves (bucket layout, attention backend, FSDP
// prefetch, sharding, the link), device profiles read and write; and the
// published GPU runs of docs/performance-model.md are predicted with one set of
// device constants. (The run's check against the prediction, record/'s
// PredictionCheck: tests/train/test_prediction_check.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "llmtrain/distributed/bucket_layout.hpp"
#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/model/params.hpp"
#include "llmtrain/prediction/cost_model.hpp"
#include "llmtrain/prediction/validation.hpp"
#include "h100_measured.hpp"
#include "published_runs.hpp"
#include "test_util.hpp"

using namespace llmtrain;

namespace {

ModelConfig llama(int64_t L, int64_t d, int64_t heads, int64_t T, int64_t vocab) {
  ModelConfig m;
  m.vocab_size = m.padded_vocab = vocab;
  m.block_size = T;
  m.n_layer = L;
  m.n_head = m.n_kv_head = heads;
  m.n_embd = d;
  m.head_dim = d / heads;
  m.ffn_hidden = (8 * d / 3 + 255) / 256 * 256;
  return m;
}

RunShape run(const ModelConfig& m, ComputeDtype dtype, int64_t batch, StrategyKind s) {
  RunShape r;
  r.model = m;
  r.dtype = dtype;
  r.batch_size = batch;
  r.strategy = s;
  return r;
}

}  // namespace

TEST(BucketLayout, ReverseOrderDtypeSplitAndPadding) {
  // Sizes in elements of 4 bytes; buckets close once they hold >= 40 bytes.
  std::vector<BucketParam> ps = {{3, 4, 0, true}, {5, 4, 0, true}, {2, 4, 0, false}, {7, 4, 0, true},
                                 {4, 2, 1, true}, {6, 4, 0, true}};
  const BucketLayout l = plan_bucket_layout(ps, 40.0, 4);
  // Reverse: 6 (24 B) + 4-bf16 starts a new bucket (dtype), then 7, then 5 (7*4 = 28 < 40, so 5 joins), then 3.
  ASSERT_EQ(l.buckets.size(), 4u);
  EXPECT_EQ(l.slots[0].param, 5);
  EXPECT_EQ(l.slots[1].param, 4);
  EXPECT_EQ(l.buckets[1].element_size, 2);
  EXPECT_EQ(l.slots[2].param, 3);
  EXPECT_EQ(l.slots[3].param, 1);
  EXPECT_EQ(l.slots[3].bucket, 2);
  EXPECT_EQ(l.slots[3].offset, 7);
  EXPECT_EQ(l.buckets[2].numel, 12);  // 7 + 5, padded to a multiple of 4
  EXPECT_EQ(l.slots[4].param, 0);
  EXPECT_EQ(l.buckets[3].numel, 4);   // 3 padded to 4
  for (const auto& s : l.slots) EXPECT_NE(s.param, 2);  // frozen parameters get no slot
}

TEST(CostModel, PhasesRespondToTheirInputs) {
  const auto h100 = load_device_profile("h100_sxm");
  const ModelConfig m = llama(12, 768, 12, 1024, 32000);
  const WorldLayout one{1, 1}, node{8, 8}, nodes{16, 8};
  const auto base = predict_step(run(m, ComputeDtype::bfloat16, 8, StrategyKind::ddp), one, h100);
  EXPECT_GT(base.forward_s, 0);
  EXPECT_GT(base.backward_s, base.forward_s);
  EXPECT_EQ(base.communication_s, 0);  // one rank: nothing to wait for
  EXPECT_NEAR(base.step_time_s,
              base.data_s + base.forward_s + base.backward_s + base.communication_s + base.optimizer_s, 1e-12);
  ASSERT_TRUE(base.mfu_percent.has_value());
  EXPECT_GT(*base.mfu_percent, 5.0);
  EXPECT_LT(*base.mfu_percent, 100.0);
  // Twice the batch: the GEMMs, attention and activation traffic double; the
  // per-micro-batch weight casts, gradient copies and launches do not. Without
  // the tile terms the GEMMs take twice as long; with tile waves less than
  // that: at 8 x 1024 tokens a 768-wide output is 43 x 4 tiles, 2 waves of 132
  // SMs 65% full, at 16 x 1024 86 x 4 tiles, 3 waves 87% full. Hopper's
  // stream-K kernels (gemm_tile_k) wave over K steps: both batches fill the SMs.
  const auto twice = predict_step(run(m, ComputeDtype::bfloat16, 16, StrategyKind::ddp), one, h100);
  auto untiled = h100, tile_waves = h100;
  untiled.gemm_tile_m = untiled.gemm_tile_n = 0;
  tile_waves.gemm_tile_k = 0;
  auto matmul = [&](const DeviceProfile& p, int64_t batch) {
    return predict_step(run(m, ComputeDtype::bfloat16, batch, StrategyKind::ddp), one, p).matmul_s;
  };
  EXPECT_NEAR(matmul(untiled, 16) / matmul(untiled, 8), 2.0, 0.15);  // less a launch per GEMM
  EXPECT_GT(matmul(tile_waves, 16) / matmul(tile_waves, 8), 1.6);
  EXPECT_LT(matmul(tile_waves, 16) / matmul(tile_waves, 8), 1.9);
  EXPECT_NEAR(twice.matmul_s / base.matmul_s, 2.0, 0.1);
  EXPECT_GT(twice.forward_backward_s() / base.forward_backward_s(), 1.6);
  EXPECT_LT(twice.forward_backward_s() / base.forward_backward_s(), 2.0);
  // fp32 runs on TF32, half the bf16 rate: slower.
  EXPECT_GT(predict_step(run(m, ComputeDtype::float32, 8, StrategyKind::ddp), one, h100).matmul_s,
            1.8 * base.matmul_s);
  // The manual path streams (T, T) scores through memory; the fused kernel does not.
  RunShape manual = run(m, ComputeDtype::bfloat16, 8, StrategyKind::ddp);
  manual.model.attention_backend = AttentionBackend::manual;
  EXPECT_GT(predict_step(manual, one, h100).attention_s, 3.0 * base.attention_s);
  // Across nodes the gradients cross InfiniBand. With one GPU per node the
  // ring runs at one NIC's bandwidth; with eight, the node's eight NICs carry it
  // together, capped at NVLink's figure.
  const RunShape ddp = run(m, ComputeDtype::bfloat16, 8, StrategyKind::ddp);
  const auto in_node = predict_step(ddp, node, h100);
  const auto across = predict_step(ddp, nodes, h100);
  const auto one_per_node = predict_step(ddp, {16, 1}, h100);
  EXPECT_GT(across.communication_total_s, in_node.communication_total_s);
  EXPECT_GT(one_per_node.communication_total_s, 4.0 * across.communication_total_s);
  // A node's NICs together faster than NVLink: the node's links bound the ring.
  auto fat = h100, at_cap = h100;
  fat.inter_node_busbw_gbps = h100.intra_node_busbw_gbps;       // 8 x NVLink's figure in all
  at_cap.inter_node_busbw_gbps = h100.intra_node_busbw_gbps / 8;  // exactly NVLink's
  EXPECT_DOUBLE_EQ(predict_step(ddp, nodes, fat).communication_total_s,
                   predict_step(ddp, nodes, at_cap).communication_total_s);
  EXPECT_GT(across.communication_total_s, predict_step(ddp, nodes, at_cap).communication_total_s);
  // ZeRO-1 steps 1/W of AdamW.
  const auto z1 = predict_step(run(m, ComputeDtype::bfloat16, 8, StrategyKind::zero1), node, h100);
  EXPECT_LT(z1.optimizer_s, 0.3 * in_node.optimizer_s);
  // FSDP without prefetch waits for every gather.
  RunShape fsdp = run(m, ComputeDtype::bfloat16, 1, StrategyKind::fsdp);
  const auto pre = predict_step(fsdp, nodes, h100);
  fsdp.fsdp_prefetch = false;
  EXPECT_GT(predict_step(fsdp, nodes, h100).communication_s, pre.communication_s);
}

// The element-wise term against the ops a block actually runs:
// tests/record/test_block_bytes.cpp (records them; replaces the test that
// re-derived the cost model's formula here).

TEST(CostModel, DdpBucketsOverlapBackward) {
  // Buckets start during backward: with many buckets only the tail is exposed;
  // one bucket holding everything starts at the end and is exposed whole.
  auto a100 = load_device_profile("a100_sxm_80gb");
  const ModelConfig m = llama(24, 2048, 16, 2048, 32000);
  RunShape r = run(m, ComputeDtype::bfloat16, 4, StrategyKind::ddp);
  const WorldLayout w{8, 8};
  const auto small = predict_step(r, w, a100);
  r.bucket_bytes = 1e12;
  const auto whole = predict_step(r, w, a100);
  EXPECT_NEAR(whole.communication_s, whole.communication_total_s, 1e-9);
  EXPECT_LT(small.communication_s, 0.5 * whole.communication_s);
  // A CPU-like profile whose MPI does not progress under compute exposes it all.
  a100.comm_overlap = 0.0;
  r.bucket_bytes = 25.0 * 1024 * 1024;
  const auto none = predict_step(r, w, a100);
  EXPECT_NEAR(none.communication_s, none.communication_total_s, 1e-9);
}

TEST(CostModel, CalibratedGemmRatesAreUsed) {
  auto p = load_device_profile("cpu_dev");
  const ModelConfig m = llama(2, 64, 4, 128, 256);
  const RunShape r = run(m, ComputeDtype::float32, 8, StrategyKind::ddp);
  const double before = predict_step(r, {1, 1}, p).matmul_s;
  const auto g = forward_gemms(m, 8).back();  // the LM head
  p.gemm_tflops[gemm_key(g.m, g.n, g.k, false)] = p.matmul_tflops_fp32 / 10.0;
  EXPECT_GT(predict_step(r, {1, 1}, p).matmul_s, before);
}

// A save's blocking time: DDP's rank 0 writes the whole state, a sharded rank
// 1/W; synchronous = device -> host copy + write, asynchronous = the copy alone
// while the write fits in the interval, plus what does not.
TEST(CostModel, CheckpointBlockingSyncAndAsync) {
  const auto h100 = load_device_profile("h100_sxm");
  ASSERT_GT(h100.d2h_gbps, 40);  // PCIe Gen5 x16, 64 GB/s one way
  ASSERT_LT(h100.d2h_gbps, 64);
  const ModelConfig m = llama(12, 768, 12, 1024, 32000);
  const WorldLayout node{8, 8};
  RunShape r = run(m, ComputeDtype::bfloat16, 8, StrategyKind::ddp);
  r.checkpoint_interval = 100;
  const double state = 12.0 * static_cast<double>(m.num_params());
  const auto ddp = predict_step(r, node, h100);
  EXPECT_DOUBLE_EQ(ddp.checkpoint_bytes, state);
  EXPECT_NEAR(ddp.checkpoint_sync_s, state / (h100.d2h_gbps * 1e9) + state / (h100.storage_gbps * 1e9), 1e-9);
  EXPECT_NEAR(ddp.checkpoint_async_s, state / (h100.d2h_gbps * 1e9), 1e-9);
  EXPECT_NEAR(ddp.checkpoint_s, ddp.checkpoint_sync_s / 100, 1e-12);  // synchronous unless checkpoint_async
  r.checkpoint_async = true;
  EXPECT_NEAR(predict_step(r, node, h100).checkpoint_s, ddp.checkpoint_async_s / 100, 1e-12);
  r.strategy = StrategyKind::zero1;
  EXPECT_DOUBLE_EQ(predict_step(r, node, h100).checkpoint_bytes, state / 8);
  // A save every iteration on slow storage: the next save waits for the write.
  auto slow = h100;
  slow.storage_gbps = 0.01;
  r.checkpoint_interval = 1;
  const auto waits = predict_step(r, node, slow);
  EXPECT_NEAR(waits.checkpoint_async_s, waits.checkpoint_sync_s - waits.step_time_s, 1e-9);
  // A CPU profile (no device copy): the snapshot is a host copy, a synchronous save only writes.
  const auto cpu = load_device_profile("cpu_dev");
  EXPECT_EQ(cpu.d2h_gbps, 0);
  const auto c = predict_step(r, {1, 1}, cpu);
  EXPECT_NEAR(c.checkpoint_sync_s, c.checkpoint_bytes / (cpu.storage_gbps * 1e9), 1e-9);
  EXPECT_GE(c.checkpoint_async_s, c.checkpoint_bytes / (cpu.host_copy_gbps * 1e9) - 1e-9);
}

TEST(DeviceProfile, BuiltinsFileRoundTripAndErrors) {
  for (const char* name : {"h100_sxm", "h100_pcie", "h200", "b200", "a100_sxm_80gb", "rtx_a6000", "l40s", "cpu_dev"}) {
    const auto p = load_device_profile(name);
    EXPECT_GT(p.matmul_tflops_16bit, 0) << name;
    EXPECT_GT(p.memory_gbps, 0) << name;
    EXPECT_GT(p.intra_node_busbw_gbps, 0) << name;
  }
  EXPECT_EQ(builtin_profile_for_device("NVIDIA H100 80GB HBM3")->name, "h100_sxm");
  EXPECT_EQ(builtin_profile_for_device("NVIDIA L40S")->name, "l40s");
  EXPECT_EQ(builtin_profile_for_device("cpu (AMD EPYC)")->name, "cpu_dev");
  const auto dir = std::filesystem::temp_directory_path() / "llmtrain_profile_test";
  std::filesystem::create_directories(dir);
  auto p = load_device_profile("l40s");
  p.gemm_tflops["8x8x8:bf16"] = 1.5;
  const auto file = (dir / "p.json").string();
  std::ofstream(file) << device_profile_json(p).dump();
  const auto back = load_device_profile(file);
  EXPECT_EQ(back.name, "l40s");
  EXPECT_DOUBLE_EQ(back.memory_gbps, p.memory_gbps);
  EXPECT_DOUBLE_EQ(back.d2h_gbps, p.d2h_gbps);
  EXPECT_DOUBLE_EQ(back.host_copy_gbps, p.host_copy_gbps);
  EXPECT_DOUBLE_EQ(back.gemm_tflops.at("8x8x8:bf16"), 1.5);
  auto j = device_profile_json(p);
  j.erase("memory_gbps");
  std::ofstream(file) << j.dump();
  try {
    load_device_profile(file);
    FAIL() << "a profile without memory_gbps was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("memory_gbps"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_device_profile("h100_sxn"), ConfigError);
  std::filesystem::remove_all(dir);
}

// docs/performance-model.md, "Validation against published GPU runs". Every
// published run predicted with the built-in profiles (one set of constants; the
// runs of llm-foundry's Triton attention kernel at its fitted speed against
// FlashAttention-2, published_runs.hpp). Error = predicted / published MFU - 1
// (= the tokens/s ratio: one FLOP count per token for both).
namespace {

struct Scale {
  double gemm = 1.0, triton = published::kTritonFlashAttn1Slowdown, memory = 1.0;
};

StepPrediction predict_published(const published::Run& r, const Scale& k = {}) {
  RunShape s;
  s.model = published::model_of(r);
  s.dtype = ComputeDtype::bfloat16;
  s.batch_size = r.micro_batch;
  s.grad_accum = r.grad_accum;
  s.strategy = StrategyKind::fsdp;
  s.gather_bytes = 2.0;  // these frameworks gather bf16 parameters (FSDP mixed precision), reduce in fp32
  s.elementwise = ElementwiseKernels::fused;  // their norms, RoPE and activations are fused kernels
  DeviceProfile p = load_device_profile(r.device);
  p.matmul_tflops_16bit *= k.gemm;
  p.matmul_tflops_fp32 *= k.gemm;
  p.memory_gbps *= k.memory;
  if (r.attention == published::AttentionKernel::triton_flash_attn_1) {
    p.attention_tflops_16bit /= k.triton;
    p.attention_tflops_fp32 /= k.triton;
  }
  return predict_step(s, {r.gpus, r.gpus_per_node}, p);
}

double error_of(const published::Run& r, const StepPrediction& p) {
  return p.tokens_per_s / static_cast<double>(r.gpus) / r.tokens_per_s_per_gpu - 1.0;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

struct SetErrors {
  std::vector<double> abs;
  double median() const { return median_of(abs); }
  double worst() const { return abs.empty() ? 0.0 : *std::max_element(abs.begin(), abs.end()); }
};

}  // namespace

// How the fitted constants were chosen (run by hand; prints, asserts nothing):
//   test_metrics --gtest_also_run_disabled_tests --gtest_filter='*FitOnTheFittingSet'
// A grid over the GEMM share (a factor on the built-in large-GEMM rate), the
// Triton kernel's slowdown against FlashAttention-2 (within the published
// 1.3-2.5x) and the element-wise bandwidth share (a factor on the built-in),
// scored on the fitting set only by its mean |log(predicted / published)|. With
// the built-in constants at the fit, it prints factors of 1 and the slowdown
// of published_runs.hpp.
TEST(PublishedRuns, DISABLED_FitOnTheFittingSet) {
  double best = 1e300;
  Scale arg;
  for (double g = 0.70; g <= 1.301; g += 0.02)
    for (double t = 1.3; t <= 2.501; t += 0.05)
      for (double m = 0.70; m <= 1.301; m += 0.1) {
        const Scale k{g, t, m};
        double score = 0;
        int n = 0;
        for (const auto& r : published::runs())
          if (r.set == published::Set::fit) score += std::fabs(std::log1p(error_of(r, predict_published(r, k)))), ++n;
        score /= n;
        if (score < best) best = score, arg = k;
      }
  std::printf("best on the fitting set: gemm x%.2f, triton slowdown %.2f, memory x%.1f (mean |log ratio| %.4f)\n",
              arg.gemm, arg.triton, arg.memory, best);
}

// The targets on the checking set (runs the constants were not fitted
// on): median |MFU error| <= 10%, worst <= 25%; and the trends: along each
// sequence-length sweep (one model on one GPU) the predicted MFU moves the way
// the published one does from the shortest to the longest sequence, and at
// sequence 2048 on 8 GPUs it moves with model size as the published one does
// between the smallest and the largest model of each GPU's checking set.
TEST(PublishedRuns, PredictedMfuAgainstPublished) {
  SetErrors fit, check;
  struct Region {
    double lo = 1e300, hi = -1e300, params_lo = 1e300, params_hi = 0;
    int64_t seq_lo = INT64_MAX, seq_hi = 0, gpus_lo = INT64_MAX, gpus_hi = 0;
  };
  std::map<std::string, Region> regions;  // device model -> what the checking set covered
  std::map<std::string, std::pair<int, int>> sign;  // family -> (optimistic, pessimistic) on the checking set
  std::map<std::string, std::vector<std::tuple<int64_t, double, double>>> sweeps;  // family+size -> (T, pub, pred)
  std::map<std::string, std::vector<std::tuple<double, double, double>>> sizes;    // family -> (params, pub, pred)
  std::printf("%-36s %-5s %8s %8s %8s %7s\n", "run", "set", "tok/s", "pred", "MFU pub", "error");
  for (const auto& r : published::runs()) {
    const auto p = predict_published(r);
    const double err = error_of(r, p);
    const double pred_mfu = r.mfu_percent * (1.0 + err);
    const bool is_fit = r.set == published::Set::fit;
    std::printf("%-36s %-5s %8.0f %8.0f %7.2f%% %+6.1f%%\n", r.name.c_str(), is_fit ? "fit" : "check",
                r.tokens_per_s_per_gpu, p.tokens_per_s / r.gpus, r.mfu_percent, 100 * err);
    (is_fit ? fit : check).abs.push_back(std::fabs(err));
    if (is_fit) continue;
    (err > 0 ? sign[r.family].first : sign[r.family].second)++;
    Region& g = regions[load_device_profile(r.device).model];
    const double n = static_cast<double>(published::model_of(r).num_params());
    g.lo = std::min(g.lo, err), g.hi = std::max(g.hi, err);
    g.params_lo = std::min(g.params_lo, n), g.params_hi = std::max(g.params_hi, n);
    g.seq_lo = std::min(g.seq_lo, r.seq_len), g.seq_hi = std::max(g.seq_hi, r.seq_len);
    g.gpus_lo = std::min(g.gpus_lo, r.gpus), g.gpus_hi = std::max(g.gpus_hi, r.gpus);
    if (r.gpus == 8) sweeps[r.family + " " + r.size].emplace_back(r.seq_len, r.mfu_percent, pred_mfu);
    if (r.gpus == 8 && r.seq_len == 2048)
      sizes[r.family].emplace_back(static_cast<double>(published::model_of(r).num_params()), r.mfu_percent, pred_mfu);
  }
  std::printf("fitting set:  %zu runs, median |error| %.1f%%, worst %.1f%%\n", fit.abs.size(), 100 * fit.median(),
              100 * fit.worst());
  std::printf("checking set: %zu runs, median |error| %.1f%%, worst %.1f%%\n", check.abs.size(),
              100 * check.median(), 100 * check.worst());
  for (const auto& [family, n] : sign)
    std::printf("  %s (checking set): %d optimistic, %d pessimistic\n", family.c_str(), n.first, n.second);
  // prediction/validation.cpp's table (what --describe and llmtrain-plan print)
  // is this checking set's: same devices, error range to 0.5 points, coverage.
  ASSERT_EQ(regions.size(), validated_regions().size());
  for (const auto& v : validated_regions()) {
    ASSERT_TRUE(regions.count(v.device_model)) << v.device_model;
    const Region& g = regions.at(v.device_model);
    std::printf("  %s checking set: error %+.1f%% .. %+.1f%%, T %ld-%ld, %.3g-%.3g parameters, %ld-%ld GPUs\n",
                v.device_model, 100 * g.lo, 100 * g.hi, static_cast<long>(g.seq_lo), static_cast<long>(g.seq_hi),
                g.params_lo, g.params_hi, static_cast<long>(g.gpus_lo), static_cast<long>(g.gpus_hi));
    EXPECT_NEAR(v.min_error, g.lo, 0.005) << v.device_model;
    EXPECT_NEAR(v.max_error, g.hi, 0.005) << v.device_model;
    EXPECT_EQ(v.min_seq, g.seq_lo) << v.device_model;
    EXPECT_EQ(v.max_seq, g.seq_hi) << v.device_model;
    EXPECT_NEAR(v.min_params / g.params_lo, 1.0, 0.05) << v.device_model;
    EXPECT_NEAR(v.max_params / g.params_hi, 1.0, 0.05) << v.device_model;
    EXPECT_EQ(v.min_gpus, g.gpus_lo) << v.device_model;
    EXPECT_EQ(v.max_gpus, g.gpus_hi) << v.device_model;
  }
  ASSERT_GE(check.abs.size(), 10u);
  ASSERT_GE(fit.abs.size(), 10u);
  EXPECT_LE(check.median(), 0.10);
  EXPECT_LE(check.worst(), 0.25);
  int trends = 0;
  for (auto& [name, v] : sweeps) {
    if (v.size() < 3) continue;
    std::sort(v.begin(), v.end());
    const double pub = std::get<1>(v.back()) - std::get<1>(v.front()), pred = std::get<2>(v.back()) - std::get<2>(v.front());
    std::printf("  sequence trend %s: T %ld -> %ld, published MFU %+.1f points, predicted %+.1f\n", name.c_str(),
                static_cast<long>(std::get<0>(v.front())), static_cast<long>(std::get<0>(v.back())), pub, pred);
    EXPECT_GT(pub * pred, 0) << name << ": the predicted MFU moves against the published one with sequence length";
    ++trends;
  }
  EXPECT_GE(trends, 2);
  for (auto& [family, v] : sizes) {
    if (v.size() < 2) continue;
    std::sort(v.begin(), v.end());
    const double pub = std::get<1>(v.back()) - std::get<1>(v.front()), pred = std::get<2>(v.back()) - std::get<2>(v.front());
    std::printf("  size trend %s: %.2gB -> %.2gB parameters, published MFU %+.1f points, predicted %+.1f\n",
                family.c_str(), std::get<0>(v.front()) / 1e9, std::get<0>(v.back()) / 1e9, pub, pred);
    EXPECT_GT(pub * pred, 0) << family << ": the predicted MFU moves against the published one with model size";
  }
}

// The planner's and --describe's "how sure": the MFU range the checking set
// supports for the GPU generation, and the shape's ways outside what was checked.
TEST(PredictionConfidence, RangeFromTheCheckingSetAndWhatWasNotChecked) {
  const auto h100 = load_device_profile("h100_sxm");
  const ModelConfig m = llama(24, 2048, 16, 4096, 50304);  // ~1.3B, T 4096: inside the H100 checking set
  const auto in = predict_step(run(m, ComputeDtype::bfloat16, 4, StrategyKind::fsdp), {8, 8}, h100);
  ASSERT_TRUE(in.mfu_percent.has_value());
  ASSERT_TRUE(in.confidence.have_range);
  const ValidatedRegion& r = validated_regions()[0];
  ASSERT_STREQ(r.device_model, "H100 SXM");
  EXPECT_NEAR(in.confidence.mfu_lo, *in.mfu_percent / (1 + r.max_error), 1e-9);
  EXPECT_NEAR(in.confidence.mfu_hi, *in.mfu_percent / (1 + r.min_error), 1e-9);
  EXPECT_LT(in.confidence.mfu_lo, in.confidence.mfu_hi);
  EXPECT_TRUE(in.confidence.outside.empty()) << format_confidence(in.confidence);
  const std::string text = format_prediction(in, {8, 8});
  EXPECT_NE(text.find(fmt::format("how sure: MFU {:.0f}-{:.0f}%", in.confidence.mfu_lo, in.confidence.mfu_hi)),
            std::string::npos)
      << text;
  const auto j = prediction_json(in);
  EXPECT_DOUBLE_EQ(j["mfu_range"][0].get<double>(), in.confidence.mfu_lo);
  // A sequence longer than any checked, one GPU, fp32: each named.
  ModelConfig longer = m;
  longer.block_size = 131072;
  const auto out = predict_step(run(longer, ComputeDtype::float32, 1, StrategyKind::ddp), {1, 1}, h100);
  const std::string why = format_confidence(out.confidence);
  EXPECT_NE(why.find("sequence length 131072 (checked 512-32768)"), std::string::npos) << why;
  EXPECT_NE(why.find("1 GPU(s)"), std::string::npos) << why;
  EXPECT_NE(why.find("fp32"), std::string::npos) << why;
  // A GPU the published runs did not cover, and a CPU: no range, the device named.
  const auto l40s = predict_step(run(m, ComputeDtype::bfloat16, 4, StrategyKind::fsdp), {8, 8},
                                 load_device_profile("l40s"));
  EXPECT_FALSE(l40s.confidence.have_range);
  EXPECT_NE(format_confidence(l40s.confidence).find("device 'L40S'"), std::string::npos);
  const auto cpu = predict_step(run(m, ComputeDtype::float32, 1, StrategyKind::ddp), {1, 1},
                                load_device_profile("cpu_dev"));
  EXPECT_FALSE(cpu.confidence.have_range);
  EXPECT_FALSE(prediction_json(cpu).contains("mfu_range"));
}

// The shape terms: a GEMM whose output fills every SM's tiles runs at the
// large-GEMM rate, a skinny one (few tiles, a partial tile) far below; a
// causal attention kernel loses its diagonal blocks' masked half, most at short
// sequences; a CPU profile has no such terms.
TEST(CostModel, EfficiencyByShape) {
  const auto h100 = load_device_profile("h100_sxm");
  EXPECT_DOUBLE_EQ(gemm_shape_efficiency(h100, 192 * 132, 192), 1.0);        // one full wave of whole tiles
  EXPECT_NEAR(gemm_shape_efficiency(h100, 192 * 133, 192), 133.0 / 264.0, 1e-12);  // a second wave of one tile
  EXPECT_LT(gemm_shape_efficiency(h100, 64, 64), 0.001);                       // one SM, a ninth of its tile
  EXPECT_GT(gemm_shape_efficiency(h100, 16384, 2048), 0.85);                   // 86 x 11 tiles: 8 waves, 7.2 full
  EXPECT_DOUBLE_EQ(gemm_shape_efficiency(load_device_profile("cpu_dev"), 64, 64), 1.0);
  // Stream-K (Hopper: K steps of 64 share the SMs): the attention projection's
  // weight gradient of LLaMA-2 1.36B, 2304 x 2304 over 16384 tokens, is 144
  // tiles, 55% by tile waves; it ran at 756 TFLOP/s on an H100 (2026-11-27), as
  // fast as the step's large GEMMs: 144 x 256 K steps fill 280 waves.
  EXPECT_NEAR(gemm_shape_efficiency(h100, 2304, 2304), 144.0 / 264.0, 1e-12);
  EXPECT_GT(gemm_shape_efficiency(h100, 2304, 2304, 16384), 0.99);
  EXPECT_LT(gemm_shape_efficiency(h100, 64, 64, 1024), 0.02);  // 16 K steps on 132 SMs, a ninth of a tile
  // 33 x 16 heads x 4 query blocks = 16 full waves of 132 SMs: only the diagonal's loss.
  const double at512 = attention_shape_efficiency(h100, 33, 16, 512), at8k = attention_shape_efficiency(h100, 4, 16, 8192);
  EXPECT_NEAR(at512, 1.0 / (1.0 + 128.0 / 512.0), 1e-12);
  EXPECT_GT(at8k, at512);
  // The step follows: a skinny model's GEMMs take longer with tile waves than
  // at the large-GEMM rate (with Hopper's K-step waves these are bound by
  // their bytes either way).
  RunShape skinny = run(llama(1, 128, 1, 4096, 128), ComputeDtype::bfloat16, 1, StrategyKind::ddp);
  auto no_tiles = h100, tile_waves = h100;
  no_tiles.gemm_tile_m = no_tiles.gemm_tile_n = 0;
  tile_waves.gemm_tile_k = 0;
  EXPECT_GT(predict_step(skinny, {1, 1}, tile_waves).matmul_s, predict_step(skinny, {1, 1}, no_tiles).matmul_s);
  EXPECT_GE(predict_step(skinny, {1, 1}, h100).matmul_s, predict_step(skinny, {1, 1}, no_tiles).matmul_s);
}

// ---- This program on an H100 (2026-11-27) ---------------------------------------
// tests/prediction/h100_measured.hpp: the five presets measured after the
// calibration stage, and the profile that stage measured, reconstructed from
// calibrate.cpp and the step's trace. The Done-when of issue 50: after the
// calibration, every preset's step predicted within 10% by phase total.

namespace {

namespace h100 = llmtrain::h100_2026_11_27;
// The built-in profile: published figures, constants fitted on published runs,
// and (since 2026-11-27) the bandwidth shares of this program's ATen kernels and
// fused AdamW read off the LLaMA-2 1.36B trace (device_profile.cpp): the issue's
// 10% holds for it too.
constexpr double kH100BuiltinTolerance = 0.10;

struct PresetPrediction {
  const h100::PresetRun* run;
  StepPrediction p;
  double ratio() const { return run->step_ms() / (p.step_time_s * 1e3); }  // measured / predicted
};

std::vector<PresetPrediction> predict_h100_presets(const DeviceProfile& profile) {
  std::vector<PresetPrediction> out;
  for (const auto& r : h100::preset_runs()) {
    Config c = llmtrain::testing::load_preset(r.preset);
    c.batch_size = r.batch_size;
    c.gradient_accumulation_steps = 1;
    const ModelConfig m = ModelConfig::from_config(c, 0);
    out.push_back({&r, predict_step(RunShape::from_config(c, m), {1, 1}, profile)});
  }
  return out;
}

void print_h100_table(const char* title, const std::vector<PresetPrediction>& v) {
  std::cout << title << "\n"
            << fmt::format("  {:<28} {:>5} {:>9} {:>9} {:>7} {:>7}   {}\n", "preset", "batch", "measured",
                           "predicted", "m/p", "then", "fwd+bwd m/p, optimizer m/p (ms)");
  for (const auto& x : v)
    std::cout << fmt::format("  {:<28} {:>5} {:>9.1f} {:>9.1f} {:>7.3f} {:>7.3f}   {:.1f}/{:.1f}, {:.1f}/{:.1f}{}\n",
                             x.run->preset, x.run->batch_size, x.run->step_ms(), x.p.step_time_s * 1e3, x.ratio(),
                             x.run->step_ms() / x.run->predicted_then_ms, x.run->forward_backward_ms,
                             x.p.forward_backward_s() * 1e3, x.run->optimizer_ms, x.p.optimizer_s * 1e3,
                             h100::calibrated_on(*x.run) ? "  (calibrated on)" : "");
  for (const auto& x : v)
    std::cout << fmt::format("  {:<28} fwd+bwd predicted: matmul {:.1f}, attention {:.1f}, element-wise {:.1f}, "
                             "launches {:.1f} ms\n",
                             x.run->preset, x.p.matmul_s * 1e3, x.p.attention_s * 1e3, x.p.elementwise_s * 1e3,
                             x.p.launch_s * 1e3);
}

}  // namespace

// The reconstruction holds what the runs predicted with: 8c1d7a6's optimizer
// term (32 bytes per parameter at the memory bandwidth + four launches per
// bucket-sized piece) with the trace's add bandwidth and the per-operator cost
// read off LLaMA-2 1.36B's predicted optimizer gives the other four presets'
// predicted optimizer phases.
TEST(H100Measured, Reconstruction) {
  const auto& then = h100::predicted_then_optimizer_ms();
  for (size_t i = 0; i < h100::preset_runs().size(); ++i) {
    const auto& r = h100::preset_runs()[i];
    const Config c = llmtrain::testing::load_preset(r.preset);
    const double P = static_cast<double>(ModelConfig::from_config(c, 0).num_params());
    const double calls = std::ceil(P * 4.0 / (c.ddp_bucket_mb * 1024.0 * 1024.0)) + 1.0;
    const double ms = 1e3 * (32.0 * P / (h100::kAddGbps * 1e9) + 4.0 * calls * h100::kLaunchUs * 1e-6);
    EXPECT_NEAR(ms / then[i], 1.0, 0.02) << r.preset << ": " << ms << " ms against " << then[i];
  }
}

// After the calibration stage: every preset within 10% by phase total (data +
// forward + backward + communication + optimizer against the run log's mean
// step). LLaMA-2 1.36B is the preset the profile was measured on; the other four
// are the checking set: calibrate timed none of their shapes.
TEST(H100Measured, CalibratedProfileWithinTenPercent) {
  const auto v = predict_h100_presets(h100::calibrated_profile());
  print_h100_table("H100, 2026-11-27, profile calibrated on LLaMA-2 1.36B (reconstructed); then = 8c1d7a6's model", v);
  for (const auto& x : v) {
    EXPECT_NEAR(x.ratio(), 1.0, 0.10) << x.run->preset;
    // Each phase the runs measured is predicted within 15% on its own too.
    EXPECT_NEAR(x.run->forward_backward_ms / (x.p.forward_backward_s() * 1e3), 1.0, 0.15) << x.run->preset;
    EXPECT_NEAR(x.run->optimizer_ms / (x.p.optimizer_s * 1e3), 1.0, 0.15) << x.run->preset;
  }
}

// The built-in profile, before any calibration, on the same runs.
TEST(H100Measured, BuiltinProfile) {
  const auto v = predict_h100_presets(load_device_profile("h100_sxm"));
  print_h100_table("H100, 2026-11-27, built-in h100_sxm profile (no calibration)", v);
  for (const auto& x : v) EXPECT_NEAR(x.ratio(), 1.0, kH100BuiltinTolerance) << x.run->preset;
}
