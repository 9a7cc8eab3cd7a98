// llmtrain-plan's library: from a FLOP budget to model shapes, token counts,
// expected losses (a ScalingLaw) and, at a measured speed, wall-clock times.
// Shapes are Configs: the planner sets n_layer / n_embd / n_head / n_kv_head /
// head_dim / ffn_hidden keys and counts through ModelConfig, so its parameters
// and FLOPs are the trainer's and `llmtrain --describe`'s.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "llmtrain/core/config.hpp"
#include "llmtrain/plan/scaling_law.hpp"

namespace llmtrain {

// How training FLOPs per token are counted.
enum class FlopAccounting {
  mfu,    // 6*N_matmul + 12*L*H*Q*T, the MFU's (docs/mfu.md): ModelConfig::flops_per_token()
  six_n,  // 6 * all parameters, C = 6ND of the scaling-law papers: ModelConfig::flops_per_token_6n()
};
// "mfu" | "6N" (also "6n"); throws ConfigError otherwise.
FlopAccounting flop_accounting_from_string(const std::string& text);
std::string to_string(FlopAccounting accounting);

// ---- families: the presets' base shapes --------------------------------------

// llama3, llama2, qwen3, gpt2.
std::vector<std::string> plan_family_names();
// The path of a family's preset (inputs/full_llama3_1.5b_optimal.cfg,
// full_llama_1.36b.cfg, full_qwen3_1.8b_optimal.cfg, full_gpt2_1.36b.cfg), found
// in $LLMTRAIN_INPUTS_DIR, the source tree's inputs/ or the installed
// share/llmtrain/inputs. Throws ConfigError naming the known families, or the
// directories searched.
std::string plan_family_preset(const std::string& family);
// That preset loaded: its model keys, block size, batch and optimizer keys.
Config plan_family_config(const std::string& family);
// Throws ConfigError when the base's vocabulary is not known (vocab_size = 0
// means "from the data" to the trainer; a plan has no data).
void plan_require_vocabulary(const Config& base, const std::string& what);

// ---- shapes --------------------------------------------------------------------

// `base` with n_layer layers and width n_embd: query heads scaled with the width,
// the grouping (n_head / n_kv_head) and head_dim kept, ffn_hidden scaled by the
// base's FFN ratio (rounded to a multiple of 64, or 16 below width 1024; left
// derived when the base derives it). Throws ConfigError when the width does not
// give whole heads and groups.
Config plan_reshape(const Config& base, int64_t n_layer, int64_t n_embd);
// Widths from half to twice the base's, one step per KV group of heads.
std::vector<int64_t> plan_auto_widths(const Config& base);

struct Candidate {
  Config config;  // the base with this shape's keys set
  std::string arch;
  int64_t n_layer = 0, n_embd = 0, n_head = 0, n_kv_head = 0, head_dim = 0, ffn_hidden = 0;
  int64_t params = 0;                // all parameters: the N of the loss law
  int64_t non_embedding_params = 0;  // less the token embedding, a position table and an untied LM head
  double flops_per_token = 0;        // in the plan's accounting
  double flops_per_token_mfu = 0;    // 6N + 12LHQT, what a measured MFU refers to
  double tokens = 0;                 // D
  double flops = 0;                  // D x flops_per_token
  double loss = 0;                   // expected final loss
  double tokens_per_param = 0;       // D / N
  std::optional<double> hours, gpu_hours;  // at a measured speed (plan_apply_speed)
  // With a device profile (plan_apply_prediction): the predicted MFU (percent),
  // the range the published-run validation supports for it, and what of this
  // shape lies outside what the model was checked on (prediction/validation.hpp).
  std::optional<double> mfu, mfu_lo, mfu_hi;
  std::vector<std::string> unchecked;
  // Bytes per GPU under the config's strategy (use_fsdp / use_zero1 / DDP), by the
  // memory model of --describe (plan_apply_memory).
  std::string memory_strategy;
  double memory_per_gpu = 0;
};

// One shape at D tokens.
Candidate plan_evaluate(const Config& shape, double tokens, FlopAccounting accounting, const ScalingLaw& law);

struct SearchOptions {
  double flops = 0;  // the budget C; every shape gets D = C / FLOPs-per-token
  FlopAccounting accounting = FlopAccounting::mfu;
  ScalingLaw law;
  int64_t min_layers = 1, max_layers = 128;
  std::vector<int64_t> widths;  // n_embd values; empty = the base's width
  // Keep only shapes with D/N <= this.
  std::optional<double> max_tokens_per_param;
  // Rank by closeness of D/N to this (|log((D/N) / R)|) instead of by loss.
  std::optional<double> tokens_per_param;
  // Shapes whose D/N falls below this are not trained enough for the law to say anything.
  double min_tokens_per_param = 1.0;
};

struct SearchResult {
  std::vector<Candidate> candidates;  // best first
  size_t shapes_searched = 0;
  // The best shape lies on the edge of the searched layers or widths: the true
  // optimum may lie outside (widen --layers / --widths).
  bool best_at_edge = false;
};

// Every shape of the space at budget C, best first. Throws ConfigError (one
// line) when the budget is too small for the smallest shape or no shape meets
// the tokens-per-parameter limit.
SearchResult plan_search(const Config& base, const SearchOptions& options);

// ---- run logs ----------------------------------------------------------------

// The speed of a measured run (--run_log).
struct MeasuredSpeed {
  std::string path, device, arch;
  int world_size = 1;
  double tokens_per_sec = 0;       // global, after warm-up
  double flops_per_token = 0;      // the measured model's, MFU accounting
  std::optional<double> mfu;       // percent; none when the device's peak is unknown
  // FLOP/s of all devices together (MFU accounting).
  double achieved_flops() const { return tokens_per_sec * flops_per_token; }
};
// Throws Error (one line) for a log that cannot be read, has no throughput, or
// failed its self-check.
MeasuredSpeed read_measured_speed(const std::string& run_log_path);
// Wall-clock hours and GPU-hours of each candidate on `gpus` devices, each as
// fast (in MFU-accounted FLOP/s per device) as the measured run's.
void plan_apply_speed(std::vector<Candidate>& candidates, const MeasuredSpeed& speed, int gpus);

// Wall-clock hours and GPU-hours of each candidate on `gpus` devices of the
// device profile `device` (a built-in name or a --calibrate file), `ranks_per_node`
// to a node: the performance model's step time (prediction/cost_model.hpp) for
// the candidate's config, strategy and batch; D / predicted tokens/s.
void plan_apply_prediction(std::vector<Candidate>& candidates, const std::string& device, int gpus,
                           int ranks_per_node);

// Fills memory_strategy / memory_per_gpu of each candidate for `gpus` ranks:
// estimate_memory() (distributed/memory_model) with the config's dtype,
// batch_size and attention backend, the strategy the config selects.
void plan_apply_memory(std::vector<Candidate>& candidates, int gpus);

// N (all parameters), D (tokens trained) and the final val loss of a run.
// Throws Error (one line) when the log has no val loss at its last iteration.
LossObservation read_loss_observation(const std::string& run_log_path);

// ---- output --------------------------------------------------------------------

std::string format_candidates(const std::vector<Candidate>& candidates, FlopAccounting accounting);
// One object per candidate.
nlohmann::json candidates_to_json(const std::vector<Candidate>& candidates, FlopAccounting accounting);
std::string format_fit(const FitResult& fit, const std::vector<LossObservation>& runs);
nlohmann::json fit_to_json(const FitResult& fit, const std::vector<LossObservation>& runs);
// An inputs/-style preset of the candidate: a header (shape, budget, tokens,
// expected loss, the command), every key that differs from the defaults, and
// max_iters = lr_decay_iters = ceil(D / (batch_size x gradient_accumulation_steps
// x gpus x block_size)).
std::string plan_preset_text(const Candidate& candidate, const std::string& command, int gpus);

}  // namespace llmtrain
