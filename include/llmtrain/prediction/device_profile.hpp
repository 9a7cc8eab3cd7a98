// A device profile: the rates the performance model (cost_model.hpp) turns a
// step's work into time with. Built in for the GPUs in the device table and for
// a CPU node of this project's build machines; `llmtrain --calibrate` measures
// one on the machine it runs on (out_dir/device_profile.json), which
// `--describe_device=FILE` and `device_profile=FILE` read back.
// Every built-in figure names its public source in device_profile.cpp and
// docs/performance-model.md.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "llmtrain/prediction/device_peaks.hpp"  // defines: PeakMath

namespace llmtrain {

struct DeviceProfile {
  std::string name;    // "h100_sxm", "cpu_dev", or what --calibrate found ("calibrated: ...")
  std::string model;   // the device table's model ("H100 SXM"; empty for a CPU): MFU's peak
  std::string source;  // "built-in" or the file it was read from
  // Achievable rates (not the datasheet peaks) of one device.
  double matmul_tflops_16bit = 0;  // large bf16/fp16 GEMMs
  double matmul_tflops_fp32 = 0;   // large fp32 GEMMs as the run executes them (TF32 on CUDA)
  double attention_tflops_16bit = 0;  // fused causal attention, FLOPs counted as executed (causal half)
  double attention_tflops_fp32 = 0;
  double memory_gbps = 0;         // device-memory bandwidth of element-wise kernels, GB/s (1e9 B/s)
  double intra_node_busbw_gbps = 0;  // collective bus bandwidth between ranks of one node (NVLink, shared memory)
  // ... between nodes (InfiniBand, Ethernet): each rank's share (one GPU's NIC);
  // a ring across nodes gets ranks_per_node x this, at most the intra-node figure.
  double inter_node_busbw_gbps = 0;
  double collective_latency_us = 0;  // fixed cost of one collective call
  double launch_us = 0;              // fixed cost of one kernel launch / operator dispatch
  double storage_gbps = 0;           // checkpoint write bandwidth per rank (sequential, fsynced)
  double host_copy_gbps = 0;         // host memory copy per rank (a CPU run's asynchronous snapshot)
  double d2h_gbps = 0;               // device -> pinned host copy per GPU (a CUDA run's snapshot); 0 on a CPU
  double data_batch_us = 0;          // loader: one micro-batch read and handed to the device
  // Fraction of a collective that can run while the device computes (1 on GPUs:
  // NCCL has its own stream; on a CPU the ranks' MPI shares the cores).
  double comm_overlap = 1.0;
  // How a GPU's rate depends on a kernel's shape (0: not modelled, a CPU). A GEMM's
  // result is cut into gemm_tile_m x gemm_tile_n tiles run in waves of one tile per
  // SM: the padding of the last tile row and column and the idle SMs of the last
  // wave are lost (tile and wave quantization). A fused causal attention kernel
  // computes the diagonal blocks of attention_tile x attention_tile whole.
  double sm_count = 0, gemm_tile_m = 0, gemm_tile_n = 0, attention_tile = 0;
  // > 0: the GEMM kernels are persistent and split the K dimension across SMs
  // (stream-K: Hopper's cuBLAS nvjet kernels), so the waves are counted over
  // tiles x ceil(K / gemm_tile_k) work units instead of tiles: a small output
  // with a long K (a weight gradient) still fills the SMs. 0: tile waves (Ampere).
  double gemm_tile_k = 0;
  // Fused AdamW's streaming rate over its 32 bytes per element, GB/s
  // (--calibrate times at::_fused_adamw_ and the gradient norm); 0: memory_gbps.
  double optimizer_gbps = 0;
  // The element-wise bandwidth of fused kernels as the published runs'
  // frameworks run them (ElementwiseKernels::fused, cost_model.hpp), GB/s; 0:
  // memory_gbps. Built-in GPU profiles: the share fitted on the published runs.
  double fused_elementwise_gbps = 0;
  // Calibrated GEMM rates at the model's own shapes: "MxNxK:bf16" -> TFLOP/s.
  std::map<std::string, double> gemm_tflops;
  // Calibrated fused-attention rates at the model's own (T, head dim): "T2048xD128:bf16"
  // -> TFLOP/s counted as executed (the causal half).
  std::map<std::string, double> attention_by_shape_tflops;

  double matmul_tflops(bool sixteen_bit) const { return sixteen_bit ? matmul_tflops_16bit : matmul_tflops_fp32; }
  // Kernels run asynchronously to the host (a GPU): an operator's dispatch
  // cost (launch_us) shows only where the host is slower than the device.
  bool asynchronous() const { return sm_count > 0; }
  double attention_tflops(bool sixteen_bit) const {
    return sixteen_bit ? attention_tflops_16bit : attention_tflops_fp32;
  }
};

// Key of gemm_tflops: "4096x768x2304:bf16" (M x N x K).
std::string gemm_key(int64_t m, int64_t n, int64_t k, bool sixteen_bit);

// Key of attention_by_shape_tflops: "T2048xD128:bf16".
std::string attention_key(int64_t seq_len, int64_t head_dim, bool sixteen_bit);

// Built-in profiles: h100_sxm, h100_pcie, h200, b200, a100_sxm_80gb, rtx_a6000,
// l40s, cpu_dev.
const std::vector<DeviceProfile>& builtin_device_profiles();
// A built-in name or a profile JSON file; throws naming what was asked and what exists.
DeviceProfile load_device_profile(const std::string& name_or_file);
// The built-in profile of a detected device ("NVIDIA H100 80GB HBM3" -> h100_sxm;
// "cpu" -> cpu_dev); nullptr when there is none.
const DeviceProfile* builtin_profile_for_device(const std::string& device_name);

nlohmann::json device_profile_json(const DeviceProfile& p);
DeviceProfile device_profile_from_json(const nlohmann::json& j, const std::string& source);

}  // namespace llmtrain
