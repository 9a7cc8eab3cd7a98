#include "llmtrain/prediction/device_peaks.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace llmtrain {
namespace {

// Dense (no 2:4 sparsity) vendor peaks per device, TFLOP/s, by the arithmetic
// the matmuls execute in. bfloat16 and float16 run on the same tensor cores at
// the same rate. "tf32": fp32 matmuls on TF32 tensor cores (enable_tf32 turns
// that on for CUDA, as PyTorch's allow_tf32 does). "fp32": the non-tensor-core
// FP32 rate, for fp32 with TF32 off (LibTorch's default). NVIDIA's datasheets
// give the tensor-core figures "with sparsity": the dense peak is half of that.
// Where we do not know a figure the entry is absent and MFU is "unknown".
// Sources:
//  A100: NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100/):
//    FP32 19.5, TF32 156 (312 sparse), BF16/FP16 312 (624 sparse).
//  H100 SXM / PCIe / NVL: NVIDIA H100 Tensor Core GPU datasheet
//    (nvidia.com/en-us/data-center/h100/): FP32 67 / 51 / 60; TF32 989 / 756 / 835
//    sparse; BF16/FP16 1979 / 1513 / 1671 sparse. The SXM TF32 dense figure,
//    494.7 (989.4 / 2), is the NVIDIA H100 Tensor Core GPU Architecture
//    whitepaper's (table "H100 SXM5 ... Peak TF32 Tensor TFLOPS").
//  H200 / H200 NVL: NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200/):
//    FP32 67 / 60; TF32 989 / 835 sparse; BF16/FP16 1979 / 1671 sparse: the
//    H100 SXM's and the H100 NVL's figures.
//  GH200: NVIDIA GH200 Grace Hopper Superchip datasheet: its GPU's FP32 67, TF32
//    989 sparse and BF16/FP16 1979 sparse are the H100 SXM's.
//  B200: NVIDIA HGX B200 (nvidia.com/en-us/data-center/hgx/), 8 GPUs: TF32 18
//    PFLOPS sparse, FP16/BF16 36 PFLOPS sparse -> per GPU dense 1125 and 2250.
//    FP32 (TF32 off): not in the table (unknown).
//  GB200: NVIDIA GB200 NVL72 (nvidia.com/en-us/data-center/gb200-nvl72/), 72 GPUs:
//    TF32 180 PFLOPS sparse, FP16/BF16 360 PFLOPS sparse -> per GPU dense 1250
//    and 2500. FP32 (TF32 off): unknown.
//  RTX A6000: NVIDIA RTX A6000 datasheet: FP32 38.7, BF16/FP16 tensor 154.8 dense
//    (309.7 sparse). TF32: unknown (not in the table).
//  L40S: NVIDIA L40S datasheet: FP32 91.6, TF32 183 (366 sparse), BF16/FP16
//    362.05 (733 sparse).
constexpr PeakMath bf16 = PeakMath::bf16, fp16 = PeakMath::fp16, tf32 = PeakMath::tf32, fp32 = PeakMath::fp32;
const std::vector<DevicePeakEntry> kTable = {
    {"A100", bf16, 312.0},      {"A100", fp16, 312.0},      {"A100", tf32, 156.0},      {"A100", fp32, 19.5},
    {"H100 SXM", bf16, 989.0},  {"H100 SXM", fp16, 989.0},  {"H100 SXM", tf32, 494.7},  {"H100 SXM", fp32, 67.0},
    {"H100 PCIe", bf16, 756.0}, {"H100 PCIe", fp16, 756.0}, {"H100 PCIe", tf32, 378.0}, {"H100 PCIe", fp32, 51.0},
    {"H100 NVL", bf16, 835.0},  {"H100 NVL", fp16, 835.0},  {"H100 NVL", tf32, 417.5},  {"H100 NVL", fp32, 60.0},
    {"GH200", bf16, 989.0},     {"GH200", fp16, 989.0},     {"GH200", tf32, 494.7},     {"GH200", fp32, 67.0},
    {"H200", bf16, 989.0},      {"H200", fp16, 989.0},      {"H200", tf32, 494.7},      {"H200", fp32, 67.0},
    {"H200 NVL", bf16, 835.0},  {"H200 NVL", fp16, 835.0},  {"H200 NVL", tf32, 417.5},  {"H200 NVL", fp32, 60.0},
    {"B200", bf16, 2250.0},     {"B200", fp16, 2250.0},     {"B200", tf32, 1125.0},
    {"GB200", bf16, 2500.0},    {"GB200", fp16, 2500.0},    {"GB200", tf32, 1250.0},
    {"RTX A6000", bf16, 154.8}, {"RTX A6000", fp16, 154.8}, {"RTX A6000", fp32, 38.7},
    {"L40S", bf16, 362.05},     {"L40S", fp16, 362.05},     {"L40S", tf32, 183.0},      {"L40S", fp32, 91.6},
};

// CUDA device-name fragments -> table model, most specific first (GB200 before
// B200, H200 NVL before H200). Names as cudaGetDeviceProperties reports them,
// e.g. "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe".
// A bare "H100" that is none of the known variants stays unknown: SXM and PCIe
// differ by 30%, and guessing would make MFU wrong.
const std::vector<std::pair<std::string, std::string>> kNameRules = {
    {"GB200", "GB200"},        {"B200", "B200"},         {"GH200", "GH200"},
    {"H200 NVL", "H200 NVL"},  {"H200", "H200"},         {"H100 NVL", "H100 NVL"},
    {"H100 PCIE", "H100 PCIe"}, {"H100 80GB HBM3", "H100 SXM"}, {"H100 SXM", "H100 SXM"},
    {"A100", "A100"},          {"RTX A6000", "RTX A6000"}, {"L40S", "L40S"},
};

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

}  // namespace

PeakMath peak_math(ComputeDtype dtype, Fp32Matmuls fp32_matmuls) {
  switch (dtype) {
    case ComputeDtype::bfloat16: return PeakMath::bf16;
    case ComputeDtype::float16: return PeakMath::fp16;
    case ComputeDtype::float32: return fp32_matmuls == Fp32Matmuls::tf32 ? PeakMath::tf32 : PeakMath::fp32;
  }
  return PeakMath::fp32;
}

const char* peak_basis(PeakMath math) {
  switch (math) {
    case PeakMath::bf16: return "bf16 dense";
    case PeakMath::fp16: return "fp16 dense";
    case PeakMath::tf32: return "TF32 dense (fp32 matmuls run on TF32 tensor cores)";
    case PeakMath::fp32: return "fp32 (TF32 off)";
  }
  return "?";
}

const std::vector<DevicePeakEntry>& device_peak_table() { return kTable; }

std::string device_peak_model(const std::string& device_name) {
  const std::string u = upper(device_name);
  for (const auto& [fragment, model] : kNameRules)
    if (u.find(fragment) != std::string::npos) return model;
  return "";
}

std::optional<double> device_peak_tflops(const std::string& device_name, ComputeDtype dtype,
                                         Fp32Matmuls fp32_matmuls) {
  const std::string model = device_peak_model(device_name);
  if (model.empty()) return std::nullopt;
  const PeakMath math = peak_math(dtype, fp32_matmuls);
  for (const auto& e : kTable)
    if (e.model == model && e.math == math) return e.tflops;
  return std::nullopt;
}

PeakInfo resolve_peak(const std::string& device_name, ComputeDtype dtype, double override_tflops,
                      Fp32Matmuls fp32_matmuls) {
  PeakInfo p;
  p.basis = peak_basis(peak_math(dtype, fp32_matmuls));
  if (override_tflops > 0.0) {
    p.tflops_per_device = override_tflops;
    p.source = fmt::format("peak_tflops override ({:g} TFLOP/s per device)", override_tflops);
    return p;
  }
  const std::string model = device_peak_model(device_name);
  p.tflops_per_device = device_peak_tflops(device_name, dtype, fp32_matmuls);
  if (p.tflops_per_device) {
    p.source = fmt::format("table ({}, {})", model, p.basis);
  } else if (!model.empty()) {
    p.source = fmt::format("unknown: no {} peak for {} in the table (set peak_tflops)", p.basis, model);
  } else {
    p.source = fmt::format("unknown: device '{}' is not in the table (set peak_tflops)", device_name);
  }
  return p;
}

namespace {
// Datasheet memory per device, GB (HBM/GDDR capacity): A100 80GB (SXM4/PCIe),
// H100 SXM5 and PCIe 80, H100 NVL 94, GH200 96 (the HBM3 part), H200 and H200
// NVL 141, B200 180 (DGX B200: 1,440 GB over 8), GB200 186 (NVL72: 13.4 TB
// over 72), RTX A6000 48.
const std::vector<std::pair<std::string, double>> kMemoryGB = {
    {"A100", 80},  {"H100 SXM", 80}, {"H100 PCIe", 80}, {"H100 NVL", 94}, {"GH200", 96},     {"H200", 141},
    {"H200 NVL", 141}, {"B200", 180}, {"GB200", 186},   {"RTX A6000", 48},
};
}  // namespace

std::optional<double> device_memory_bytes(const std::string& device_name) {
  const std::string model = device_peak_model(device_name);
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  if (model == "A100" && upper(device_name).find("40GB") != std::string::npos) return 40 * kGiB;
  for (const auto& [m, gb] : kMemoryGB)
    if (m == model) return gb * kGiB;
  return std::nullopt;
}

}  // namespace llmtrain

