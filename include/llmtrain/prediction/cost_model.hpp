// The performance model: the time of one training step, phase by phase, from
// the config, the world layout and a device profile. Pure arithmetic on the
// structures the code builds (the parameter table, the gradient-bucket layout
// of distributed/bucket_layout.hpp, the FSDP units = the blocks); allocates no
// tensor. `--describe`, the trainer (run log, slow-step warning) and
// llmtrain-plan read it. docs/performance-model.md describes every term.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "llmtrain/model/model_config.hpp"
#include "llmtrain/prediction/device_profile.hpp"
#include "llmtrain/prediction/validation.hpp"  // defines: PredictionConfidence

namespace llmtrain {

struct Config;

// How the element-wise work of a block (norms, RoPE, the activation, copies)
// runs: as this program's model/layers.cpp dispatches it, operator by operator
// (RMSNorm as six ATen operators over fp32 rows, RoPE as seven, QK-norm's fp32
// detour under autocast), or as fused kernels (one read and one write per norm,
// RoPE and activation: the frameworks of the published runs).
enum class ElementwiseKernels { llmtrain, fused };

// What the model needs to know of a run (RunShape::from_config reads a Config).
struct RunShape {
  ModelConfig model;
  ComputeDtype dtype = ComputeDtype::float32;
  int64_t batch_size = 1;          // per rank, sequences
  int64_t grad_accum = 1;
  StrategyKind strategy = StrategyKind::ddp;
  bool fsdp_prefetch = true;
  double bucket_bytes = 25.0 * 1024 * 1024;
  int64_t checkpoint_interval = 0; // 0: a checkpoint per evaluation (the bound when val improves each time)
  int64_t eval_interval = 250;
  bool checkpoint_async = false;   // saves block only for the snapshot copy (checkpoint_async)
  // Bytes per element of the parameters gathered (FSDP, ZeRO-1) and of the
  // gradients reduced. This implementation keeps both in fp32 (4); other
  // implementations a published run used may gather bf16 (2).
  double gather_bytes = 4.0, reduce_bytes = 4.0;
  // The parameters' dtype (param_dtype): 4, or 2 with bf16 parameters, whose
  // residual stream and norms are then 16-bit.
  double param_bytes = 4.0;
  ElementwiseKernels elementwise = ElementwiseKernels::llmtrain;
  static RunShape from_config(const Config& c, const ModelConfig& m);
};

struct WorldLayout {
  int64_t world_size = 1;
  int64_t ranks_per_node = 1;  // ranks sharing the fast link; the rest cross the network
};

// One collective kind of the step, all its calls together.
struct CollectiveCost {
  std::string what;      // "allreduce gradients (12 buckets)"
  double bytes = 0;      // per rank, what it hands to the collective, all calls
  double seconds = 0;    // time on the link
  double exposed_s = 0;  // what compute does not hide
};

// Seconds per iteration, per phase. The phases match the run log's
// (data, forward_backward, communication, optimizer); forward and backward
// are separate here and add up to forward_backward.
struct StepPrediction {
  std::string device;         // the profile's name
  double data_s = 0;
  double forward_s = 0, backward_s = 0;
  double communication_s = 0; // exposed: what the step waits for
  double optimizer_s = 0;
  double checkpoint_s = 0;    // amortized over the checkpoint interval; not part of step_time_s
  // One save: the bytes the busiest rank writes (DDP's rank 0: all), and how long
  // the save holds the loop, synchronous (copy to the host + write) and
  // asynchronous (the snapshot copy, plus any write not done by the next save).
  double checkpoint_bytes = 0, checkpoint_sync_s = 0, checkpoint_async_s = 0;
  // Where forward + backward go.
  double matmul_s = 0, attention_s = 0, elementwise_s = 0, launch_s = 0;
  double communication_total_s = 0;  // on the link, hidden or not
  std::vector<CollectiveCost> collectives;
  double step_time_s = 0;     // data + forward + backward + communication + optimizer
  double tokens_per_iter = 0;
  double tokens_per_s = 0;
  std::optional<double> mfu_percent;  // against the device table's dense peak; nullopt for a CPU
  // The MFU range the published-run validation supports, and what of this run's
  // shape it did not cover (prediction/validation.hpp).
  PredictionConfidence confidence;
  double forward_backward_s() const { return forward_s + backward_s; }
};

StepPrediction predict_step(const RunShape& run, const WorldLayout& world, const DeviceProfile& device);

// Forward element-wise bytes (read + written) of one transformer block for
// `run`: norms, RoPE, the activation, residual adds, activation casts and
// copies; not the GEMMs, attention or weight casts. The element-wise time is
// built from it; tests/record/test_block_bytes.cpp checks it against the ops a
// block runs.
double block_elementwise_bytes(const RunShape& run);

// --describe's lines and the JSON object `prediction` of --describe_format=json
// and the run log: step_time_s, tokens_per_s, mfu (percent or null), phases{...}.
std::string format_prediction(const StepPrediction& p, const WorldLayout& world);
nlohmann::json prediction_json(const StepPrediction& p);

// The GEMMs of one iteration on one rank, forward only (backward runs two of
// the same FLOPs per forward GEMM, with M/N/K permuted): what --calibrate times.
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  int64_t count = 0;  // per micro-batch
};
std::vector<GemmShape> forward_gemms(const ModelConfig& m, int64_t batch_size);

// The shape terms of a GPU profile (docs/performance-model.md, "Efficiency by
// shape"): a GEMM's share of the large-GEMM rate at an M x N output (tile and
// wave quantization), and a fused causal attention kernel's share of its rate at
// (batch, heads, T) (diagonal blocks computed whole, waves). 1 on a CPU profile.
// k > 0 on a stream-K profile (gemm_tile_k): the waves are of K steps, not tiles.
double gemm_shape_efficiency(const DeviceProfile& p, int64_t m, int64_t n, int64_t k = 0);

// GEMMs timed at their shapes (seconds per call, `count` calls per step).
struct GemmTiming {
  int64_t m = 0, n = 0, k = 0;
  double count = 1, seconds = 0;
};
// The large-GEMM rate (TFLOP/s) at which the shape terms reproduce the timed
// GEMMs' total time: sum of count x FLOPs / shape efficiency over the sum of
// count x seconds. --calibrate sets matmul_tflops_* to it, so that the shapes it
// did not time (another model, another batch) take their own efficiency once,
// not the timed shapes' on top of it.
double large_gemm_tflops(const DeviceProfile& p, const std::vector<GemmTiming>& timed);
double attention_shape_efficiency(const DeviceProfile& p, int64_t batch, int64_t heads, int64_t seq_len);

}  // namespace llmtrain
