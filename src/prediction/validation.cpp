#include "llmtrain/prediction/validation.hpp"

#include <fmt/format.h>

#include "llmtrain/model/model_config.hpp"
#include "llmtrain/prediction/device_profile.hpp"

namespace llmtrain {

// The checking set of tests/train/published_runs.hpp (fixed before the fit:
// MPT-350M, 1B and 7B of llm-foundry's tables, and torchtitan's LLaMA-2 13B),
// predicted by this model: PublishedRuns.PredictedMfuAgainstPublished prints
// these errors and fails when this table no longer matches them.
const std::vector<ValidatedRegion>& validated_regions() {
  static const std::vector<ValidatedRegion> v = {
      {"H100 SXM", "MPT-1B and MPT-7B on 8 H100s (llm-foundry, FSDP, bf16)", 0.081, 0.178, 512, 32768, 1.31e9, 6.66e9, 8,
       8},
      {"A100", "MPT-350M, MPT-1B, MPT-7B on 8 A100s (llm-foundry) and LLaMA-2 13B on 64 (torchtitan), FSDP, bf16",
       -0.111, 0.106, 512, 65536, 3.54e8, 1.30e10, 8, 64},
  };
  return v;
}

namespace {

const ValidatedRegion* region_for(const std::string& model) {
  // The H200 has the H100 SXM's SMs and shares every constant of its profile
  // (device_profile.cpp); only its memory is faster. It was not in the published set.
  const std::string m = model == "H200" ? "H100 SXM" : model;
  for (const auto& r : validated_regions())
    if (m == r.device_model) return &r;
  return nullptr;
}

std::string human(double n) {
  if (n >= 1e9) return fmt::format("{:.3g}B", n / 1e9);
  return fmt::format("{:.3g}M", n / 1e6);
}

}  // namespace

PredictionConfidence prediction_confidence(const ModelConfig& m, bool sixteen_bit, int64_t world_size,
                                           const DeviceProfile& p, double mfu_percent) {
  PredictionConfidence c;
  const ValidatedRegion* r = p.model.empty() ? nullptr : region_for(p.model);
  if (!r) {
    c.outside.push_back(fmt::format("device '{}' (published runs checked: {} and {})",
                                    p.model.empty() ? p.name : p.model, validated_regions()[0].device_model,
                                    validated_regions()[1].device_model));
    return c;
  }
  c.checked_on = r->runs;
  if (p.model == "H200") c.outside.push_back("device H200 (checked on H100 SXM, whose constants it shares)");
  if (mfu_percent > 0) {
    c.have_range = true;
    c.mfu_lo = mfu_percent / (1.0 + r->max_error);
    c.mfu_hi = mfu_percent / (1.0 + r->min_error);
  }
  if (m.block_size < r->min_seq || m.block_size > r->max_seq)
    c.outside.push_back(fmt::format("sequence length {} (checked {}-{})", m.block_size, r->min_seq, r->max_seq));
  const double n = static_cast<double>(m.num_params());
  if (n < r->min_params || n > r->max_params)
    c.outside.push_back(
        fmt::format("{} parameters (checked {}-{})", human(n), human(r->min_params), human(r->max_params)));
  if (world_size < r->min_gpus || world_size > r->max_gpus)
    c.outside.push_back(fmt::format("{} GPU(s) (checked {}-{})", world_size, r->min_gpus, r->max_gpus));
  if (!sixteen_bit) c.outside.push_back("fp32/TF32 compute (checked: bf16)");
  return c;
}

std::string format_confidence(const PredictionConfidence& c) {
  std::string s;
  if (c.have_range)
    s = fmt::format("MFU {:.0f}-{:.0f}%: the range the checking set of published runs supports ({})", c.mfu_lo,
                    c.mfu_hi, c.checked_on);
  if (!c.outside.empty()) {
    s += s.empty() ? "" : "; ";
    s += "outside what the model was checked on: ";
    for (size_t i = 0; i < c.outside.size(); ++i) s += (i ? ", " : "") + c.outside[i];
  }
  return s;
}

}  // namespace llmtrain
