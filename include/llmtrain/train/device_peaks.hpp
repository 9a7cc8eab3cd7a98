// Dense peak TFLOP/s per device and compute dtype: the one table MFU divides by.
// An unknown device (CPU included) has no peak: MFU is then "unknown", never a
// figure computed against a guessed peak. `peak_tflops` in the config overrides.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "llmtrain/core/options.hpp"  // defines: ComputeDtype

namespace llmtrain {

struct DevicePeakEntry {
  std::string model;        // short name printed to users, e.g. "H100 SXM"
  ComputeDtype dtype;
  double tflops = 0.0;      // dense (no 2:4 sparsity) peak per device
};

// The whole table (for docs/mfu.md and tests).
const std::vector<DevicePeakEntry>& device_peak_table();

// The table's model for a CUDA device name ("NVIDIA H100 80GB HBM3" -> "H100 SXM"),
// or empty when the name is not recognised.
std::string device_peak_model(const std::string& device_name);

// Peak of `device_name` for compute `dtype`, or nullopt when unknown.
std::optional<double> device_peak_tflops(const std::string& device_name, ComputeDtype dtype);

// The peak MFU uses, with where it came from.
struct PeakInfo {
  std::optional<double> tflops_per_device;  // nullopt: MFU unknown
  std::string source;  // "table (H100 SXM, bfloat16, dense)", "peak_tflops override", "unknown device ..."
};

// `override_tflops` > 0 (the peak_tflops key) wins over the table.
PeakInfo resolve_peak(const std::string& device_name, ComputeDtype dtype, double override_tflops);

}  // namespace llmtrain
