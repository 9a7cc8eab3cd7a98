// `llmtrain --calibrate`: measures the device profile (device_profile.hpp) on
// the machine and the ranks it was started with: GEMMs at the model's own
// shapes (forward and both backward products, fp32 and bf16), fused attention
// at the model's shape, element-wise memory bandwidth, the dispatch cost of one
// operator, each collective between the ranks (allreduce, reduce-scatter,
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

// Collective: every rank calls it. Rank 0 writes out_dir/device_profile.json
// and returns its path (other ranks: empty).
std::string calibrate_device_profile(const Config& c, Runtime& rt, DeviceProfile* measured = nullptr);

}  // namespace llmtrain
