#include "llmtrain/prediction/device_profile.hpp"

#include <filesystem>
#include <fstream>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "llmtrain/core/error.hpp"

namespace llmtrain {
namespace {

// Model constants shared by every GPU. Two are fitted, on the fitting set of
// published runs only (tests/train/published_runs.hpp: MPT-125M, 760M, 3B and
// 13B of llm-foundry's A100 and H100 tables, every sequence length; the split
// fixed before the fit), by PublishedRuns.DISABLED_FitOnTheFittingSet
// (tests/train/test_prediction.cpp: the grid's best mean |log(predicted /
// published)|), with the Triton kernel's slowdown of published_runs.hpp; the
// checking set (MPT-350M, 1B, 7B, torchtitan's LLaMA-2 13B) only checks them
// (docs/performance-model.md, "Validation against published GPU runs"):
//  kMamfShare: the GEMMs of a training step reach this share of the device's
//    maximum achievable matmul rate (MAMF, GpuFigures::mamf_efficiency) at a
//    shape that tiles and waves perfectly (cost_model.hpp: gemm_shape_efficiency
//    takes the rest). Fitted: 0.92 (until 2026-11-27 an assumed 0.83 with no
//    shape term).
//  kMemoryEfficiency: element-wise kernels stream at this share of the
//    datasheet bandwidth. Fitted: 0.70 (until 2026-11-27 an assumed 0.90). This
//    project's H200 step reading puts ATen's unfused element-wise kernels at
//    about 1.9-2.3 of 4.8 TB/s (0.40-0.48; /work/shared/notes/gpu-step-reading-
//    2026-11-27.md, an estimate from byte counts), below it: fused kernels do better.
//  kLinkEfficiency: a ring collective's bus bandwidth is this fraction of the
//    link's one-way line rate: NCCL reaches 370 GB/s busbw on H100 NVLink4
//    (450 GB/s one way), "with the protocol overhead (~20%)" (S. Jeaugey, NCCL,
//    github.com/NVIDIA/nccl-tests/issues/212): 370 / 450 = 0.82.
constexpr double kMamfShare = 0.92;
constexpr double kMemoryEfficiency = 0.70;
// This program's own element-wise kernels (ATen's, one per operator, counted
// operator by operator: ElementwiseKernels::llmtrain) and its fused AdamW stream
// at these shares of the datasheet bandwidth, measured in the LLaMA-2 1.36B
// step traced on an H100 on 2026-11-27 (/work/notes/gpu-h100/, docs/
// performance-model.md, "Measured on a lent H100"): the residual stream's fp32
// adds moved 453 MB in 157.4 us (2,880 of 3,350 GB/s: 0.86), at::_fused_adamw_
// with the gradient norm 41.4 GB in 18.17 ms (2,279: 0.68). Other GPUs are
// assumed to reach the same shares. kMemoryEfficiency stays the share of the
// published runs' fused kernels (fused_elementwise_gbps), where it was fitted.
constexpr double kAtenMemoryEfficiency = 2880.0 / 3350.0, kAdamWMemoryEfficiency = 2279.0 / 3350.0;
constexpr double kLinkEfficiency = 370.0 / 450.0;
// Attention kernels of the FlashAttention-2 generation (flash-attn 2, the
// Triton kernel, PyTorch's SDPA flash path) run their causal FLOPs at this
// fraction of the dense peak: "50-73% of the theoretical maximum FLOPs/s on
// A100" (Dao 2023, arXiv 2307.08691), the low end since backward is the slower
// pass. They use no Hopper-only instructions (wgmma, TMA): on H100 they reach
// "only 35% utilization" (Shah et al. 2024, FlashAttention-3, arXiv 2407.08608).
// The prediction uses this rate for every fused backend (FlashAttention-3's
// 75% on H100 is not assumed: docs/performance-model.md).
constexpr double kAttentionEfficiency = 0.50, kAttentionEfficiencyHopper = 0.35;
// Fixed costs (assumptions, stated in docs/performance-model.md): a CUDA kernel
// launch, a NCCL call's latency, checkpoint storage per rank, a loader batch.
constexpr double kGpuLaunchUs = 4.0, kGpuCollectiveUs = 30.0, kGpuStorageGbps = 2.0, kGpuDataBatchUs = 200.0;
// A pinned device -> host copy reaches this share of the host link's one-way
// line rate (assumption, as kLinkEfficiency: PCIe's 128b/130b encoding and packet
// headers); a GPU node's host memcpy (one thread) is an assumption too.
constexpr double kHostLinkEfficiency = kLinkEfficiency, kGpuHostCopyGbps = 10.0;

struct GpuFigures {
  const char* name;
  const char* model;
  double hbm_gbps;        // datasheet memory bandwidth
  double intra_line_gbps; // one-way line rate between GPUs of a node
  double inter_line_gbps; // one-way network line rate per GPU
  double mamf_efficiency; // maximum achievable bf16 matmul rate / dense peak (measured, below)
  bool hopper;            // sm_90: FlashAttention-2-generation kernels at kAttentionEfficiencyHopper
  double host_line_gbps;  // one-way line rate between the GPU and host memory
  double sm_count;        // streaming multiprocessors (datasheets, below)
  double tile_m, tile_n;  // the GEMM tile cuBLAS runs at large shapes (below)
};

// Datasheet figures (one-way line rates; NVIDIA quotes NVLink bidirectional):
//  H100 SXM: 3.35 TB/s HBM3, NVLink 900 GB/s (450 one way); DGX H100: one
//    400 Gb/s ConnectX-7 per GPU (50 GB/s). (nvidia.com/en-us/data-center/h100/,
//    DGX H100 datasheet)
//  H100 PCIe: 2.0 TB/s HBM2e (H100 PCIe product brief PB-11133-001: "greater than
//    2,000 GBps"), PCIe Gen5 x16 128 GB/s bidirectional (64 one way); network
//    assumed one 400 Gb/s NIC per GPU as DGX.
//  H200: 4.8 TB/s HBM3e, NVLink 900 GB/s (nvidia.com/en-us/data-center/h200/);
//    HGX H200 networking as DGX H100.
//  B200: HGX B200, 8 GPUs: 64 TB/s HBM3e (8 per GPU), NVLink 5 1.8 TB/s per GPU
//    (900 one way); DGX B200: 400 Gb/s ConnectX-7 per GPU.
//  A100 SXM 80GB: 2,039 GB/s HBM2e, NVLink 600 GB/s (300 one way) (A100
//    datasheet); DGX A100: one 200 Gb/s HDR per GPU (25 GB/s).
//  RTX A6000: 768 GB/s GDDR6, PCIe Gen4 x16 64 GB/s bidirectional (32 one way)
//    (RTX A6000 datasheet); network assumed 200 Gb/s per GPU.
//  L40S: 864 GB/s GDDR6, PCIe Gen4 x16 64 GB/s bidirectional, no NVLink (L40S
//    datasheet); network assumed 200 Gb/s per GPU.
// Maximum achievable matmul FLOPS (bf16, best shape found by mamf-finder.py;
// S. Bekman, github.com/stas00/ml-engineering, compute/accelerator/README.md,
// "Maximum Achievable Matmul FLOPS comparison table"): A100 SXM 271.2 of 312
// (86.9%), H100 SXM 794.5 of 989 (80.3%; "H200 is the same"), B200 SXM 1745 of
// 2250 (77.6%); H100 PCIe 499.5 of 756 (66.1%: github.com/mag-/gpu_benchmark,
// the same finder). RTX A6000 and L40S have no published figure: 81.1%, the
// median of the NVIDIA rows of that table (assumption).
// Host link (what a checkpoint's device -> pinned host copy crosses): PCIe Gen5
//  x16, 128 GB/s bidirectional (64 one way), on H100 SXM and PCIe and H200 (their
//  datasheets: "PCIe Gen5: 128GB/s"); B200 assumed the same (the DGX B200's
//  hosts are PCIe Gen5 Xeon Platinum 8570s); PCIe Gen4 x16, 64 GB/s bidirectional
//  (32 one way), on A100 ("PCIe Gen4: 64GB/s"), RTX A6000 and L40S. A Grace
//  Hopper's NVLink-C2C would be 900 GB/s bidirectional, 450 one way (GH200
//  datasheet); no built-in profile has it.
// SMs: H100 SXM 132, H100 PCIe 114 (NVIDIA H100 Tensor Core GPU Architecture
//  whitepaper), H200 132 (the same GH100 configuration as H100 SXM), B200 148, A100
//  108 (NVIDIA A100 Tensor Core GPU Architecture whitepaper), RTX A6000 84, L40S 142.
// GEMM tiles: Hopper 192 x 192, the tile of the cuBLAS kernels (nvjet_sm90 ...
//  192x192) that ran this project's LLaMA-2 1.36B step on an H100
//  (/work/shared/notes/gpu-h100-2026-11-25.md, torch.profiler); other GPUs 256 x 128
//  (assumption: the largest tile of cuBLAS's Ampere bf16 kernels).
constexpr GpuFigures kGpus[] = {
    {"h100_sxm", "H100 SXM", 3350, 450, 50, 0.803, true, 64, 132, 192, 192},
    {"h100_pcie", "H100 PCIe", 2000, 32 * 2, 50, 0.661, true, 64, 114, 192, 192},
    {"h200", "H200", 4800, 450, 50, 0.803, true, 64, 132, 192, 192},
    {"b200", "B200", 8000, 900, 50, 0.776, false, 64, 148, 256, 128},
    {"a100_sxm_80gb", "A100", 2039, 300, 25, 0.869, false, 32, 108, 256, 128},
    {"rtx_a6000", "RTX A6000", 768, 32, 25, 0.811, false, 32, 84, 256, 128},
    {"l40s", "L40S", 864, 32, 25, 0.811, false, 32, 142, 256, 128},
};
// FlashAttention-2 splits the sequence into blocks of 64-128 rows and columns and
// computes a causal mask's diagonal blocks whole (Dao 2023, arXiv 2307.08691, §3.1):
// 128 assumed.
constexpr double kAttentionTile = 128.0;
// Hopper's cuBLAS GEMMs (nvjet_sm90_tst_192x192_64x3_2x1_v_bz_coopB: tile
// 192 x 192, K step 64) are persistent, one CTA per SM (grid 2 x 66 = 132 in the
// trace), and share a short output's K loop among the SMs (stream-K): in the
// LLaMA-2 1.36B step traced on an H100 (2026-11-27, /work/notes/gpu-h100/,
// docs/performance-model.md) the attention projection's weight gradient,
// 2304 x 2304 x 16384 (144 tiles: 1.09 waves of tiles, 55% by tile waves), ran
// at 756 TFLOP/s, as fast as the 16384 x 12288 x 2304 fc (788). Its waves are
// counted over K steps of 64.
constexpr double kHopperGemmTileK = 64.0;

double table_peak(const std::string& model, PeakMath math) {
  for (const auto& e : device_peak_table())
    if (e.model == model && e.math == math) return e.tflops;
  return 0.0;
}

DeviceProfile gpu_profile(const GpuFigures& g) {
  DeviceProfile p;
  p.name = g.name;
  p.model = g.model;
  p.source = "built-in";
  const double gemm = kMamfShare * g.mamf_efficiency;
  p.matmul_tflops_16bit = gemm * table_peak(g.model, PeakMath::bf16);
  // fp32 runs on TF32 tensor cores on CUDA (enable_tf32); the FP32 rate where no
  // TF32 figure is known. TF32 is assumed to reach the bf16 share of its peak.
  const double tf32 = table_peak(g.model, PeakMath::tf32);
  const double fp32_peak = tf32 > 0 ? tf32 : table_peak(g.model, PeakMath::fp32);
  p.matmul_tflops_fp32 = gemm * fp32_peak;
  const double attention = g.hopper ? kAttentionEfficiencyHopper : kAttentionEfficiency;
  p.attention_tflops_16bit = attention * table_peak(g.model, PeakMath::bf16);
  p.attention_tflops_fp32 = attention * fp32_peak;
  p.memory_gbps = kAtenMemoryEfficiency * g.hbm_gbps;
  p.optimizer_gbps = kAdamWMemoryEfficiency * g.hbm_gbps;
  p.fused_elementwise_gbps = kMemoryEfficiency * g.hbm_gbps;
  p.intra_node_busbw_gbps = kLinkEfficiency * g.intra_line_gbps;
  p.inter_node_busbw_gbps = kLinkEfficiency * g.inter_line_gbps;
  p.collective_latency_us = kGpuCollectiveUs;
  p.launch_us = kGpuLaunchUs;
  p.storage_gbps = kGpuStorageGbps;
  p.host_copy_gbps = kGpuHostCopyGbps;
  p.d2h_gbps = kHostLinkEfficiency * g.host_line_gbps;
  p.data_batch_us = kGpuDataBatchUs;
  p.comm_overlap = 1.0;
  p.sm_count = g.sm_count;
  p.gemm_tile_m = g.tile_m;
  p.gemm_tile_n = g.tile_n;
  p.gemm_tile_k = g.hopper ? kHopperGemmTileK : 0.0;
  p.attention_tile = kAttentionTile;
  return p;
}

// This project's build machines (Debian 12 VM, 2 shared Xeon cores with
// avx512_bf16): `mpirun -np 2 llmtrain inputs/tiny_llama.cfg --device=cpu
// --calibrate` on 2026-11-25 at 19:08 UTC, while about seven other builds ran
// (load average 22): these are the rates of a crowded machine, one thread per
// rank; calibrate on yours (docs/performance-model.md). inter_node_busbw_gbps
// is not measured on one host (1 Gbit/s Ethernet, 0.82 x 0.125 GB/s).
DeviceProfile cpu_dev_profile() {
  DeviceProfile p;
  p.name = "cpu_dev";
  p.source = "built-in (llmtrain --calibrate on a build machine, 2026-11-25; docs/performance-model.md)";
  p.matmul_tflops_16bit = 0.00337;
  p.matmul_tflops_fp32 = 0.00709;
  p.attention_tflops_16bit = 0.000207;
  p.attention_tflops_fp32 = 0.00104;
  p.memory_gbps = 0.79;
  p.intra_node_busbw_gbps = 1.25;
  p.inter_node_busbw_gbps = 0.1;
  p.collective_latency_us = 0.8;
  p.launch_us = 69.5;
  p.storage_gbps = 0.059;
  // The snapshot's host copy: LibTorch's copy_ of 256 MiB of float32 into a kept
  // buffer, one thread, 2026-11-25 21:40 UTC, load average 10; no device copy.
  p.host_copy_gbps = 0.78;
  p.d2h_gbps = 0.0;
  p.data_batch_us = 447.0;
  p.comm_overlap = 0.0;
  return p;
}

std::vector<DeviceProfile> make_builtins() {
  std::vector<DeviceProfile> v;
  for (const auto& g : kGpus) v.push_back(gpu_profile(g));
  v.push_back(cpu_dev_profile());
  return v;
}

std::string builtin_names() {
  std::string s;
  for (const auto& p : builtin_device_profiles()) s += (s.empty() ? "" : ", ") + p.name;
  return s;
}

}  // namespace

std::string gemm_key(int64_t m, int64_t n, int64_t k, bool sixteen_bit) {
  return fmt::format("{}x{}x{}:{}", m, n, k, sixteen_bit ? "bf16" : "fp32");
}

std::string attention_key(int64_t seq_len, int64_t head_dim, bool sixteen_bit) {
  return fmt::format("T{}xD{}:{}", seq_len, head_dim, sixteen_bit ? "bf16" : "fp32");
}

const std::vector<DeviceProfile>& builtin_device_profiles() {
  static const std::vector<DeviceProfile> v = make_builtins();
  return v;
}

const DeviceProfile* builtin_profile_for_device(const std::string& device_name) {
  const std::string model = device_peak_model(device_name);
  for (const auto& p : builtin_device_profiles()) {
    if (!model.empty() && p.model == model) return &p;
    if (model.empty() && device_name.rfind("cpu", 0) == 0 && p.name == "cpu_dev") return &p;
  }
  return nullptr;
}

DeviceProfile load_device_profile(const std::string& name_or_file) {
  for (const auto& p : builtin_device_profiles())
    if (p.name == name_or_file) return p;
  if (!std::filesystem::is_regular_file(name_or_file))
    throw ConfigError(fmt::format("device profile '{}': neither a built-in profile ({}) nor a file", name_or_file,
                                  builtin_names()));
  std::ifstream in(name_or_file);
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    throw ConfigError(fmt::format("device profile {}: not valid JSON ({})", name_or_file, e.what()));
  }
  return device_profile_from_json(j, name_or_file);
}

// The numeric fields of a profile file: written and read from this one list.
constexpr std::pair<const char*, double DeviceProfile::*> kNumericFields[] = {
    {"matmul_tflops_16bit", &DeviceProfile::matmul_tflops_16bit},
    {"matmul_tflops_fp32", &DeviceProfile::matmul_tflops_fp32},
    {"attention_tflops_16bit", &DeviceProfile::attention_tflops_16bit},
    {"attention_tflops_fp32", &DeviceProfile::attention_tflops_fp32},
    {"memory_gbps", &DeviceProfile::memory_gbps},
    {"intra_node_busbw_gbps", &DeviceProfile::intra_node_busbw_gbps},
    {"inter_node_busbw_gbps", &DeviceProfile::inter_node_busbw_gbps},
    {"collective_latency_us", &DeviceProfile::collective_latency_us},
    {"launch_us", &DeviceProfile::launch_us},
    {"storage_gbps", &DeviceProfile::storage_gbps},
    {"host_copy_gbps", &DeviceProfile::host_copy_gbps},
    {"d2h_gbps", &DeviceProfile::d2h_gbps},
    {"data_batch_us", &DeviceProfile::data_batch_us},
    {"comm_overlap", &DeviceProfile::comm_overlap},
};
// Fields added on 2026-11-27 (the shape terms): optional, 0 when absent, so a
// profile written before reads back as it predicted then.
constexpr std::pair<const char*, double DeviceProfile::*> kOptionalFields[] = {
    {"sm_count", &DeviceProfile::sm_count},
    {"gemm_tile_m", &DeviceProfile::gemm_tile_m},
    {"gemm_tile_n", &DeviceProfile::gemm_tile_n},
    {"attention_tile", &DeviceProfile::attention_tile},
    // 2026-11-27 (the H100 measurements, docs/performance-model.md): stream-K
    // GEMMs and fused AdamW's own rate.
    {"gemm_tile_k", &DeviceProfile::gemm_tile_k},
    {"optimizer_gbps", &DeviceProfile::optimizer_gbps},
    {"fused_elementwise_gbps", &DeviceProfile::fused_elementwise_gbps},
};

nlohmann::json device_profile_json(const DeviceProfile& p) {
  nlohmann::json j = {{"name", p.name}, {"model", p.model}};
  for (const auto& [key, member] : kNumericFields) j[key] = p.*member;
  for (const auto& [key, member] : kOptionalFields) j[key] = p.*member;
  j["gemm_tflops"] = p.gemm_tflops;
  j["attention_by_shape_tflops"] = p.attention_by_shape_tflops;
  return j;
}

DeviceProfile device_profile_from_json(const nlohmann::json& j, const std::string& source) {
  DeviceProfile p;
  p.source = source;
  auto num = [&](const char* key, double& out) {
    if (!j.contains(key) || !j.at(key).is_number())
      throw ConfigError(fmt::format("device profile {}: field '{}' is missing or not a number", source, key));
    out = j.at(key).get<double>();
    if (out < 0) throw ConfigError(fmt::format("device profile {}: field '{}' is negative ({})", source, key, out));
  };
  if (!j.is_object() || !j.contains("name") || !j.at("name").is_string())
    throw ConfigError(fmt::format("device profile {}: expected a JSON object with a string 'name'", source));
  p.name = j.at("name").get<std::string>();
  p.model = j.value("model", std::string());
  for (const auto& [key, member] : kNumericFields) num(key, p.*member);
  for (const auto& [key, member] : kOptionalFields)
    if (j.contains(key)) num(key, p.*member);
  for (const auto& [field, into] : {std::pair{"gemm_tflops", &p.gemm_tflops},
                                    std::pair{"attention_by_shape_tflops", &p.attention_by_shape_tflops}})
    if (j.contains(field)) {
      if (!j.at(field).is_object())
        throw ConfigError(fmt::format("device profile {}: field '{}' is not an object of rates", source, field));
      for (const auto& [k, v] : j.at(field).items()) {
        if (!v.is_number() || v.get<double>() <= 0)
          throw ConfigError(fmt::format("device profile {}: {}['{}'] is not a positive number", source, field, k));
        (*into)[k] = v.get<double>();
      }
    }
  for (double r : {p.matmul_tflops_fp32, p.memory_gbps, p.intra_node_busbw_gbps})
    if (r <= 0) throw ConfigError(fmt::format("device profile {}: rates must be positive", source));
  return p;
}

}  // namespace llmtrain
