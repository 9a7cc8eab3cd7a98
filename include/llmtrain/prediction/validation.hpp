// How far a prediction can be trusted: the range of MFU that the validation
// against published GPU runs supports for it, and the ways its shape lies
// outside what the model was checked on (docs/performance-model.md,
// "Validation against published GPU runs"). predict_step fills it in; the
// describe output, the run log and llmtrain-plan print it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace llmtrain {

struct DeviceProfile;
struct ModelConfig;

// What the checking set of published runs covered for one GPU generation, and
// the errors (predicted / published MFU - 1) the model made on it.
struct ValidatedRegion {
  const char* device_model;       // the device table's model: "H100 SXM", "A100"
  const char* runs;               // which runs: "MPT-350M/1B/7B on 8 A100s (llm-foundry), ..."
  double min_error, max_error;    // the checking set's smallest and largest error
  int64_t min_seq, max_seq;       // sequence lengths checked
  double min_params, max_params;  // parameters checked (ModelConfig::num_params)
  int64_t min_gpus, max_gpus;     // GPUs per run checked
};
// One entry per GPU generation checked (tests/train/test_prediction.cpp holds
// these figures to what the published runs give).
const std::vector<ValidatedRegion>& validated_regions();

struct PredictionConfidence {
  bool have_range = false;           // a checked GPU generation (the profile's model)
  double mfu_lo = 0, mfu_hi = 0;     // percent: the prediction / (1 + max_error) .. / (1 + min_error)
  std::string checked_on;            // the region's `runs`
  std::vector<std::string> outside;  // "sequence length 131072 (checked 512-32768)", ...
};

// `mfu_percent` 0 or less: no MFU (a CPU profile): no range, and "outside"
// names the device.
PredictionConfidence prediction_confidence(const ModelConfig& m, bool sixteen_bit, int64_t world_size,
                                           const DeviceProfile& p, double mfu_percent);

// "MFU 38-44% (the range the checking set supports: ...); outside what was checked: ..."
std::string format_confidence(const PredictionConfidence& c);

}  // namespace llmtrain
