// llmtrain-plan: from a FLOP budget to a model shape, a token count, an expected
// loss and (at a measured speed) a wall-clock time; the loss law is Chinchilla's
// or one fitted to the user's own runs (--fit). docs/planning.md.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "llmtrain/core/config.hpp"  // defines: Config (the base shape's keys)
#include "llmtrain/core/error.hpp"   // defines: Error, ConfigError
#include "llmtrain/plan/planner.hpp"  // defines: plan_search, plan_evaluate, run-log readers, tables
#include "llmtrain/prediction/device_peaks.hpp"  // defines: device_memory_bytes (the device table's memory)
#include "llmtrain/prediction/device_profile.hpp"  // defines: DeviceProfile, load_device_profile
#include "llmtrain/prediction/memory_model.hpp"  // defines: gpu_tensor_bytes (the caching allocator's reserve)
#include "llmtrain/plan/scaling_law.hpp"  // defines: ScalingLaw, fit_scaling_law
#include "llmtrain/record/run_log_reader.hpp"  // defines: expand_run_logs
#include "llmtrain/core/atomic_file.hpp"  // defines: write_file_atomic

namespace po = boost::program_options;
using namespace llmtrain;

namespace {

// "1:128" or "18" -> (min, max).
std::pair<int64_t, int64_t> parse_layers(const std::string& text) {
  try {
    const auto colon = text.find(':');
    size_t pos = 0;
    if (colon == std::string::npos) {
      const int64_t n = std::stoll(text, &pos);
      if (pos == text.size()) return {n, n};
    } else {
      const int64_t a = std::stoll(text.substr(0, colon), &pos);
      if (pos == colon) {
        const std::string rest = text.substr(colon + 1);
        const int64_t b = std::stoll(rest, &pos);
        if (pos == rest.size()) return {a, b};
      }
    }
  } catch (const std::exception&) {
  }
  throw ConfigError(fmt::format("--layers '{}': expected MIN:MAX or N (e.g. 1:128)", text));
}

// "auto" or "1536,2048,2560".
std::vector<int64_t> parse_widths(const std::string& text, const Config& base) {
  if (text.empty()) return {};
  if (text == "auto") return plan_auto_widths(base);
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    try {
      size_t pos = 0;
      const int64_t w = std::stoll(item, &pos);
      if (pos != item.size() || w <= 0) throw std::invalid_argument(item);
      out.push_back(w);
    } catch (const std::exception&) {
      throw ConfigError(fmt::format("--widths '{}': '{}' is not a positive integer (expected auto or a list like "
                                    "1536,2048,2560)",
                                    text, item));
    }
    start = comma + 1;
  }
  return out;
}

std::string command_line(int argc, char** argv) {
  std::string s = "llmtrain-plan";
  for (int i = 1; i < argc; ++i) s += std::string(" ") + argv[i];
  return s;
}

// What the command line asks for; numbers are checked where they are used.
struct PlanArgs {
  std::string family, config_file, layers_text, widths_text, law_text, run_log, write_config, device;
  std::vector<std::string> sets, fit_logs, predict_logs;
  FlopAccounting accounting = FlopAccounting::mfu;
  std::optional<double> flops, tokens, max_tokens_per_param, tokens_per_param;
  double min_tokens_per_param = 1.0, max_prediction_error = 0;
  int64_t top = 10, pick = 1;
  int gpus = 0, bootstrap = 200;
  bool json = false, fit = false;
  std::string command;  // the command line, for --write_config's header
  bool planning() const { return flops || tokens; }
};

std::optional<double> optional_value(const po::variables_map& vm, const char* name) {
  return vm.count(name) ? std::optional<double>(vm[name].as<double>()) : std::nullopt;
}

// The options, checked against each other; none after printing the help.
std::optional<PlanArgs> parse_args(int argc, char** argv) {
  PlanArgs a;
  std::string accounting_text;
  po::options_description opts(
      "usage: llmtrain-plan --flops C (--family NAME | --config FILE) [options]\n"
      "       llmtrain-plan --config FILE --tokens D\n"
      "       llmtrain-plan --fit RUN_LOG|DIR... [--predict RUN_LOG...] [--flops C --config FILE ...]\n"
      "Plans a run: for a FLOP budget, the shapes (layers, optionally width) with their tokens and expected\n"
      "loss L(N, D) = E + A/N^alpha + B/D^beta (Chinchilla's constants, or fitted to your runs). docs/planning.md");
  opts.add_options()("help,h", "this help")(
      "flops", po::value<double>(), "FLOP budget C: every shape trains on D = C / (FLOPs per token) tokens")(
      "family", po::value<std::string>(&a.family), "base shape of a preset family: llama3, llama2, qwen3, gpt2")(
      "config", po::value<std::string>(&a.config_file),
      "base config file (inputs/-style); with --tokens: the one shape to evaluate")(
      "set", po::value<std::vector<std::string>>(&a.sets)->composing(),
      "KEY=VALUE override on the base (repeatable), e.g. --set vocab_size=256")(
      "tokens", po::value<double>(), "evaluate the --config shape at D tokens")(
      "flops_per_token", po::value<std::string>(&accounting_text)->default_value("mfu"),
      "mfu: 6N + 12LHQT with N the matmul parameters (the MFU's, docs/mfu.md); 6N: 6 x all parameters")(
      "layers", po::value<std::string>(&a.layers_text)->default_value("1:128"), "layers searched, MIN:MAX or N")(
      "widths", po::value<std::string>(&a.widths_text),
      "widths searched (heads scaled, head_dim and grouping kept): auto (half to twice the base) or a list; "
      "default: the base width only")(
      "max_tokens_per_param", po::value<double>(), "keep shapes with at most this many tokens per parameter")(
      "tokens_per_param", po::value<double>(),
      "rank shapes by how close their tokens per parameter come to this (e.g. 20, Chinchilla's rule)")(
      "min_tokens_per_param", po::value<double>(&a.min_tokens_per_param)->default_value(1.0),
      "drop shapes trained on fewer tokens per parameter than this")(
      "top", po::value<int64_t>(&a.top)->default_value(10), "rows of the table")(
      "law", po::value<std::string>(&a.law_text),
      "loss-law constants E,A,B,alpha,beta (default: Chinchilla's 1.69,406.4,410.7,0.34,0.28)")(
      "fit", po::value<std::vector<std::string>>(&a.fit_logs)->multitoken(),
      "fit the law to these run logs' final val losses (files or directories of run_*.json), then plan with it")(
      "bootstrap", po::value<int>(&a.bootstrap)->default_value(200), "bootstrap resamples for the fit's uncertainty")(
      "predict", po::value<std::vector<std::string>>(&a.predict_logs)->multitoken(),
      "run logs (held out of the fit) whose final val loss the law predicts")(
      "max_prediction_error", po::value<double>(&a.max_prediction_error)->default_value(0),
      "exit with code 3 if a --predict error exceeds this many percent (0 = never)")(
      "run_log", po::value<std::string>(&a.run_log),
      "a measured run: adds wall-clock days and GPU-hours at its speed (MFU-accounted FLOP/s per GPU)")(
      "device", po::value<std::string>(&a.device),
      "the GPU: a device profile (h100_sxm, a100_sxm_80gb, ... or a --calibrate file) adds days and GPU-hours at "
      "the performance model's predicted speed (docs/performance-model.md) and keeps only the shapes whose "
      "predicted memory per GPU fits it; a name of the device table (\"H100 SXM\", \"H200\") only filters "
      "(default: the --run_log's device)")(
      "gpus", po::value<int>(&a.gpus), "GPUs for the times, the memory per GPU and --write_config's max_iters (default: the run log's, else 8)")(

      "json", "print the table as JSON (one object per candidate; with --fit an object with the fit too)")(
      "write_config", po::value<std::string>(&a.write_config), "write the chosen shape as an inputs/-style preset")(
      "pick", po::value<int64_t>(&a.pick)->default_value(1), "which row --write_config writes (1 = the best)");
  po::variables_map vm;
  po::store(po::command_line_parser(argc, argv).options(opts).run(), vm);
  po::notify(vm);
  if (vm.count("help") || argc == 1) {
    std::cout << opts << "\n";
    return std::nullopt;
  }
  a.json = vm.count("json") > 0;
  a.fit = vm.count("fit") > 0;
  a.accounting = flop_accounting_from_string(accounting_text);
  a.flops = optional_value(vm, "flops");
  a.tokens = optional_value(vm, "tokens");
  a.max_tokens_per_param = optional_value(vm, "max_tokens_per_param");
  a.tokens_per_param = optional_value(vm, "tokens_per_param");
  a.command = command_line(argc, argv);
  if (a.flops && a.tokens)
    throw ConfigError("give --flops (search shapes for a budget) or --tokens (evaluate --config's shape), not both");
  if (a.tokens && a.config_file.empty()) throw ConfigError("--tokens evaluates one shape: it needs --config FILE");
  if (a.max_tokens_per_param && a.tokens_per_param)
    throw ConfigError("give --max_tokens_per_param or --tokens_per_param, not both");
  if (!a.family.empty() && !a.config_file.empty()) throw ConfigError("give --family or --config, not both");
  if (a.top < 1) throw ConfigError(fmt::format("--top must be >= 1, got {}", a.top));
  // Given, --gpus is a count of GPUs: 0 is refused, not read as "the default" (8).
  if (vm.count("gpus") && a.gpus < 1) throw ConfigError(fmt::format("--gpus must be >= 1, got {}", a.gpus));
  return a;
}

double positive(double v, const char* name) {
  if (!(v > 0) || !std::isfinite(v)) throw ConfigError(fmt::format("--{} must be a positive number, got {}", name, v));
  return v;
}

// The loss law: Chinchilla's, given (--law), or fitted to run logs (--fit; the
// fit printed, or put in `out`).
ScalingLaw choose_law(const PlanArgs& a, nlohmann::json& out) {
  const ScalingLaw law = a.law_text.empty() ? ScalingLaw::chinchilla() : ScalingLaw::parse(a.law_text);
  if (!a.fit) return law;
  if (!a.law_text.empty()) throw ConfigError("give --law or --fit, not both");
  std::vector<LossObservation> runs;
  for (const auto& p : expand_run_logs(a.fit_logs, /*recursive=*/true)) runs.push_back(read_loss_observation(p));
  FitOptions fo;
  fo.bootstrap = a.bootstrap;
  const FitResult fit = fit_scaling_law(runs, fo);
  if (a.json)
    out["fit"] = fit_to_json(fit, runs);
  else
    std::cout << format_fit(fit, runs);
  return fit.law;
}

// --predict: the law against held-out runs' final val losses. Returns 3 when a
// prediction misses by more than --max_prediction_error, else 0.
int check_predictions(const PlanArgs& a, const ScalingLaw& law, nlohmann::json& out) {
  if (a.predict_logs.empty()) return 0;
  int rc = 0;
  nlohmann::json preds = nlohmann::json::array();
  if (!a.json) std::cout << fmt::format("predictions ({}):\n  {:>10} {:>10} {:>9} {:>9} {:>8}  run\n",
                                        law.to_string(), "params", "tokens", "val loss", "predicted", "error");
  for (const auto& p : expand_run_logs(a.predict_logs, /*recursive=*/true)) {
    const LossObservation o = read_loss_observation(p);
    const double pred = law.loss(o.params, o.tokens), err = 100.0 * (pred - o.loss) / o.loss;
    if (a.max_prediction_error > 0 && std::fabs(err) > a.max_prediction_error) rc = 3;
    preds.push_back({{"path", p}, {"params", o.params}, {"tokens", o.tokens}, {"val_loss", o.loss},
                     {"predicted_loss", pred}, {"error_percent", err}});
    if (!a.json)
      std::cout << fmt::format("  {:>10.4g} {:>10.4g} {:>9.4f} {:>9.4f} {:>7.2f}%  {}\n", o.params, o.tokens,
                               o.loss, pred, err, p);
  }
  out["predictions"] = preds;
  if (rc && !a.json)
    std::cout << fmt::format("a prediction misses by more than --max_prediction_error {}%\n", a.max_prediction_error);
  return rc;
}

// The base shape: a family's preset or --config, with the --set overrides;
// `what` names it in messages.
Config load_base(const PlanArgs& a, std::string& what) {
  if (a.family.empty() && a.config_file.empty())
    throw ConfigError("--flops needs a base shape: --family llama3|llama2|qwen3|gpt2 or --config FILE");
  Config base;
  if (!a.family.empty()) {
    base = plan_family_config(a.family);
    what = fmt::format("family '{}'", a.family);
  } else {
    base.load_file(a.config_file);
    what = fmt::format("config '{}'", a.config_file);
  }
  for (const auto& kv : a.sets) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) throw ConfigError(fmt::format("--set '{}': expected KEY=VALUE", kv));
    base.set(kv.substr(0, eq), kv.substr(eq + 1));
  }
  plan_require_vocabulary(base, what);
  base.validate();
  return base;
}

// The text table's first line: the budget, the accounting, the law, the space searched and the ranking.
void print_search_header(const SearchOptions& so, const SearchResult& r, const Config& base) {
  std::cout << fmt::format("budget {:.4g} FLOPs, {} FLOPs/token, {}; {} shapes searched (layers {}:{}, {}); ",
                           so.flops, so.accounting == FlopAccounting::mfu ? "6N + 12LHQT (MFU)" : "6N",
                           so.law.to_string(), r.shapes_searched, so.min_layers, so.max_layers,
                           so.widths.empty() ? fmt::format("width {}", base.n_embd)
                                             : fmt::format("{} widths", so.widths.size()));
  std::cout << (so.tokens_per_param ? fmt::format("ranked by closeness of D/N to {:g}\n", *so.tokens_per_param)
                : so.max_tokens_per_param
                    ? fmt::format("D/N <= {:g}, ranked by expected loss\n", *so.max_tokens_per_param)
                    : std::string("ranked by expected loss\n"));
  if (r.best_at_edge)
    std::cout << "warning: the best shape is on the edge of the searched range; widen --layers or --widths\n";
}

// The rows: the --config shape at --tokens, or every shape of the search at --flops, best first.
std::vector<Candidate> plan_rows(const PlanArgs& a, const Config& base, const std::string& what,
                                 const ScalingLaw& law) {
  if (a.tokens) {
    std::vector<Candidate> rows = {plan_evaluate(base, positive(*a.tokens, "tokens"), a.accounting, law)};
    if (!a.json)
      std::cout << fmt::format("{} at {:.6g} tokens ({}; the budget is D x FLOPs/token):\n", what, *a.tokens,
                               law.to_string());
    return rows;
  }
  SearchOptions so;
  so.flops = positive(*a.flops, "flops");
  so.accounting = a.accounting;
  so.law = law;
  std::tie(so.min_layers, so.max_layers) = parse_layers(a.layers_text);
  so.widths = parse_widths(a.widths_text, base);
  if (a.max_tokens_per_param) so.max_tokens_per_param = positive(*a.max_tokens_per_param, "max_tokens_per_param");
  if (a.tokens_per_param) so.tokens_per_param = positive(*a.tokens_per_param, "tokens_per_param");
  so.min_tokens_per_param = a.min_tokens_per_param;
  SearchResult r = plan_search(base, so);
  if (!a.json) print_search_header(so, r, base);
  return std::move(r.candidates);
}

void print_speed(const MeasuredSpeed& speed, int gpus) {
  std::cout << fmt::format(
      "times at the speed of {}: {:.4g} tokens/s of {} on {} x {} = {:.4g} TFLOP/s per GPU{}; {} GPU(s) here\n",
      speed.path, speed.tokens_per_sec, speed.arch, speed.world_size, speed.device.empty() ? "?" : speed.device,
      speed.achieved_flops() / speed.world_size / 1e12,
      speed.mfu ? fmt::format(" (MFU {:.1f}%)", *speed.mfu) : std::string(" (MFU unknown)"), gpus);
}

// The table as text, or as JSON (alone, or beside the fit and predictions in `out`).
void print_table(const PlanArgs& a, const std::vector<Candidate>& rows, nlohmann::json& out) {
  if (!a.json) {
    std::cout << format_candidates(rows, a.accounting);
    return;
  }
  const nlohmann::json table = candidates_to_json(rows, a.accounting);
  if (out.empty()) {
    std::cout << table.dump(2) << "\n";
  } else {
    out["candidates"] = table;
    std::cout << out.dump(2) << "\n";
  }
}

// Drops the shapes whose predicted memory per GPU exceeds the device's (the
// device table's memory); a device the table does not know filters nothing,
// unless the user named it (then it is an error).
void keep_fitting(std::vector<Candidate>& rows, const std::string& device, bool named) {
  if (device.empty()) return;
  const auto bytes = device_memory_bytes(device);
  if (!bytes) {
    if (named) throw ConfigError(fmt::format("--device '{}' is not in the device table (H100 SXM, H200, B200, ...)", device));
    return;
  }
  const size_t before = rows.size();
  // Tensors fill a GPU's memory up to the caching allocator's reserve (kCudaAllocatorReserve).
  const double tensors = gpu_tensor_bytes(*bytes);
  rows.erase(std::remove_if(rows.begin(), rows.end(), [&](const Candidate& c) { return c.memory_per_gpu > tensors; }),
             rows.end());
  if (rows.empty())
    throw ConfigError(fmt::format("no shape of the {} searched fits in the {:.0f} GiB of one {} (predicted memory per "
                                  "GPU, docs/memory.md): lower batch_size or use more GPUs with ZeRO-1/FSDP",
                                  before, *bytes / (1024.0 * 1024.0 * 1024.0), device));
}

}  // namespace

int main(int argc, char** argv) try {
  const std::optional<PlanArgs> parsed = parse_args(argc, argv);
  if (!parsed) return argc == 1 ? 2 : 0;  // the help
  const PlanArgs& a = *parsed;

  nlohmann::json out_json = nlohmann::json::object();
  const ScalingLaw law = choose_law(a, out_json);
  const int rc = check_predictions(a, law, out_json);
  if (!a.planning()) {
    if (!a.fit && a.predict_logs.empty())
      throw ConfigError("nothing to do: give --flops C (with --family or --config), --config FILE --tokens D, or --fit");
    if (a.json) std::cout << out_json.dump(2) << "\n";
    return rc;
  }

  std::string what;
  const Config base = load_base(a, what);
  std::vector<Candidate> rows = plan_rows(a, base, what, law);
  std::optional<MeasuredSpeed> speed;
  if (!a.run_log.empty()) speed = read_measured_speed(a.run_log);
  int gpus = a.gpus;  // default: the measured run's, else 8
  if (gpus == 0 && speed) gpus = speed->world_size;
  if (gpus == 0) gpus = 8;
  if (gpus < 1) throw ConfigError(fmt::format("--gpus must be >= 1, got {}", gpus));
  plan_apply_memory(rows, gpus);
  // --device: a performance-model profile (its device-table model gives the
  // memory) or a device-table name (memory only).
  std::optional<DeviceProfile> profile;
  std::string memory_device = a.device.empty() && speed ? speed->device : a.device;
  if (!a.device.empty()) {
    try {
      profile = load_device_profile(a.device);
      memory_device = profile->model;
    } catch (const ConfigError&) {  // not a profile: a name of the device table (a bad profile file is an error)
      if (std::filesystem::exists(a.device)) throw;
    }
  }
  keep_fitting(rows, memory_device, !a.device.empty() && !profile);
  if (a.pick < 1 || a.pick > static_cast<int64_t>(rows.size()))
    throw ConfigError(fmt::format("--pick {} is not a row of the table (1..{})", a.pick, rows.size()));
  const Candidate chosen = rows[static_cast<size_t>(a.pick - 1)];
  if (static_cast<int64_t>(rows.size()) > a.top) rows.resize(static_cast<size_t>(a.top));

  if (profile && speed) throw ConfigError("--device and --run_log both give the times: choose one");
  if (profile) {
    plan_apply_prediction(rows, a.device, gpus, std::min(gpus, 8));
    if (!a.json)
      std::cout << fmt::format("times predicted for {} x {} ({} per node) by the performance model\n", gpus, a.device,
                               std::min(gpus, 8));
  }
  if (speed) {
    plan_apply_speed(rows, *speed, gpus);
    if (!a.json) print_speed(*speed, gpus);
  }
  print_table(a, rows, out_json);
  if (!a.write_config.empty()) {
    write_file_atomic(a.write_config, plan_preset_text(chosen, a.command, gpus));
    if (!a.json) std::cout << fmt::format("wrote row {} ({}) to {}\n", a.pick, chosen.arch, a.write_config);
  }
  return rc;
} catch (const std::exception& e) {
  std::cerr << "llmtrain-plan: error: " << e.what() << "\n";
  return 1;
}
