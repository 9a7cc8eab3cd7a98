// MFU and FLOPs against hand-computed numbers, the self-check, phase breakdown,
// memory, gradient-norm statistics and the atomic run log.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "llmtrain/core/config.hpp"
#include "llmtrain/distributed/collectives.hpp"
#include "llmtrain/model/transformer.hpp"
#include "llmtrain/prediction/device_peaks.hpp"
#include "llmtrain/record/device_memory.hpp"
#include "llmtrain/train/memory_check.hpp"
#include "llmtrain/record/metrics.hpp"
#include "llmtrain/record/run_log.hpp"
#include "llmtrain/record/run_log_reader.hpp"
#include "test_util.hpp"

using namespace llmtrain;

namespace {
// The LLaMA 1.36B shape: 18 layers, 18 heads of 128, d 2304, SwiGLU 6144,
// vocab 32000, T 2048, untied.
ModelConfig llama_1_36b() {
  ModelConfig m;
  m.vocab_size = m.padded_vocab = 32000;
  m.block_size = 2048;
  m.n_layer = 18;
  m.n_head = m.n_kv_head = 18;
  m.n_embd = 2304;
  m.head_dim = 128;
  m.ffn_hidden = 6144;
  m.norm = llmtrain::NormKind::rmsnorm;
  m.pos_encoding = llmtrain::PosEncoding::rope;
  m.ffn = llmtrain::FfnKind::swiglu;
  return m;
}
}  // namespace

TEST(DevicePeaks, TableAndNames) {
  EXPECT_EQ(device_peak_tflops("NVIDIA A100-SXM4-80GB", llmtrain::ComputeDtype::bfloat16).value(), 312.0);
  EXPECT_EQ(device_peak_tflops("NVIDIA H100 80GB HBM3", llmtrain::ComputeDtype::bfloat16).value(), 989.0);
  EXPECT_EQ(device_peak_tflops("NVIDIA H100 PCIe", llmtrain::ComputeDtype::bfloat16).value(), 756.0);
  EXPECT_EQ(device_peak_tflops("NVIDIA H200", llmtrain::ComputeDtype::bfloat16).value(), 989.0);
  EXPECT_EQ(device_peak_tflops("NVIDIA B200", llmtrain::ComputeDtype::bfloat16).value(), 2250.0);
  EXPECT_EQ(device_peak_tflops("NVIDIA GB200", llmtrain::ComputeDtype::bfloat16).value(), 2500.0);
  EXPECT_NEAR(device_peak_tflops("NVIDIA RTX A6000", llmtrain::ComputeDtype::bfloat16).value(), 155.0, 0.5);
  EXPECT_EQ(device_peak_tflops("NVIDIA A100-PCIE-40GB", llmtrain::ComputeDtype::float32).value(), 19.5);
  // Unknown: the CPU, a fp32 figure we do not have, an unrecognised GPU.
  EXPECT_FALSE(device_peak_tflops("cpu (AMD EPYC 9454P)", llmtrain::ComputeDtype::float32));
  EXPECT_FALSE(device_peak_tflops("NVIDIA B200", llmtrain::ComputeDtype::float32));
  EXPECT_FALSE(device_peak_tflops("NVIDIA GeForce RTX 4090", llmtrain::ComputeDtype::bfloat16));
  const auto cpu = resolve_peak("cpu (AMD EPYC)", llmtrain::ComputeDtype::float32, 0.0);
  EXPECT_FALSE(cpu.tflops_per_device);
  EXPECT_NE(cpu.source.find("peak_tflops"), std::string::npos) << cpu.source;
  const auto over = resolve_peak("cpu (AMD EPYC)", llmtrain::ComputeDtype::float32, 1.5);
  EXPECT_EQ(over.tflops_per_device.value(), 1.5);
  EXPECT_NE(over.source.find("override"), std::string::npos);
}

// Issue 36: fp32 with TF32 on (what enable_tf32 sets on CUDA) is measured against
// the TF32 dense peak; with TF32 off against the FP32 rate; the basis says which.
TEST(DevicePeaks, Fp32WithTf32UsesTheTf32DensePeak) {
  using llmtrain::ComputeDtype;
  using llmtrain::Fp32Matmuls;
  const auto tf32 = Fp32Matmuls::tf32, ieee = Fp32Matmuls::ieee;
  EXPECT_EQ(device_peak_tflops("NVIDIA H100 80GB HBM3", ComputeDtype::float32, tf32).value(), 494.7);
  EXPECT_EQ(device_peak_tflops("NVIDIA H100 PCIe", ComputeDtype::float32, tf32).value(), 378.0);
  EXPECT_EQ(device_peak_tflops("NVIDIA A100-SXM4-80GB", ComputeDtype::float32, tf32).value(), 156.0);
  EXPECT_EQ(device_peak_tflops("NVIDIA H200", ComputeDtype::float32, tf32).value(), 494.7);  // as H100 SXM
  EXPECT_EQ(device_peak_tflops("NVIDIA H100 80GB HBM3", ComputeDtype::float32, ieee).value(), 67.0);
  EXPECT_EQ(device_peak_tflops("NVIDIA H100 80GB HBM3", ComputeDtype::float32).value(), 67.0);  // default: off
  // TF32 changes only fp32: bf16 and fp16 run on their own tensor-core rate.
  EXPECT_EQ(device_peak_tflops("NVIDIA H100 80GB HBM3", ComputeDtype::bfloat16, tf32).value(), 989.0);
  EXPECT_EQ(device_peak_tflops("NVIDIA H100 80GB HBM3", ComputeDtype::float16, tf32).value(), 989.0);
  // Not in the table: unknown, never a guess.
  EXPECT_FALSE(device_peak_tflops("NVIDIA RTX A6000", ComputeDtype::float32, tf32));
  EXPECT_FALSE(device_peak_tflops("NVIDIA B200", ComputeDtype::float32, ieee));

  // The measured H100 case (issue 36): fp32 + TF32 at 216% of the 67 TFLOP/s
  // FP32 rate is 29.3% of the TF32 dense peak.
  const auto h100 = resolve_peak("NVIDIA H100 80GB HBM3", ComputeDtype::float32, 0.0, tf32);
  EXPECT_EQ(h100.tflops_per_device.value(), 494.7);
  EXPECT_EQ(h100.basis, "TF32 dense (fp32 matmuls run on TF32 tensor cores)");
  EXPECT_NE(h100.source.find("H100 SXM"), std::string::npos) << h100.source;
  EXPECT_NE(h100.source.find(h100.basis), std::string::npos) << h100.source;
  const auto off = resolve_peak("NVIDIA H100 80GB HBM3", ComputeDtype::float32, 0.0, ieee);
  EXPECT_EQ(off.tflops_per_device.value(), 67.0);
  EXPECT_EQ(off.basis, "fp32 (TF32 off)");
  const auto bf16 = resolve_peak("NVIDIA H100 80GB HBM3", ComputeDtype::bfloat16, 0.0, tf32);
  EXPECT_EQ(bf16.tflops_per_device.value(), 989.0);
  EXPECT_EQ(bf16.basis, "bf16 dense");
  EXPECT_EQ(resolve_peak("NVIDIA H100 PCIe", ComputeDtype::float16, 0.0).basis, "fp16 dense");
  // A CPU run keeps what it had: no peak, MFU unknown; its basis is fp32 with TF32 off.
  const auto cpu = resolve_peak("cpu (AMD EPYC)", ComputeDtype::float32, 0.0, ieee);
  EXPECT_FALSE(cpu.tflops_per_device);
  EXPECT_EQ(cpu.basis, "fp32 (TF32 off)");
  // A device known for bf16 but not for this arithmetic says which peak is missing.
  const auto a6000 = resolve_peak("NVIDIA RTX A6000", ComputeDtype::float32, 0.0, tf32);
  EXPECT_FALSE(a6000.tflops_per_device);
  EXPECT_NE(a6000.source.find("TF32 dense"), std::string::npos) << a6000.source;
  // The override still wins, and the basis still says what the matmuls run as.
  const auto over = resolve_peak("NVIDIA H100 80GB HBM3", ComputeDtype::float32, 400.0, tf32);
  EXPECT_EQ(over.tflops_per_device.value(), 400.0);
  EXPECT_EQ(over.basis, "TF32 dense (fp32 matmuls run on TF32 tensor cores)");
  // Every row of the table is positive and each (model, arithmetic) appears once.
  const auto& table = device_peak_table();
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_GT(table[i].tflops, 0.0) << table[i].model;
    for (size_t j = i + 1; j < table.size(); ++j)
      EXPECT_FALSE(table[i].model == table[j].model && table[i].math == table[j].math) << table[i].model;
  }
}

// Hand computation for the 1.36B shape (docs/mfu.md: 6N + 12 L H Q T):
//   per layer attention 4 x 2304^2        = 21,233,664
//   per layer SwiGLU    3 x 2304 x 6144   = 42,467,328
//   18 layers                             = 1,146,617,856
//   LM head 32000 x 2304                  =    73,728,000
//   N                                     = 1,220,345,856;  6N = 7,322,075,136
//   12 x 18 x 18 x 128 x 2048             = 1,019,215,872
//   FLOPs/token                           = 8,341,291,008
// On 8 B200 (2250 TFLOP/s dense bf16 each: 18,000 total) at 1,000,000 tokens/s
// (1,048,576 tokens in 1.048576 s): 8,341.291008 TFLOP/s = 46.3405056 % MFU.
TEST(Mfu, Llama136bOn8B200ByHand) {
  const auto m = llama_1_36b();
  EXPECT_EQ(m.num_matmul_params(), 1220345856);
  EXPECT_DOUBLE_EQ(m.flops_per_token(), 8341291008.0);

  MetricsSetup s;
  s.flops_per_token = m.flops_per_token();
  s.num_devices = 8;
  s.peak = resolve_peak("NVIDIA B200", llmtrain::ComputeDtype::bfloat16, 0.0);
  s.tokens_per_iter = 1048576;
  const auto it = compute_iteration_metrics(s, 7, 1.048576, 1048576);
  EXPECT_TRUE(it.errors.empty());
  EXPECT_NEAR(it.tokens_per_sec, 1e6, 1e-6);
  EXPECT_NEAR(it.tokens_per_sec_per_device, 125000.0, 1e-6);
  EXPECT_NEAR(it.achieved_tflops, 8341.291008, 1e-6);
  ASSERT_TRUE(it.mfu);
  EXPECT_NEAR(*it.mfu, 46.3405056, 1e-7);
  EXPECT_NEAR(it.dt_ms, 1048.576, 1e-9);
  // The record passes the same self-check llmtrain-report runs on logs.
  auto rec = it.to_json();
  rec["other_ms"] = it.dt_ms;
  EXPECT_TRUE(check_iteration_record(rec, s.flops_per_token, 18000.0).empty());

  // The same window on a CPU: MFU unknown, never a guess.
  s.peak = resolve_peak("cpu (x86)", llmtrain::ComputeDtype::bfloat16, 0.0);
  const auto cpu = compute_iteration_metrics(s, 7, 1.048576, 1048576);
  EXPECT_FALSE(cpu.mfu);
  EXPECT_FALSE(cpu.to_json().contains("mfu"));  // absent, never null (issue 19, part 10)
  EXPECT_NE(format_iteration_line(cpu, 10).find("MFU unknown"), std::string::npos);
}

TEST(SelfCheck, MfuAbove100IsAnErrorNotAResult) {
  // A peak wrongly set to 1 TFLOP/s per device makes MFU 834129%.
  MetricsSetup s;
  s.flops_per_token = llama_1_36b().flops_per_token();
  s.num_devices = 8;
  s.peak = resolve_peak("", llmtrain::ComputeDtype::bfloat16, 1.0);
  s.tokens_per_iter = 1048576;
  Metrics metrics(s);
  metrics.start_iter();
  auto m = metrics.end_iter(0, 3.0, 1e-4, 1.0);
  ASSERT_FALSE(m.errors.empty());
  bool found = false;
  for (const auto& e : m.errors) found |= e.find("exceeds 100%") != std::string::npos;
  EXPECT_TRUE(found);
  EXPECT_FALSE(m.to_json().contains("mfu"));  // withheld from the record
  EXPECT_NE(format_iteration_line(m, 1).find("self-check failed"), std::string::npos);
}

TEST(SelfCheck, FabricatedInconsistentRecord) {
  const double F = 8341291008.0;
  nlohmann::json r = {{"iter", 3},          {"dt_ms", 1000.0},        {"tokens", 1000000},
                      {"tokens_per_sec", 1e6}, {"achieved_tflops", 8341.291008}, {"mfu", 46.3405056},
                      {"data_ms", 100.0},   {"forward_backward_ms", 700.0}, {"communication_ms", 50.0},
                      {"optimizer_ms", 50.0}, {"other_ms", 100.0}};
  EXPECT_TRUE(check_iteration_record(r, F, 18000.0).empty());
  auto bad = r;
  bad["tokens_per_sec"] = 2e6;  // disagrees with tokens / time
  auto e = check_iteration_record(bad, F, 18000.0);
  ASSERT_FALSE(e.empty());
  EXPECT_NE(e[0].find("tokens_per_sec"), std::string::npos) << e[0];
  bad = r;
  bad["mfu"] = 146.34;
  e = check_iteration_record(bad, F, 18000.0);
  ASSERT_GE(e.size(), 1u);
  EXPECT_NE(e[0].find("exceeds 100%"), std::string::npos);
  bad = r;
  bad["other_ms"] = 300.0;  // phases no longer sum to the iteration time
  EXPECT_FALSE(check_iteration_record(bad, F, 18000.0).empty());
  bad = r;
  bad["achieved_tflops"] = 100.0;
  EXPECT_FALSE(check_iteration_record(bad, F, 18000.0).empty());
}

TEST(Metrics, PhasesSumToTheIterationTime) {
  MetricsSetup s;
  s.flops_per_token = 1e6;
  s.tokens_per_iter = 4096;
  Metrics metrics(s);
  metrics.start_iter();
  for (int micro = 0; micro < 2; ++micro) {
    { auto t = metrics.phase(Phase::data); std::this_thread::sleep_for(std::chrono::milliseconds(2)); }
    { auto t = metrics.phase(Phase::forward_backward); std::this_thread::sleep_for(std::chrono::milliseconds(5)); }
  }
  { auto t = metrics.phase(Phase::communication); std::this_thread::sleep_for(std::chrono::milliseconds(1)); }
  { auto t = metrics.phase(Phase::optimizer); std::this_thread::sleep_for(std::chrono::milliseconds(3)); }
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // untimed work -> "other"
  const auto m = metrics.end_iter(0, 2.5, 3e-4, 0.7);
  EXPECT_TRUE(m.errors.empty()) << m.errors[0];
  double sum = m.other_ms;
  for (double p : m.phase_ms) sum += p;
  EXPECT_NEAR(sum, m.dt_ms, 1e-9);
  EXPECT_GE(m.phase_ms[0], 4.0);   // two data waits of >= 2 ms add up
  EXPECT_GE(m.phase_ms[1], 10.0);
  EXPECT_GE(m.other_ms, 2.0);
  EXPECT_NEAR(m.tokens_per_sec, 4096.0 / (m.dt_ms / 1e3), 1e-6);
  EXPECT_FALSE(m.mfu);
  // CPU memory is the resident set: a running test has some.
  EXPECT_GT(m.memory.allocated_gb, 0.0);
  EXPECT_GE(m.memory.peak_gb, m.memory.allocated_gb);
  EXPECT_FALSE(m.memory.from_cuda);
  const auto j = m.to_json();
  EXPECT_FALSE(j.contains("mfu"));  // unknown (no peak on CPU): absent, never null
  for (const char* k : {"iter", "loss", "lr", "dt_ms", "tokens_per_sec", "achieved_tflops",
                        "memory_allocated_gb", "memory_peak_gb", "memory_reserved_gb", "grad_norm", "data_ms",
                        "forward_backward_ms", "communication_ms", "optimizer_ms", "other_ms"})
    EXPECT_TRUE(j.contains(k)) << k;
}

// A strategy's waits inside forward/backward or the optimizer step are moved
// to communication: never more than the phase holds, phases still sum to dt.
TEST(Metrics, ExposedCommMovesIntoCommunication) {
  MetricsSetup s;
  s.flops_per_token = 1e6;
  s.tokens_per_iter = 4096;
  Metrics metrics(s);
  metrics.start_iter();
  { auto t = metrics.phase(Phase::forward_backward); std::this_thread::sleep_for(std::chrono::milliseconds(6)); }
  { auto t = metrics.phase(Phase::optimizer); std::this_thread::sleep_for(std::chrono::milliseconds(3)); }
  EXPECT_DOUBLE_EQ(metrics.move_seconds(Phase::forward_backward, Phase::communication, 0.004), 0.004);
  const double moved = metrics.move_seconds(Phase::optimizer, Phase::communication, 10.0);  // more than it holds
  EXPECT_GE(moved, 0.003);
  EXPECT_LT(moved, 1.0);
  EXPECT_DOUBLE_EQ(metrics.move_seconds(Phase::optimizer, Phase::communication, 0.001), 0.0);  // nothing left
  EXPECT_DOUBLE_EQ(metrics.move_seconds(Phase::data, Phase::communication, -1.0), 0.0);
  const auto m = metrics.end_iter(0, 2.5, 3e-4, 0.7);
  EXPECT_TRUE(m.errors.empty()) << m.errors[0];
  EXPECT_EQ(m.phase_ms[static_cast<int>(Phase::optimizer)], 0.0);
  EXPECT_NEAR(m.phase_ms[static_cast<int>(Phase::communication)], 4.0 + moved * 1e3, 1e-9);
  EXPECT_GE(m.phase_ms[static_cast<int>(Phase::forward_backward)], 2.0);
  double sum = m.other_ms;
  for (double p : m.phase_ms) sum += p;
  EXPECT_NEAR(sum, m.dt_ms, 1e-9);
}

// Collectives that only wait: block(s) sleeps and counts s as waited.
class WaitingCollectives final : public Collectives {
 public:
  std::string name() const override { return "waiting"; }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void allreduce_sum(torch::Tensor&) override {}
  void broadcast(torch::Tensor&, int) override {}
  void reduce_scatter_sum(const torch::Tensor&, torch::Tensor&) override {}
  void all_gather(const torch::Tensor&, torch::Tensor&) override {}
  void block(int ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    waited_s_ += ms / 1e3;
  }
};

// A phase scope charges the collectives' waits inside it to communication and
// the rest of its time to its own phase; waits outside every phase are other.
TEST(Metrics, PhaseScopesChargeTheirCommunicationWaits) {
  MetricsSetup s;
  s.flops_per_token = 1e6;
  s.tokens_per_iter = 4096;
  WaitingCollectives comm;
  Metrics metrics(s, &comm);
  comm.block(1);  // before the iteration: not counted
  metrics.start_iter();
  {
    auto t = metrics.phase(Phase::forward_backward);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    comm.block(4);
  }
  comm.block(3);  // between phases: other
  {
    auto t = metrics.phase(Phase::communication);
    comm.block(2);
  }
  {
    auto t = metrics.phase(Phase::optimizer);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    t.close();
    comm.block(1);  // after close: other
  }
  const auto m = metrics.end_iter(0, 2.5, 3e-4, 0.7);
  EXPECT_TRUE(m.errors.empty()) << m.errors[0];
  const auto ms = [&](Phase p) { return m.phase_ms[static_cast<int>(p)]; };
  EXPECT_GE(ms(Phase::forward_backward), 2.9);
  EXPECT_GE(ms(Phase::communication), 5.9);  // 4 ms inside forward/backward + its own 2
  EXPECT_GE(ms(Phase::optimizer), 1.9);
  EXPECT_GE(m.other_ms, 3.9);
  EXPECT_EQ(ms(Phase::data), 0.0);
  double sum = m.other_ms;
  for (double p : m.phase_ms) sum += p;
  EXPECT_NEAR(sum, m.dt_ms, 1e-9);
}

TEST(Metrics, SummarySkipsWarmupAndIsTimeWeighted) {
  nlohmann::json recs = nlohmann::json::array();
  // 2 warm-up records at 1000 ms, then 3 at 100 ms and 300 ms: 1000 tokens each.
  for (double dt : {1000.0, 1000.0, 100.0, 300.0, 100.0})
    recs.push_back({{"iter", recs.size()}, {"dt_ms", dt}, {"tokens_per_sec", 1000.0 / (dt / 1e3)},
                    {"achieved_tflops", 1.0 / (dt / 1e3)}, {"mfu", 10.0 / (dt / 1e3)}, {"loss", 2.0}});
  const auto s = summarize_records(recs, 2);
  EXPECT_EQ(s["warmup_iters_skipped"], 2);
  EXPECT_EQ(s["iterations_averaged"], 3);
  // 3000 tokens in 0.5 s = 6000 tokens/s (a mean of per-iteration rates would say 7778).
  EXPECT_NEAR(s["tokens_per_sec"].get<double>(), 6000.0, 1e-9);
  EXPECT_NEAR(s["achieved_tflops"].get<double>(), 6.0, 1e-9);
  EXPECT_NEAR(s["mfu"].get<double>(), 60.0, 1e-9);
  EXPECT_NEAR(s["mean_dt_ms"].get<double>(), 500.0 / 3.0, 1e-9);
  // A bound above the run's length: the warm-up is still read from the step
  // times (issue 36: warmup_report_iters is the most left out, not a count that
  // made a short run average everything).
  EXPECT_EQ(summarize_records(recs, 50)["warmup_iters_skipped"], 2);
  EXPECT_EQ(summarize_records(recs, 50)["step_time_settled_after"], 2);
  // warmup_report_iters=0: every iteration averaged.
  EXPECT_EQ(summarize_records(recs, 0)["warmup_iters_skipped"], 0);
  EXPECT_EQ(summarize_records(recs, 0)["iterations_averaged"], 5);
}

namespace {
// Records of the given step times, 1000 tokens each, MFU 10% at 1 s.
nlohmann::json records_of(const std::vector<double>& dts) {
  nlohmann::json recs = nlohmann::json::array();
  for (double dt : dts)
    recs.push_back({{"iter", recs.size()}, {"dt_ms", dt}, {"tokens", 1000}, {"tokens_per_sec", 1000.0 / (dt / 1e3)},
                    {"achieved_tflops", 1.0 / (dt / 1e3)}, {"mfu", 10.0 / (dt / 1e3)}, {"loss", 2.0}});
  return recs;
}
}  // namespace

// Issue 36: the summary leaves out the warm-up until the step time settles.
TEST(Metrics, WarmupEndsWhenTheStepTimeSettles) {
  // The H100 case: iteration 0 took 2.2 s, 1-19 about 0.4 s. A fixed 50 would
  // have averaged everything (28.1% MFU for a run at 34.5%); now iteration 0 goes.
  std::vector<double> h100 = {2200.0};
  for (int i = 1; i < 20; ++i) h100.push_back(400.0 + (i % 3));  // 400, 401, 402 ms
  auto w = find_warmup(h100, 50);
  EXPECT_EQ(w.skipped, 1);
  EXPECT_EQ(w.settled_after.value(), 1);
  auto s = summarize_records(records_of(h100), 50);
  EXPECT_EQ(s["warmup_iters_skipped"], 1);
  EXPECT_EQ(s["iterations_averaged"], 19);
  EXPECT_LT(s["mean_dt_ms"].get<double>(), 403.0);

  // A longer warm-up (compilation, allocator growth) ending at iteration 4; a
  // later stall (a checkpoint at iteration 12) does not move it.
  std::vector<double> longer = {5000, 3000, 1500, 700};
  for (int i = 4; i < 20; ++i) longer.push_back(i == 12 ? 2500.0 : 500.0 + (i % 2) * 20.0);
  w = find_warmup(longer, 50);
  EXPECT_EQ(w.settled_after.value(), 4);
  EXPECT_EQ(w.skipped, 4);
  // warmup_report_iters bounds it.
  EXPECT_EQ(find_warmup(longer, 2).skipped, 2);
  EXPECT_EQ(find_warmup(longer, 2).settled_after.value(), 4);
  EXPECT_EQ(find_warmup(longer, 0).skipped, 0);

  // A run settled from the start: iteration 0 is still left out, and only it.
  const std::vector<double> settled(10, 250.0);
  w = find_warmup(settled, 50);
  EXPECT_EQ(w.skipped, 1);
  EXPECT_EQ(w.settled_after.value(), 1);
  // Within the tolerance is settled: 9% above the median of the rest.
  EXPECT_EQ(find_warmup({900, 109, 100, 100, 100}, 50).settled_after.value(), 1);
  EXPECT_EQ(find_warmup({900, 111, 100, 100, 100}, 50).settled_after.value(), 2);
}

TEST(Metrics, WarmupOfARunThatNeverSettlesOrIsShort) {
  // Every iteration slower than the ones after it (a pace that keeps improving):
  // never settled; only iteration 0 is left out, never all but the last.
  std::vector<double> falling;
  for (int i = 0; i < 12; ++i) falling.push_back(1000.0 - 80.0 * i);
  auto w = find_warmup(falling, 50);
  EXPECT_FALSE(w.settled_after);
  EXPECT_EQ(w.skipped, 1);
  auto s = summarize_records(records_of(falling), 50);
  EXPECT_EQ(s["warmup_iters_skipped"], 1);
  EXPECT_FALSE(s.contains("step_time_settled_after"));  // absent, never null
  EXPECT_EQ(s["iterations_averaged"], 11);

  // Two iterations: too few to tell; iteration 0 is left out, iteration 1 averaged.
  w = find_warmup({2200.0, 400.0}, 50);
  EXPECT_FALSE(w.settled_after);
  EXPECT_EQ(w.skipped, 1);
  s = summarize_records(records_of({2200.0, 400.0}), 50);
  EXPECT_EQ(s["iterations_averaged"], 1);
  EXPECT_NEAR(s["mean_dt_ms"].get<double>(), 400.0, 1e-9);
  EXPECT_NEAR(s["tokens_per_sec"].get<double>(), 2500.0, 1e-9);
  // One iteration: averaged, never left out; none: nothing to average.
  EXPECT_EQ(find_warmup({2200.0}, 50).skipped, 0);
  EXPECT_EQ(summarize_records(records_of({2200.0}), 50)["iterations_averaged"], 1);
  EXPECT_EQ(find_warmup({}, 50).skipped, 0);
  EXPECT_EQ(summarize_records(nlohmann::json::array(), 50)["iterations_averaged"], 0);

  // A noisy run (CPU) with no trend settles early: noise is not warm-up.
  const std::vector<double> noisy = {300, 120, 100, 140, 95, 130, 100, 150, 105, 98, 125, 101};
  w = find_warmup(noisy, 50);
  ASSERT_TRUE(w.settled_after);
  EXPECT_LE(*w.settled_after, 2);
}

TEST(GradNorms, PerParameterMinMaxAndClipping) {
  auto a = torch::zeros({2, 2}, torch::requires_grad());
  auto b = torch::zeros({3}, torch::requires_grad());
  auto c = torch::zeros({1}, torch::requires_grad());  // no gradient: skipped
  (a.sum() * 3.0 + (b * b.detach().add(2.0)).sum()).backward();
  // grad a = 3 everywhere: norm sqrt(4 x 9) = 6; grad b = 2: norm sqrt(3 x 4) = 3.4641
  const auto norms = parameter_grad_norms({{"blocks.0.w", a}, {"blocks.1.w", b}, {"unused", c}});
  ASSERT_EQ(norms.size(), 2u);
  const auto s = summarize_grad_norms(norms, 6.9282, 1.0);
  EXPECT_NEAR(s.max_norm, 6.0, 1e-12);
  EXPECT_EQ(s.max_name, "blocks.0.w");
  EXPECT_NEAR(s.min_norm, std::sqrt(12.0), 1e-12);
  EXPECT_EQ(s.min_name, "blocks.1.w");
  EXPECT_TRUE(s.clipped);
  EXPECT_FALSE(summarize_grad_norms(norms, 0.5, 1.0).clipped);
  EXPECT_FALSE(summarize_grad_norms(norms, 9.0, 0.0).clipped);  // grad_clip 0 = off
}

TEST(RunLog, AtomicAndReadableMidRun) {
  const auto dir = llmtrain::testing::scratch_dir("metrics-runlog");
  std::filesystem::remove_all(dir);
  RunLog log(dir.string(), true, /*min_flush_seconds=*/3600.0);
  EXPECT_NE(log.path().find("run_"), std::string::npos);
  log.set_startup_info({{"config", {{"batch_size", 4}}}});
  log.add_iteration({{"iter", 0}, {"loss", 3.0}});
  EXPECT_TRUE(log.flush());
  // Mid-run: a complete JSON document with the iteration so far.
  auto read = [&] { return load_run_log_json(log.path()); };
  EXPECT_EQ(read()["training_iterations"].size(), 1u);
  log.add_iteration({{"iter", 1}, {"loss", 2.5}});
  EXPECT_FALSE(log.flush());  // rate-limited
  EXPECT_EQ(read()["training_iterations"].size(), 1u);
  log.add_eval({{"iter", 1}, {"val_loss", 2.4}});
  log.add_error("iteration 1: something");
  log.set_summary({{"iterations", 2}});
  EXPECT_TRUE(log.flush(true));
  const auto j = read();
  EXPECT_EQ(j["training_iterations"].size(), 2u);
  EXPECT_EQ(j["training_iterations"][1]["loss"], 2.5);
  EXPECT_EQ(j["eval_results"][0]["val_loss"], 2.4);
  EXPECT_EQ(j["errors"][0], "iteration 1: something");
  EXPECT_EQ(j["summary"]["iterations"], 2);
  // No temporary file is left behind.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  // A second log in the same second gets its own name.
  RunLog other(dir.string(), true);
  EXPECT_NE(other.path(), log.path());
  // Ranks other than 0 write nothing.
  RunLog off((dir / "off").string(), false);
  EXPECT_FALSE(off.flush(true));
  EXPECT_FALSE(std::filesystem::exists(dir / "off"));
}

TEST(RunLog, StartupInfoHasEveryConfigKeyAndVersions) {
  Config c;
  c.dtype = llmtrain::ComputeDtype::bfloat16;
  const auto model = llama_1_36b();
  RunEnvironment env;
  env.world_size = 8;
  env.device_names = std::vector<std::string>(8, "NVIDIA B200");
  env.device_type = "cuda";
  env.attention_backend_used = "flash_attn_2";
  env.parallelism = "DDP (NCCL)";
  MetricsSetup s;
  s.flops_per_token = model.flops_per_token();
  s.flops_per_token_6n = model.flops_per_token_6n();
  s.num_devices = 8;
  s.peak = resolve_peak("NVIDIA B200", llmtrain::ComputeDtype::bfloat16, 0.0);
  const auto info = make_startup_info(c, model, env, s);
  const auto& cfg = info["config"];
  for (const auto& k : Config::key_names()) EXPECT_TRUE(cfg.contains(k)) << k;
  for (const char* k : {"world_size", "gradient_accumulation_steps_per_gpu", "attention_backend_used",
                        "torch_version", "mpi_version", "nccl_version", "hdf5_version", "device_names"})
    EXPECT_TRUE(cfg.contains(k)) << k;
  EXPECT_EQ(cfg["world_size"], 8);
  EXPECT_EQ(cfg["config_label"], "flash_attn_2+bfloat16");
  EXPECT_EQ(info["mfu"]["peak_tflops_total"], 18000.0);
  // 50% of 18,000 TFLOP/s / 8,341,291,008 FLOPs/token = 1,078,970.4 tokens/s
  EXPECT_NEAR(info["mfu"]["tokens_per_sec_at_50pct_mfu"].get<double>(), 9e15 / 8341291008.0, 1e-3);
  const auto block = format_startup_block(c, model, env, s);
  for (const char* want : {"8 x NVIDIA B200", "bfloat16", "DDP (NCCL)", "6N + 12LHQT", "2250", "50% MFU"})
    EXPECT_NE(block.find(want), std::string::npos) << want << "\n" << block;
}

// The counting CPU allocator counts every byte of tensor storage, exactly, and
// its peak window restarts at reset_allocated_peak.
TEST(DeviceMemory, CountingCpuAllocatorIsExact) {
  count_cpu_allocations();
  count_cpu_allocations();  // once per process
  const torch::Device cpu(torch::kCPU);
  const auto before = allocated_bytes(cpu);
  ASSERT_TRUE(before.has_value());
  reset_allocated_peak(cpu);
  {
    auto a = torch::empty({1000, 1000}, torch::kFloat);  // 4,000,000 bytes
    auto b = torch::empty({500}, torch::kDouble);        // 4,000 bytes
    const auto during = allocated_bytes(cpu);
    EXPECT_EQ(during->current - before->current, 4004000);
  }
  const auto after = allocated_bytes(cpu);
  EXPECT_EQ(after->current, before->current);
  EXPECT_EQ(after->peak - before->current, 4004000);
  reset_allocated_peak(cpu);
  EXPECT_EQ(allocated_bytes(cpu)->peak, after->current);
  // Threads allocate too (the loader, LibTorch's pool): the counts stay exact.
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([] {
      for (int i = 0; i < 200; ++i) auto x = torch::ones({257}, torch::kFloat);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(allocated_bytes(cpu)->current, after->current);
  EXPECT_GE(allocated_bytes(cpu)->peak, after->current + 257 * 4);
}

// A run that cannot fit is refused in one line naming the prediction, what is
// available and the largest micro-batches that fit; memory_check=false runs.
TEST(DeviceMemory, RefusalLine) {
  const ModelConfig m = llama_1_36b();
  MemoryInputs in;
  in.dtype = ComputeDtype::bfloat16;
  in.batch_size = 64;
  in.world_size = 8;
  const AvailableMemory gpu{80LL << 30, "free on GPU 0 (cudaMemGetInfo)"};
  const auto line = memory_refusal(m, in, StrategyKind::zero1, gpu);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->find('\n'), std::string::npos) << *line;
  const int64_t b = max_batch_size(m, in, StrategyKind::zero1, 80.0 * (1LL << 30));
  MemoryInputs full = in;
  full.recomputed_blocks = m.n_layer;
  const int64_t bf = max_batch_size(m, full, StrategyKind::zero1, 80.0 * (1LL << 30));
  EXPECT_GT(b, 0);
  EXPECT_GT(bf, b);
  EXPECT_NE(line->find(fmt::format("batch_size={} without activation checkpointing, {} with full", b, bf)),
            std::string::npos)
      << *line;
  EXPECT_NE(line->find("free on GPU 0"), std::string::npos) << *line;
  // b fits, b + 1 does not.
  in.batch_size = b;
  EXPECT_FALSE(memory_refusal(m, in, StrategyKind::zero1, gpu).has_value());
  in.batch_size = b + 1;
  EXPECT_TRUE(memory_refusal(m, in, StrategyKind::zero1, gpu).has_value());
  EXPECT_FALSE(memory_refusal(m, in, StrategyKind::zero1, {-1, "unknown"}).has_value());
  Config c;
  c.batch_size = 64;
  c.dtype = ComputeDtype::bfloat16;
  c.use_zero1 = true;
  EXPECT_THROW(check_memory_fits(c, m, 8, gpu), ConfigError);
  c.memory_check = false;
  EXPECT_NO_THROW(check_memory_fits(c, m, 8, gpu));
}
