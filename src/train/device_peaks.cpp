#include "llmtrain/train/device_peaks.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace llmtrain {
namespace {

// Dense (no 2:4 sparsity) vendor peaks per device, TFLOP/s. bfloat16 and float16
// run on the same tensor cores at the same rate. float32 is the non-tensor-core
// FP32 rate: LibTorch leaves TF32 matmuls off by default, so fp32 runs there.
// Where we do not know a figure the entry is absent and MFU is "unknown".
constexpr ComputeDtype bf16 = ComputeDtype::bfloat16, fp16 = ComputeDtype::float16, fp32 = ComputeDtype::float32;
const std::vector<DevicePeakEntry> kTable = {
    {"A100", bf16, 312.0},     {"A100", fp16, 312.0},     {"A100", fp32, 19.5},
    {"H100 SXM", bf16, 989.0}, {"H100 SXM", fp16, 989.0}, {"H100 SXM", fp32, 67.0},
    {"H100 PCIe", bf16, 756.0}, {"H100 PCIe", fp16, 756.0}, {"H100 PCIe", fp32, 51.0},
    {"H100 NVL", bf16, 835.0}, {"H100 NVL", fp16, 835.0}, {"H100 NVL", fp32, 60.0},
    {"GH200", bf16, 989.0},    {"GH200", fp16, 989.0},    {"GH200", fp32, 67.0},
    {"H200", bf16, 989.0},     {"H200", fp16, 989.0},     {"H200", fp32, 67.0},
    {"H200 NVL", bf16, 835.0}, {"H200 NVL", fp16, 835.0}, {"H200 NVL", fp32, 60.0},
    {"B200", bf16, 2250.0},    {"B200", fp16, 2250.0},
    {"GB200", bf16, 2500.0},   {"GB200", fp16, 2500.0},
    {"RTX A6000", bf16, 154.8}, {"RTX A6000", fp16, 154.8}, {"RTX A6000", fp32, 38.7},
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
    {"A100", "A100"},          {"RTX A6000", "RTX A6000"},
};

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

}  // namespace

const std::vector<DevicePeakEntry>& device_peak_table() { return kTable; }

std::string device_peak_model(const std::string& device_name) {
  const std::string u = upper(device_name);
  for (const auto& [fragment, model] : kNameRules)
    if (u.find(fragment) != std::string::npos) return model;
  return "";
}

std::optional<double> device_peak_tflops(const std::string& device_name, ComputeDtype dtype) {
  const std::string model = device_peak_model(device_name);
  if (model.empty()) return std::nullopt;
  for (const auto& e : kTable)
    if (e.model == model && e.dtype == dtype) return e.tflops;
  return std::nullopt;
}

PeakInfo resolve_peak(const std::string& device_name, ComputeDtype dtype, double override_tflops) {
  PeakInfo p;
  if (override_tflops > 0.0) {
    p.tflops_per_device = override_tflops;
    p.source = fmt::format("peak_tflops override ({:g} TFLOP/s per device)", override_tflops);
    return p;
  }
  const std::string model = device_peak_model(device_name);
  p.tflops_per_device = device_peak_tflops(device_name, dtype);
  if (p.tflops_per_device) {
    p.source = fmt::format("table ({}, {}, dense)", model, to_string(dtype));
  } else if (!model.empty()) {
    p.source = fmt::format("unknown: no {} peak for {} in the table (set peak_tflops)", to_string(dtype), model);
  } else {
    p.source = fmt::format("unknown: device '{}' is not in the table (set peak_tflops)", device_name);
  }
  return p;
}

}  // namespace llmtrain
