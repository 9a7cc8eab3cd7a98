// Reading run logs back (llmtrain-report): one log condensed into a RunSummary,
// and the comparison, token-budget and scaling tables over several.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmtrain/record/run_log_reader.hpp"

namespace llmtrain {

// One run log condensed for comparison tables.
struct RunSummary {
  std::string path;
  std::string label;          // "flash_attn_2+bfloat16+compile+dataloader"
  std::string device;         // first device name
  int world_size = 1;
  int num_nodes = 1;
  int64_t batch_size = 0, grad_accum = 0, block_size = 0;
  int64_t tokens_per_iter = 0;          // global
  nlohmann::json summary;               // summarize_records() after warm-up
  // How the run ended: the log's summary.status ("completed", "stopped",
  // "failed"), or "cut off" when the log has no summary (killed by SIGKILL, a
  // lost node, or still running): its figures stop at last_iter and it gets
  // no time to train.
  std::string status;
  int64_t last_iter = -1;               // the last iteration record's iter (-1: none)
  bool cut_off() const { return status == "cut off"; }
  std::string ending() const;           // "completed", "cut off at iteration 29 (no summary: ...)", ...
  nlohmann::json prediction;            // startup_info.prediction (docs/performance-model.md); null if absent
  std::vector<std::string> errors;      // the log's errors[] + the self-check on every record
};

// Loads and checks one run log (load_run_log: Error naming the file on unreadable
// JSON or a missing section) and condenses it. `warmup_iters`: the most
// iterations left out as warm-up (find_warmup: those before the step time
// settles, as the run's own summary); < 0: the log's own warmup_report_iters.
RunSummary read_run_log(const std::string& path, int64_t warmup_iters);
RunSummary summarize_run_log(const RunLogData& log, int64_t warmup_iters);

// Plain-text tables of llmtrain-report.
std::string format_comparison_table(const std::vector<RunSummary>& runs);
// Measured against predicted step time (startup_info.prediction) per run, the
// phase that differs most, and "OFF" where the measured step is more than 25%
// away from the prediction. Empty when no run carries a prediction.
std::string format_prediction_table(const std::vector<RunSummary>& runs);
// Hours and days to train on `token_budget` tokens at each run's tokens/s.
std::string format_budget_table(const std::vector<RunSummary>& runs, double token_budget);
// Weak and strong scaling efficiency relative to the run with the fewest devices:
// strong (same global tokens/iter) = (dt_base x n_base) / (dt x n);
// weak (same tokens/iter per device) = per-device tokens/s / base per-device tokens/s.
nlohmann::json scaling_efficiency(const std::vector<RunSummary>& runs);
std::string format_scaling_table(const std::vector<RunSummary>& runs);

}  // namespace llmtrain
