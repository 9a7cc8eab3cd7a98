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
const std::vector<DevicePeakEntry> kTable = {
    {"A100", "bfloat16", 312.0},     {"A100", "float16", 312.0},     {"A100", "float32", 19.5},
    {"H100 SXM", "bfloat16", 989.0}, {"H100 SXM", "float16", 989.0}, {"H100 SXM", "float32", 67.0},
    {"H100 PCIe", "bfloat16", 756.0}, {"H100 PCIe", "float16", 756.0}, {"H100 PCIe", "float32", 51.0},
    {"H100 NVL", "bfloat16", 835.0}, {"H100 NVL", "float16", 835.0}, {"H100 NVL", "float32", 60.0},
    {"GH200", "bfloat16", 989.0},    {"GH200", "float16", 989.0},    {"GH200", "float32", 67.0},
    {"H200", "bfloat16", 989.0},     {"H200", "float16", 989.0},     {"H200", "float32", 67.0},
    {"H200 NVL", "bfloat16", 835.0}, {"H200 NVL", "float16", 835.0}, {"H200 NVL", "float32", 60.0},
    {"B200", "bfloat16", 2250.0},    {"B200", "float16", 2250.0},
    {"GB200", "bfloat16", 2500.0},   {"GB200", "float16", 2500.0},
    {"RTX A6000", "bfloat16", 154.8}, {"RTX A6000", "float16", 154.8}, {"RTX A6000", "float32", 38.7},
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

std::optional<double> device_peak_tflops(const std::string& device_name, const std::string& dtype) {
  const std::string model = device_peak_model(device_name);
  if (model.empty()) return std::nullopt;
  for (const auto& e : kTable)
    if (e.model == model && e.dtype == dtype) return e.tflops;
  return std::nullopt;
}

PeakInfo resolve_peak(const std::string& device_name, const std::string& dtype, double override_tflops) {
  PeakInfo p;
  if (override_tflops > 0.0) {
    p.tflops_per_device = override_tflops;
    p.source = fmt::format("peak_tflops override ({:g} TFLOP/s per device)", override_tflops);
    return p;
  }
  const std::string model = device_peak_model(device_name);
  p.tflops_per_device = device_peak_tflops(device_name, dtype);
  if (p.tflops_per_device) {
    p.source = fmt::format("table ({}, {}, dense)", model, dtype);
  } else if (!model.empty()) {
    p.source = fmt::format("unknown: no {} peak for {} in the table (set peak_tflops)", dtype, model);
  } else {
    p.source = fmt::format("unknown: device '{}' is not in the table (set peak_tflops)", device_name);
  }
  return p;
}

}  // namespace llmtrain
