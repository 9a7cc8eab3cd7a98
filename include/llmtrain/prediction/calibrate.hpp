// `llmtrain --calibrate`: measures the device profile (device_profile.hpp) on
// the machine and the ranks it was started with: GEMMs at the model's own
// shapes (forward and both backward products, fp32 and bf16), fused attention
// at the model's shape, element-wise memory bandwidth, fused AdamW's streaming
// rate, the dispatch cost of one operator, each collective between the ranks (allreduce, reduce-scatter,
// all-gather at the bucket size; the latency of a small one; how much of a
// collective runs under compute), checkpoint write bandwidth and the loader's
// time per batch. Every rank measures at once, as in training (they share the
// node's cores and links); the slowest rank's figure is kept.
#pragma once
#include <string>

#include "llmtrain/prediction/device_profile.hpp"

namespace llmtrain {

struct Config;
class Runtime;

// What a calibration measures. full: all of the above (llmtrain --calibrate,
// device_profile=calibrate). step: only what this run's step costs, briefly
// (about 10 ms per timed repetition instead of 50): GEMMs and attention in the
// run's dtype, bandwidth, AdamW, the per-operator fit, the collectives; checkpoint
// storage, snapshot copies and the loader keep the built-in profile's figures.
// A CPU run without device_profile uses it (calibrates_by_default,
// record/prediction_check.hpp): a CPU's speed is the load beside it.
enum class CalibrationScope { full, step };

// Collective: every rank calls it. Rank 0 writes out_dir/device_profile.json
// and returns its path (other ranks: empty).
std::string calibrate_device_profile(const Config& c, Runtime& rt, DeviceProfile* measured = nullptr,
                                     CalibrationScope scope = CalibrationScope::full);

}  // namespace llmtrain
