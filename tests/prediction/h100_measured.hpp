// This program's five full presets measured on one H100 (2026-11-27), and the
// device profile `llmtrain --calibrate` would have measured there before them,
// reconstructed: data for test_prediction's H100Measured tests, which recheck the
// cost model against the GPU without one (docs/performance-model.md, "Measured on
// a lent H100").
//
// Source: `scripts/gpu-check.sh` on an NVIDIA H100 80GB HBM3 (132 SMs, 1980 MHz,
// driver 580.159.04, torch 2.11.0+cu130, cuDNN 9.19.0), 2026-11-27; its summary
// and the Chrome trace of one LLaMA-2 1.36B step (profile stage, compile=False),
// kept in /work/notes/gpu-h100/ (summary.txt, trace_compile_False.json.gz).
// The calibrate stage (`llmtrain inputs/full_llama_1.36b.cfg --calibrate`, 21 s
// on the idle GPU) wrote a profile every later stage predicted with; the file
// itself did not come back (the log archive was too large), so its figures are
// reconstructed below from what calibrate.cpp measures and the trace's kernels
// that are the same operations at the same shapes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llmtrain/prediction/cost_model.hpp"
#include "llmtrain/prediction/device_profile.hpp"

namespace llmtrain::h100_2026_11_27 {

// The presets stage: every inputs/full_*.cfg as shipped (its batch), one
// micro-batch per step (--gradient_accumulation_steps=1), bf16 autocast, DDP on
// one GPU, 3 iterations, the first left out; mean ms per phase from the run log
// (summary.prediction by phase), and the step the run predicted with the
// calibrated profile and the cost model of commit 8c1d7a6.
struct PresetRun {
  std::string preset;  // inputs/<preset>.cfg
  int64_t batch_size;
  double data_ms, forward_backward_ms, communication_ms, optimizer_ms, other_ms;
  double predicted_then_ms;  // step_time_s of the run's own prediction (8c1d7a6's model)
  double step_ms() const { return data_ms + forward_backward_ms + communication_ms + optimizer_ms + other_ms; }
};

// Which preset the profile was measured on (the fitting side: its own shapes'
// GEMMs and attention are timed, and the cost model's changes of 2026-11-27
// were read off its trace) and which are only checked (their shapes untimed).
inline bool calibrated_on(const PresetRun& r) { return r.preset == "full_llama_1.36b"; }

inline const std::vector<PresetRun>& preset_runs() {
  static const std::vector<PresetRun> runs = {
      {"full_gpt2_1.36b", 8, 0.4, 272.3, 0.4, 20.0, 0.2, 312.2},
      {"full_llama_1.36b", 8, 0.4, 303.8, 0.4, 19.5, 0.2, 370.7},
      {"full_llama3_1.5b_optimal", 4, 0.4, 170.0, 0.4, 23.6, 0.2, 241.4},
      {"full_llama3_2.2b_chinchilla", 2, 0.3, 141.3, 0.5, 33.9, 0.2, 242.5},
      {"full_qwen3_1.8b_optimal", 4, 0.4, 221.1, 0.4, 27.8, 0.2, 321.8},
  };
  return runs;
}

// The GEMMs calibrate.cpp times (measure_gemms: the three products of every
// forward_gemms() shape of LLaMA-2 1.36B at batch 8 x 2048, bf16, in this
// order), each as the trace's cuBLAS kernel of the same shape and layout ran in
// the step: the mean over the 18 blocks (nvjet_sm90_tst_192x192 and 192x128
// kernels, persistent, 132 CTAs). Microseconds per call.
struct TracedGemm {
  int64_t m, n, k;
  double count;  // per micro-batch
  double us;
};
inline const std::vector<TracedGemm>& llama_1_36b_gemms() {
  static const std::vector<TracedGemm> g = {
      {16384, 6912, 2304, 18, 676.3},   {16384, 2304, 6912, 18, 694.8},   {6912, 2304, 16384, 18, 700.3},  // q|k|v
      {16384, 2304, 2304, 18, 229.0},   {16384, 2304, 2304, 18, 277.3},   {2304, 2304, 16384, 18, 247.0},  // out
      {16384, 12288, 2304, 18, 1184.0}, {16384, 2304, 12288, 18, 1225.4}, {12288, 2304, 16384, 18, 1231.7},  // fc
      {16384, 2304, 6144, 18, 584.4},   {16384, 6144, 2304, 18, 609.3},   {2304, 6144, 16384, 18, 637.0},  // down
      {16384, 32000, 2304, 1, 3056.0},  {16384, 2304, 32000, 1, 3094.6},  {32000, 2304, 16384, 1, 3026.4},  // head
  };
  return g;
}

// Attention (measure_attention: causal SDPA forward + backward at 8 x 18 heads
// x 2048 x 128): the trace's cuDNN kernels of one block (flash fprop 299.1 us,
// bprop 913.5, and its dO·O and dQ conversion 109.0 + 83.6), 1405.2 us.
constexpr double kAttentionUsPerBlock = 1405.2;
// Element-wise bandwidth (measure_memory: c = a + b in fp32): the trace's fp32
// adds of the residual stream, 16384 x 2304 elements (453 MB read and written)
// in 157.4 us: 2880 GB/s.
constexpr double kAddGbps = 2880.0;
// Fused AdamW (measure_optimizer_gbps, new on 2026-11-27: at::_fused_adamw_ and
// the gradients' norm, 32 bytes per element): the trace's multi-tensor kernels
// stepped the 1,294,159,104 parameters in 18.17 ms: 2279 GB/s.
constexpr double kOptimizerGbps = 2279.0;
// The per-operator cost (measure_launch_us: the floor of a chain of 1-element
// multiplies; on a GPU the model step's fit never exceeded it here, the kernel
// rates alone predicting more than the step took): not in the trace; read off
// the optimizer phase the runs predicted with 8c1d7a6's model, 32 x P / memory
// + 4 x 199 launches: 26.6 ms for LLaMA-2 1.36B at 2880 GB/s gives 15.4 us. The
// other four presets' predicted optimizer phases (26.1, 31.7, 45.6, 37.6 ms)
// follow from the same two figures within 2% (H100Measured.Reconstruction).
constexpr double kLaunchUs = 15.4;
// The optimizer phase each run predicted (8c1d7a6's model), for that check.
inline const std::vector<double>& predicted_then_optimizer_ms() {
  static const std::vector<double> v = {26.1, 26.6, 31.7, 45.6, 37.6};
  return v;
}

// The profile calibrate.cpp would write, from the figures above: the built-in
// profile of the detected device as its base (tiles, links, storage), the GEMM
// rates at the timed shapes (a later product of the same shape overwrites an
// earlier one, as in the calibration's map), the large-GEMM rate those give
// (large_gemm_tflops), attention at (2048, 128) and its shape-free rate.
inline DeviceProfile calibrated_profile() {
  DeviceProfile p = load_device_profile("h100_sxm");
  p.name = "calibrated: 1 x NVIDIA H100 80GB HBM3 (reconstructed, 2026-11-27)";
  p.source = "tests/prediction/h100_measured.hpp";
  std::vector<GemmTiming> timed;
  for (const auto& g : llama_1_36b_gemms()) {
    p.gemm_tflops[gemm_key(g.m, g.n, g.k, true)] = 2.0 * g.m * g.n * g.k / (g.us * 1e-6) / 1e12;
    timed.push_back({g.m, g.n, g.k, g.count, g.us * 1e-6});
  }
  p.matmul_tflops_16bit = large_gemm_tflops(p, timed);
  const double fwd_flops = 4.0 * 8 * 18 * 2048.0 * 2048.0 * 128 / 2.0;
  const double rate = 3.5 * fwd_flops / (kAttentionUsPerBlock * 1e-6) / 1e12;
  p.attention_by_shape_tflops[attention_key(2048, 128, true)] = rate;
  p.attention_tflops_16bit = rate / attention_shape_efficiency(p, 8, 18, 2048);
  p.memory_gbps = kAddGbps;
  p.optimizer_gbps = kOptimizerGbps;
  p.launch_us = kLaunchUs;
  return p;
}

}  // namespace llmtrain::h100_2026_11_27
