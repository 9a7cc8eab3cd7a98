// Dense peak TFLOP/s per device and matmul arithmetic: the one table MFU divides by.
// An unknown device (CPU included) has no peak: MFU is then "unknown", never a
// figure computed against a guessed peak. `peak_tflops` in the config overrides.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "llmtrain/core/options.hpp"  // defines: ComputeDtype

namespace llmtrain {

// How fp32 matmuls execute: IEEE fp32 (LibTorch's default, and every CPU) or on
// TF32 tensor cores (what enable_tf32 turns on for CUDA).
enum class Fp32Matmuls { ieee, tf32 };

// The arithmetic a run's matmuls execute in: which column of the table applies.
enum class PeakMath { bf16, fp16, tf32, fp32 };
PeakMath peak_math(ComputeDtype dtype, Fp32Matmuls fp32_matmuls);
// Why that peak applies, printed at start-up and kept in the run log
// (startup_info.mfu.peak_basis): "bf16 dense", "fp16 dense", "TF32 dense (fp32
// matmuls run on TF32 tensor cores)", "fp32 (TF32 off)".
const char* peak_basis(PeakMath math);

struct DevicePeakEntry {
  std::string model;        // short name printed to users, e.g. "H100 SXM"
  PeakMath math;
  double tflops = 0.0;      // dense (no 2:4 sparsity) peak per device
};

// The whole table (for docs/mfu.md and tests).
const std::vector<DevicePeakEntry>& device_peak_table();

// The table's model for a CUDA device name ("NVIDIA H100 80GB HBM3" -> "H100 SXM"),
// or empty when the name is not recognised.
std::string device_peak_model(const std::string& device_name);

// Peak of `device_name` for compute `dtype` (fp32 matmuls as `fp32_matmuls`), or
// nullopt when unknown.
std::optional<double> device_peak_tflops(const std::string& device_name, ComputeDtype dtype,
                                         Fp32Matmuls fp32_matmuls = Fp32Matmuls::ieee);

// The peak MFU uses, with where it came from and why it applies.
struct PeakInfo {
  std::optional<double> tflops_per_device;  // nullopt: MFU unknown
  std::string source;  // "table (H100 SXM, bf16 dense)", "peak_tflops override ...", "unknown: ..."
  std::string basis;   // peak_basis() of the run's matmuls, also with an override or an unknown peak
};

// `override_tflops` > 0 (the peak_tflops key) wins over the table.
PeakInfo resolve_peak(const std::string& device_name, ComputeDtype dtype, double override_tflops,
                      Fp32Matmuls fp32_matmuls = Fp32Matmuls::ieee);

// Memory of one device in bytes (the datasheet's GB read as GiB, as
// cudaGetDeviceProperties reports them; what a run can use is a little less:
// the CUDA context takes some), for a CUDA device name or a table model
// ("H100 SXM"); nullopt when unknown. An A100 named "40GB" has 40.
std::optional<double> device_memory_bytes(const std::string& device_name);

}  // namespace llmtrain
