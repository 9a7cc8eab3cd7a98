// llmtrain-plan: from a FLOP budget to a model shape, a token count, an expected
// loss and (at a measured speed) a wall-clock time; the loss law is Chinchilla's
// or one fitted to the user's own runs (--fit). docs/planning.md.
#include <cmath>
#include <iostream>
#include <optional>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "llmtrain/core/config.hpp"  // defines: Config (the base shape's keys)
#include "llmtrain/core/error.hpp"   // defines: Error, ConfigError
#include "llmtrain/plan/planner.hpp"  // defines: plan_search, plan_evaluate, run-log readers, tables
#include "llmtrain/plan/scaling_law.hpp"  // defines: ScalingLaw, fit_scaling_law
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

double positive(const po::variables_map& vm, const char* name) {
  const double v = vm[name].as<double>();
  if (!(v > 0) || !std::isfinite(v)) throw ConfigError(fmt::format("--{} must be a positive number, got {}", name, v));
  return v;
}

std::string command_line(int argc, char** argv) {
  std::string s = "llmtrain-plan";
  for (int i = 1; i < argc; ++i) s += std::string(" ") + argv[i];
  return s;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string family, config_file, accounting_text, layers_text, widths_text, law_text, run_log, write_config;
  std::vector<std::string> sets, fit_logs, predict_logs;
  int64_t top = 10, pick = 1;
  int gpus = 0, bootstrap = 200;
  double max_prediction_error = 0;
  po::options_description opts(
      "usage: llmtrain-plan --flops C (--family NAME | --config FILE) [options]\n"
      "       llmtrain-plan --config FILE --tokens D\n"
      "       llmtrain-plan --fit RUN_LOG|DIR... [--predict RUN_LOG...] [--flops C --config FILE ...]\n"
      "Plans a run: for a FLOP budget, the shapes (layers, optionally width) with their tokens and expected\n"
      "loss L(N, D) = E + A/N^alpha + B/D^beta (Chinchilla's constants, or fitted to your runs). docs/planning.md");
  opts.add_options()("help,h", "this help")(
      "flops", po::value<double>(), "FLOP budget C: every shape trains on D = C / (FLOPs per token) tokens")(
      "family", po::value<std::string>(&family), "base shape of a preset family: llama3, llama2, qwen3, gpt2")(
      "config", po::value<std::string>(&config_file),
      "base config file (inputs/-style); with --tokens: the one shape to evaluate")(
      "set", po::value<std::vector<std::string>>(&sets)->composing(),
      "KEY=VALUE override on the base (repeatable), e.g. --set vocab_size=256")(
      "tokens", po::value<double>(), "evaluate the --config shape at D tokens")(
      "flops_per_token", po::value<std::string>(&accounting_text)->default_value("mfu"),
      "mfu: 6N + 12LHQT with N the matmul parameters (the MFU's, docs/mfu.md); 6N: 6 x all parameters")(
      "layers", po::value<std::string>(&layers_text)->default_value("1:128"), "layers searched, MIN:MAX or N")(
      "widths", po::value<std::string>(&widths_text),
      "widths searched (heads scaled, head_dim and grouping kept): auto (half to twice the base) or a list; "
      "default: the base width only")(
      "max_tokens_per_param", po::value<double>(), "keep shapes with at most this many tokens per parameter")(
      "tokens_per_param", po::value<double>(),
      "rank shapes by how close their tokens per parameter come to this (e.g. 20, Chinchilla's rule)")(
      "min_tokens_per_param", po::value<double>()->default_value(1.0),
      "drop shapes trained on fewer tokens per parameter than this")(
      "top", po::value<int64_t>(&top)->default_value(10), "rows of the table")(
      "law", po::value<std::string>(&law_text),
      "loss-law constants E,A,B,alpha,beta (default: Chinchilla's 1.69,406.4,410.7,0.34,0.28)")(
      "fit", po::value<std::vector<std::string>>(&fit_logs)->multitoken(),
      "fit the law to these run logs' final val losses (files or directories of run_*.json), then plan with it")(
      "bootstrap", po::value<int>(&bootstrap)->default_value(200), "bootstrap resamples for the fit's uncertainty")(
      "predict", po::value<std::vector<std::string>>(&predict_logs)->multitoken(),
      "run logs (held out of the fit) whose final val loss the law predicts")(
      "max_prediction_error", po::value<double>(&max_prediction_error)->default_value(0),
      "exit with code 3 if a --predict error exceeds this many percent (0 = never)")(
      "run_log", po::value<std::string>(&run_log),
      "a measured run: adds wall-clock days and GPU-hours at its speed (MFU-accounted FLOP/s per GPU)")(
      "gpus", po::value<int>(&gpus), "GPUs for the times, the memory per GPU and --write_config's max_iters (default: the run log's, else 8)")(
      "json", "print the table as JSON (one object per candidate; with --fit an object with the fit too)")(
      "write_config", po::value<std::string>(&write_config), "write the chosen shape as an inputs/-style preset")(
      "pick", po::value<int64_t>(&pick)->default_value(1), "which row --write_config writes (1 = the best)");
  po::variables_map vm;
  po::store(po::command_line_parser(argc, argv).options(opts).run(), vm);
  po::notify(vm);
  if (vm.count("help") || argc == 1) {
    std::cout << opts << "\n";
    return argc == 1 ? 2 : 0;
  }
  const bool json = vm.count("json") > 0;
  const FlopAccounting accounting = flop_accounting_from_string(accounting_text);
  if (vm.count("flops") && vm.count("tokens"))
    throw ConfigError("give --flops (search shapes for a budget) or --tokens (evaluate --config's shape), not both");
  if (vm.count("tokens") && config_file.empty()) throw ConfigError("--tokens evaluates one shape: it needs --config FILE");
  if (vm.count("max_tokens_per_param") && vm.count("tokens_per_param"))
    throw ConfigError("give --max_tokens_per_param or --tokens_per_param, not both");
  if (!family.empty() && !config_file.empty()) throw ConfigError("give --family or --config, not both");
  if (top < 1) throw ConfigError(fmt::format("--top must be >= 1, got {}", top));

  // ---- the loss law: Chinchilla's, given, or fitted
  ScalingLaw law = law_text.empty() ? ScalingLaw::chinchilla() : ScalingLaw::parse(law_text);
  nlohmann::json out_json = nlohmann::json::object();
  int rc = 0;
  if (vm.count("fit")) {
    if (!law_text.empty()) throw ConfigError("give --law or --fit, not both");
    std::vector<LossObservation> runs;
    for (const auto& p : expand_run_logs(fit_logs)) runs.push_back(read_loss_observation(p));
    FitOptions fo;
    fo.bootstrap = bootstrap;
    const FitResult fit = fit_scaling_law(runs, fo);
    law = fit.law;
    if (json)
      out_json["fit"] = fit_to_json(fit, runs);
    else
      std::cout << format_fit(fit, runs);
  }
  if (!predict_logs.empty()) {
    nlohmann::json preds = nlohmann::json::array();
    if (!json) std::cout << fmt::format("predictions ({}):\n  {:>10} {:>10} {:>9} {:>9} {:>8}  run\n",
                                        law.to_string(), "params", "tokens", "val loss", "predicted", "error");
    for (const auto& p : expand_run_logs(predict_logs)) {
      const LossObservation o = read_loss_observation(p);
      const double pred = law.loss(o.params, o.tokens), err = 100.0 * (pred - o.loss) / o.loss;
      if (max_prediction_error > 0 && std::fabs(err) > max_prediction_error) rc = 3;
      preds.push_back({{"path", p}, {"params", o.params}, {"tokens", o.tokens}, {"val_loss", o.loss},
                       {"predicted_loss", pred}, {"error_percent", err}});
      if (!json)
        std::cout << fmt::format("  {:>10.4g} {:>10.4g} {:>9.4f} {:>9.4f} {:>7.2f}%  {}\n", o.params, o.tokens,
                                 o.loss, pred, err, p);
    }
    out_json["predictions"] = preds;
    if (rc && !json)
      std::cout << fmt::format("a prediction misses by more than --max_prediction_error {}%\n", max_prediction_error);
  }

  // ---- the base shape
  const bool planning = vm.count("flops") || vm.count("tokens");
  if (!planning) {
    if (!vm.count("fit") && predict_logs.empty())
      throw ConfigError("nothing to do: give --flops C (with --family or --config), --config FILE --tokens D, or --fit");
    if (json) std::cout << out_json.dump(2) << "\n";
    return rc;
  }
  if (family.empty() && config_file.empty())
    throw ConfigError("--flops needs a base shape: --family llama3|llama2|qwen3|gpt2 or --config FILE");
  Config base;
  std::string what;
  if (!family.empty()) {
    base = plan_family_config(family);
    what = fmt::format("family '{}'", family);
  } else {
    base.load_file(config_file);
    what = fmt::format("config '{}'", config_file);
  }
  for (const auto& kv : sets) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) throw ConfigError(fmt::format("--set '{}': expected KEY=VALUE", kv));
    base.set(kv.substr(0, eq), kv.substr(eq + 1));
  }
  plan_require_vocabulary(base, what);
  base.validate();

  std::vector<Candidate> rows;
  if (vm.count("tokens")) {
    rows.push_back(plan_evaluate(base, positive(vm, "tokens"), accounting, law));
    if (!json)
      std::cout << fmt::format("{} at {:.6g} tokens ({}; the budget is D x FLOPs/token):\n", what,
                               vm["tokens"].as<double>(), law.to_string());
  } else {
    SearchOptions so;
    so.flops = positive(vm, "flops");
    so.accounting = accounting;
    so.law = law;
    std::tie(so.min_layers, so.max_layers) = parse_layers(layers_text);
    so.widths = parse_widths(widths_text, base);
    if (vm.count("max_tokens_per_param")) so.max_tokens_per_param = positive(vm, "max_tokens_per_param");
    if (vm.count("tokens_per_param")) so.tokens_per_param = positive(vm, "tokens_per_param");
    so.min_tokens_per_param = vm["min_tokens_per_param"].as<double>();
    SearchResult r = plan_search(base, so);
    if (!json) {
      std::cout << fmt::format("budget {:.4g} FLOPs, {} FLOPs/token, {}; {} shapes searched (layers {}:{}, {}); ",
                               so.flops, accounting == FlopAccounting::mfu ? "6N + 12LHQT (MFU)" : "6N",
                               law.to_string(), r.shapes_searched, so.min_layers, so.max_layers,
                               so.widths.empty() ? fmt::format("width {}", base.n_embd)
                                                 : fmt::format("{} widths", so.widths.size()));
      std::cout << (so.tokens_per_param ? fmt::format("ranked by closeness of D/N to {:g}\n", *so.tokens_per_param)
                  : so.max_tokens_per_param
                      ? fmt::format("D/N <= {:g}, ranked by expected loss\n", *so.max_tokens_per_param)
                      : std::string("ranked by expected loss\n"));
      if (r.best_at_edge)
        std::cout << "warning: the best shape is on the edge of the searched range; widen --layers or --widths\n";
    }
    rows = std::move(r.candidates);
  }
  std::optional<MeasuredSpeed> speed;
  if (!run_log.empty()) {
    speed = read_measured_speed(run_log);
    if (gpus == 0) gpus = speed->world_size;
  }
  if (gpus == 0) gpus = 8;
  if (gpus < 1) throw ConfigError(fmt::format("--gpus must be >= 1, got {}", gpus));
  if (pick < 1 || pick > static_cast<int64_t>(rows.size()))
    throw ConfigError(fmt::format("--pick {} is not a row of the table (1..{})", pick, rows.size()));
  const Candidate chosen = rows[static_cast<size_t>(pick - 1)];
  if (static_cast<int64_t>(rows.size()) > top) rows.resize(static_cast<size_t>(top));
  plan_apply_memory(rows, gpus);
  if (speed) {
    plan_apply_speed(rows, *speed, gpus);
    if (!json)
      std::cout << fmt::format(
          "times at the speed of {}: {:.4g} tokens/s of {} on {} x {} = {:.4g} TFLOP/s per GPU{}; {} GPU(s) here\n",
          speed->path, speed->tokens_per_sec, speed->arch, speed->world_size,
          speed->device.empty() ? "?" : speed->device, speed->achieved_flops() / speed->world_size / 1e12,
          speed->mfu ? fmt::format(" (MFU {:.1f}%)", *speed->mfu) : std::string(" (MFU unknown)"), gpus);
  }
  if (json) {
    const nlohmann::json table = candidates_to_json(rows, accounting);
    if (out_json.empty()) {
      std::cout << table.dump(2) << "\n";
    } else {
      out_json["candidates"] = table;
      std::cout << out_json.dump(2) << "\n";
    }
  } else {
    std::cout << format_candidates(rows, accounting);
  }
  if (!write_config.empty()) {
    write_file_atomic(write_config, plan_preset_text(chosen, command_line(argc, argv), gpus));
    if (!json) std::cout << fmt::format("wrote row {} ({}) to {}\n", pick, chosen.arch, write_config);
  }
  return rc;
} catch (const std::exception& e) {
  std::cerr << "llmtrain-plan: error: " << e.what() << "\n";
  return 1;
}
