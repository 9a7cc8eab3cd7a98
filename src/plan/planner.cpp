#include "llmtrain/plan/planner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <numeric>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "llmtrain/core/error.hpp"
#include "llmtrain/prediction/cost_model.hpp"
#include "llmtrain/prediction/memory_model.hpp"
#include "llmtrain/model/model_config.hpp"
#include "llmtrain/model/params.hpp"
#include "llmtrain/record/run_report.hpp"

namespace llmtrain {
namespace fs = std::filesystem;

FlopAccounting flop_accounting_from_string(const std::string& text) {
  if (text == "mfu") return FlopAccounting::mfu;
  if (text == "6N" || text == "6n") return FlopAccounting::six_n;
  throw ConfigError(fmt::format("--flops_per_token '{}': expected mfu (6N + 12LHQT, as the MFU) or 6N", text));
}

std::string to_string(FlopAccounting accounting) {
  return accounting == FlopAccounting::mfu ? "mfu" : "6N";
}

// ---- families ----------------------------------------------------------------
namespace {

// Each family's base is its preset in inputs/ (the one source of those shapes):
// read from the source tree in a build, from <datadir>/llmtrain/inputs when installed.
const std::map<std::string, std::string>& family_presets() {
  static const std::map<std::string, std::string> m = {
      {"llama3", "full_llama3_1.5b_optimal.cfg"},
      {"llama2", "full_llama_1.36b.cfg"},
      {"qwen3", "full_qwen3_1.8b_optimal.cfg"},
      {"gpt2", "full_gpt2_1.36b.cfg"},
  };
  return m;
}

std::vector<std::string> inputs_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("LLMTRAIN_INPUTS_DIR"); env && *env) dirs.emplace_back(env);
  dirs.emplace_back(LLMTRAIN_SOURCE_INPUTS_DIR);
  dirs.emplace_back(LLMTRAIN_INSTALLED_INPUTS_DIR);
  return dirs;
}

int64_t round_to(double v, int64_t multiple) {
  return std::max<int64_t>(multiple, static_cast<int64_t>(std::llround(v / static_cast<double>(multiple))) * multiple);
}

ModelConfig model_of(const Config& c) { return ModelConfig::from_config(c, 0); }

std::string human(double v) {
  const double a = std::fabs(v);
  if (a >= 1e12) return fmt::format("{:.3f}T", v / 1e12);
  if (a >= 1e9) return fmt::format("{:.3f}B", v / 1e9);
  if (a >= 1e6) return fmt::format("{:.3f}M", v / 1e6);
  if (a >= 1e3) return fmt::format("{:.1f}K", v / 1e3);
  return fmt::format("{:.0f}", v);
}

}  // namespace

std::vector<std::string> plan_family_names() {
  std::vector<std::string> names;
  for (const auto& [k, v] : family_presets()) names.push_back(k);
  return names;
}

std::string plan_family_preset(const std::string& family) {
  const auto& m = family_presets();
  auto it = m.find(family);
  if (it == m.end())
    throw ConfigError(fmt::format("unknown family '{}': its vocabulary and shape are not known (known families: {}; "
                                  "or give a base config file with --config)",
                                  family, fmt::join(plan_family_names(), ", ")));
  const auto dirs = inputs_dirs();
  for (const auto& d : dirs)
    if (fs::is_regular_file(fs::path(d) / it->second)) return (fs::path(d) / it->second).string();
  throw ConfigError(fmt::format("family '{}': its preset {} is in none of {} (set LLMTRAIN_INPUTS_DIR to the "
                                "inputs/ directory, or give --config FILE)",
                                family, it->second, fmt::join(dirs, ", ")));
}

Config plan_family_config(const std::string& family) {
  Config c;
  c.load_file(plan_family_preset(family));
  return c;
}

void plan_require_vocabulary(const Config& base, const std::string& what) {
  if (base.vocab_size <= 0)
    throw ConfigError(fmt::format("{} has vocab_size = 0 (the trainer takes it from the data; a plan has none): "
                                  "the vocabulary is missing, set vocab_size (e.g. --set vocab_size=256 for bytes)",
                                  what));
}

// ---- shapes ------------------------------------------------------------------

Config plan_reshape(const Config& base, int64_t n_layer, int64_t n_embd) {
  Config c = base;
  c.set("n_layer", std::to_string(n_layer));
  if (n_embd == base.n_embd) return c;
  const ModelConfig m = model_of(base);
  const int64_t group = m.n_head / m.n_kv_head;
  if ((m.n_head * n_embd) % base.n_embd != 0 || ((m.n_head * n_embd) / base.n_embd) % group != 0)
    throw ConfigError(fmt::format(
        "width {} does not give whole heads: the base has {} heads ({} per KV head) at width {}; use a width that is "
        "a multiple of {}",
        n_embd, m.n_head, group, base.n_embd, base.n_embd * group / std::gcd(base.n_embd * group, m.n_head)));
  const int64_t heads = m.n_head * n_embd / base.n_embd;
  c.set("n_embd", std::to_string(n_embd));
  c.set("n_head", std::to_string(heads));
  c.set("n_kv_head", std::to_string(heads / group));
  c.set("head_dim", std::to_string(m.head_dim));
  if (base.ffn_hidden > 0) {
    const double ffn = static_cast<double>(base.ffn_hidden) * static_cast<double>(n_embd) / static_cast<double>(base.n_embd);
    c.set("ffn_hidden", std::to_string(round_to(ffn, n_embd >= 1024 ? 64 : 16)));
  }
  return c;
}

std::vector<int64_t> plan_auto_widths(const Config& base) {
  const ModelConfig m = model_of(base);
  const int64_t group = m.n_head / m.n_kv_head;
  std::vector<int64_t> widths;
  for (int64_t heads = group; heads <= 2 * m.n_head; heads += group) {
    if (2 * heads < m.n_head) continue;
    if ((heads * base.n_embd) % m.n_head != 0) continue;
    widths.push_back(heads * base.n_embd / m.n_head);
  }
  return widths;
}

Candidate plan_evaluate(const Config& shape, double tokens, FlopAccounting accounting, const ScalingLaw& law) {
  const ModelConfig m = model_of(shape);
  Candidate c;
  c.config = shape;
  c.arch = m.arch_string();
  c.n_layer = m.n_layer, c.n_embd = m.n_embd, c.n_head = m.n_head, c.n_kv_head = m.n_kv_head;
  c.head_dim = m.head_dim, c.ffn_hidden = m.ffn_hidden;
  c.params = m.num_params();
  // Kaplan et al.'s non-embedding count: the blocks and the final norm (the
  // parameter table's groups less the token/position tables and an untied head).
  const ParamBreakdown pb = param_breakdown(m);
  c.non_embedding_params = pb.total - pb.embeddings - pb.head;
  c.flops_per_token_mfu = m.flops_per_token();
  c.flops_per_token = accounting == FlopAccounting::mfu ? m.flops_per_token() : m.flops_per_token_6n();
  c.tokens = tokens;
  c.flops = tokens * c.flops_per_token;
  c.loss = law.loss(static_cast<double>(c.params), tokens);
  c.tokens_per_param = tokens / static_cast<double>(c.params);
  return c;
}

SearchResult plan_search(const Config& base, const SearchOptions& o) {
  if (!(o.flops > 0) || !std::isfinite(o.flops))
    throw ConfigError(fmt::format("the FLOP budget must be a positive number, got {}", o.flops));
  if (o.min_layers < 1 || o.max_layers < o.min_layers)
    throw ConfigError(fmt::format("layers {}:{}: expected 1 <= MIN <= MAX", o.min_layers, o.max_layers));
  std::vector<int64_t> widths = o.widths.empty() ? std::vector<int64_t>{base.n_embd} : o.widths;
  std::sort(widths.begin(), widths.end());
  widths.erase(std::unique(widths.begin(), widths.end()), widths.end());

  SearchResult r;
  std::vector<Candidate> all;
  std::optional<Candidate> smallest;  // the cheapest shape, for the "too small" message
  double best_ratio_seen = 0;
  for (int64_t w : widths) {
    for (int64_t L = o.min_layers; L <= o.max_layers; ++L) {
      const Config shape = plan_reshape(base, L, w);
      const ModelConfig m = model_of(shape);
      const double fpt = o.accounting == FlopAccounting::mfu ? m.flops_per_token() : m.flops_per_token_6n();
      Candidate c = plan_evaluate(shape, o.flops / fpt, o.accounting, o.law);
      ++r.shapes_searched;
      if (!smallest || c.params < smallest->params) smallest = c;
      if (c.tokens_per_param < o.min_tokens_per_param || c.tokens < static_cast<double>(m.block_size)) continue;
      best_ratio_seen = std::max(best_ratio_seen, c.tokens_per_param);
      if (o.max_tokens_per_param && c.tokens_per_param > *o.max_tokens_per_param) continue;
      all.push_back(std::move(c));
    }
  }
  if (all.empty() && best_ratio_seen == 0) {
    const auto& s = *smallest;
    const double need = std::max(o.min_tokens_per_param * static_cast<double>(s.params),
                                 static_cast<double>(model_of(s.config).block_size)) *
                        s.flops_per_token;
    throw ConfigError(fmt::format(
        "a budget of {:.3g} FLOPs is too small for the smallest shape searched ({}, {} parameters, {:.3g} FLOPs/token): "
        "it buys {} tokens, fewer than {:g} per parameter; it needs at least {:.3g} FLOPs",
        o.flops, s.arch, human(static_cast<double>(s.params)), s.flops_per_token, human(s.tokens),
        o.min_tokens_per_param, need));
  }
  if (all.empty())
    throw ConfigError(fmt::format(
        "no shape searched has at most {:g} tokens per parameter at {:.3g} FLOPs (the fewest is {:.1f}); "
        "allow more layers (--layers) or widths (--widths)",
        *o.max_tokens_per_param, o.flops, best_ratio_seen));

  if (o.tokens_per_param) {
    const double target = std::log(*o.tokens_per_param);
    std::stable_sort(all.begin(), all.end(), [&](const Candidate& a, const Candidate& b) {
      const double da = std::fabs(std::log(a.tokens_per_param) - target);
      const double db = std::fabs(std::log(b.tokens_per_param) - target);
      return da != db ? da < db : a.loss < b.loss;
    });
  } else {
    std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) { return a.loss < b.loss; });
  }
  const Candidate& best = all.front();
  r.best_at_edge = best.n_layer == o.max_layers || (o.min_layers > 1 && best.n_layer == o.min_layers) ||
                   (widths.size() > 1 && (best.n_embd == widths.front() || best.n_embd == widths.back()));
  r.candidates = std::move(all);
  return r;
}

// ---- run logs ------------------------------------------------------------------

MeasuredSpeed read_measured_speed(const std::string& path) {
  const RunLogData log = load_run_log(path);
  const RunSummary s = summarize_run_log(log, -1);
  if (!s.errors.empty())
    log.fail(fmt::format("failed its self-check ({} error(s), first: {}): its speed is not a result", s.errors.size(),
                         s.errors.front()));
  MeasuredSpeed m;
  m.path = path;
  m.device = s.device;
  m.world_size = s.world_size;
  m.tokens_per_sec = s.summary.value("tokens_per_sec", 0.0);
  if (!(m.tokens_per_sec > 0)) log.fail("has no measured tokens/s (no training iterations)");
  m.flops_per_token = log.startup_number({"model", "flops_per_token"});
  if (const auto* a = log.startup({"model", "arch"}); a && a->is_string()) m.arch = a->get<std::string>();
  if (auto it = s.summary.find("mfu"); it != s.summary.end() && it->is_number()) m.mfu = it->get<double>();
  return m;
}

void plan_apply_speed(std::vector<Candidate>& candidates, const MeasuredSpeed& speed, int gpus) {
  LLMTRAIN_CHECK(gpus >= 1, "--gpus must be >= 1, got {}", gpus);
  const double per_device = speed.achieved_flops() / static_cast<double>(speed.world_size);
  for (auto& c : candidates) {
    const double seconds = c.tokens * c.flops_per_token_mfu / (per_device * static_cast<double>(gpus));
    c.hours = seconds / 3600.0;
    c.gpu_hours = *c.hours * gpus;
  }
}

void plan_apply_prediction(std::vector<Candidate>& candidates, const std::string& device, int gpus,
                           int ranks_per_node) {
  LLMTRAIN_CHECK(gpus >= 1, "--gpus must be >= 1, got {}", gpus);
  const DeviceProfile profile = load_device_profile(device);
  for (auto& c : candidates) {
    const ModelConfig m = model_of(c.config);
    const StepPrediction p = predict_step(RunShape::from_config(c.config, m), {gpus, ranks_per_node}, profile);
    c.hours = c.tokens / p.tokens_per_s / 3600.0;
    c.gpu_hours = *c.hours * gpus;
    c.mfu = p.mfu_percent;
    if (p.confidence.have_range) c.mfu_lo = p.confidence.mfu_lo, c.mfu_hi = p.confidence.mfu_hi;
    c.unchecked = p.confidence.outside;
  }
}

void plan_apply_memory(std::vector<Candidate>& candidates, int gpus) {
  LLMTRAIN_CHECK(gpus >= 1, "--gpus must be >= 1, got {}", gpus);
  for (auto& c : candidates) {
    const ModelConfig m = model_of(c.config);
    const StrategyKind strategy = c.config.strategy();
    MemoryInputs in = MemoryInputs::from_config(c.config, gpus);
    in.attention = m.attention_backend;
    c.memory_strategy = to_string(strategy);
    c.memory_per_gpu = estimate_memory(m, in, strategy).total();
  }
}

LossObservation read_loss_observation(const std::string& path) {
  const RunLogData log = load_run_log(path);
  LossObservation o;
  o.source = path;
  o.params = log.startup_number({"model", "num_params"}, " (not an llmtrain run log?)");
  // D = the iterations trained x the global tokens of one: the run's last
  // iteration, not the number of records (a resumed run's log starts mid-way).
  const double tokens_per_iter = log.startup_number({"config", "tokens_per_iter"});
  if (!(tokens_per_iter > 0)) log.fail("has no startup_info.config.tokens_per_iter");
  const auto& iters = log.iterations;
  if (iters.empty() || !iters.back().contains("iter") || !iters.back()["iter"].is_number_integer())
    log.fail("has no training iterations: no tokens trained");
  int64_t last_iter = iters.back()["iter"].get<int64_t>() + 1;
  if (const auto* mi = log.startup({"config", "max_iters"}); mi && mi->is_number_integer())
    last_iter = std::max(last_iter, mi->get<int64_t>());
  o.tokens = static_cast<double>(last_iter) * tokens_per_iter;
  if (log.evals.empty()) log.fail("has no final val loss: eval_results is empty");
  const auto& e = log.evals.back();
  const auto it = e.find("iter"), vl = e.find("val_loss");
  if (it == e.end() || !it->is_number_integer() || it->get<int64_t>() != last_iter)
    log.fail(fmt::format("has no final val loss: its last evaluation is at iteration {} of {}",
                         it == e.end() ? std::string("?") : it->dump(), last_iter));
  if (vl == e.end() || !vl->is_number() || !std::isfinite(vl->get<double>()))
    log.fail("has no final val loss: the last evaluation has no finite val_loss");
  o.loss = vl->get<double>();
  return o;
}

// ---- output --------------------------------------------------------------------

std::string format_candidates(const std::vector<Candidate>& cs, FlopAccounting accounting) {
  const bool timed = !cs.empty() && cs.front().hours.has_value();
  const bool memory = !cs.empty() && !cs.front().memory_strategy.empty();
  std::string s = fmt::format("{:>3} {:>6} {:>6} {:>9} {:>6} {:>10} {:>10} {:>10} {:>11} {:>10} {:>8} {:>8}", "#",
                              "layers", "width", "heads/kv", "ffn", "params", "non-emb", "tokens",
                              accounting == FlopAccounting::mfu ? "FLOPs/tok" : "6N FLOPs/t", "FLOPs", "loss", "D/N");
  if (memory) s += fmt::format(" {:>11}", fmt::format("GiB/GPU {}", cs.front().memory_strategy));
  if (timed) s += fmt::format(" {:>10} {:>11}", "days", "GPU-hours");
  const bool predicted = !cs.empty() && cs.front().mfu.has_value();
  if (predicted) s += fmt::format(" {:>5} {:>9}", "MFU", "checked");
  s += "\n";
  int rank = 0;
  for (const auto& c : cs) {
    s += fmt::format("{:>3} {:>6} {:>6} {:>9} {:>6} {:>10} {:>10} {:>10} {:>11.4g} {:>10.4g} {:>8.4f} {:>8.1f}",
                     ++rank, c.n_layer, c.n_embd, fmt::format("{}/{}", c.n_head, c.n_kv_head), c.ffn_hidden,
                     human(static_cast<double>(c.params)), human(static_cast<double>(c.non_embedding_params)),
                     human(c.tokens), c.flops_per_token, c.flops, c.loss, c.tokens_per_param);
    if (memory) s += fmt::format(" {:>11.2f}", gib(c.memory_per_gpu));
    if (timed) s += fmt::format(" {:>10.3g} {:>11.4g}", *c.hours / 24.0, *c.gpu_hours);
    if (predicted)
      s += fmt::format(" {:>4.0f}% {:>9}", c.mfu.value_or(0.0),
                       c.mfu_lo ? fmt::format("{:.0f}-{:.0f}%", *c.mfu_lo, *c.mfu_hi) : std::string("-"));
    if (!c.unchecked.empty()) {
      s += "  outside the checked: ";
      for (size_t i = 0; i < c.unchecked.size(); ++i) s += (i ? ", " : "") + c.unchecked[i];
    }
    s += "\n";
  }
  return s;
}

nlohmann::json candidates_to_json(const std::vector<Candidate>& cs, FlopAccounting accounting) {
  nlohmann::json out = nlohmann::json::array();
  int rank = 0;
  for (const auto& c : cs) {
    nlohmann::json j = {{"rank", ++rank},
                        {"arch", c.arch},
                        {"n_layer", c.n_layer},
                        {"n_embd", c.n_embd},
                        {"n_head", c.n_head},
                        {"n_kv_head", c.n_kv_head},
                        {"head_dim", c.head_dim},
                        {"ffn_hidden", c.ffn_hidden},
                        {"params", c.params},
                        {"non_embedding_params", c.non_embedding_params},
                        {"tokens", c.tokens},
                        {"flops_per_token", c.flops_per_token},
                        {"flops_per_token_accounting", to_string(accounting)},
                        {"flops_per_token_mfu", c.flops_per_token_mfu},
                        {"flops", c.flops},
                        {"expected_loss", c.loss},
                        {"tokens_per_param", c.tokens_per_param}};
    j["memory_strategy"] = c.memory_strategy;
    j["memory_per_gpu_bytes"] = c.memory_per_gpu;
    j["hours"] = c.hours ? nlohmann::json(*c.hours) : nlohmann::json(nullptr);
    j["gpu_hours"] = c.gpu_hours ? nlohmann::json(*c.gpu_hours) : nlohmann::json(nullptr);
    if (c.mfu) j["predicted_mfu"] = *c.mfu;
    if (c.mfu_lo) j["predicted_mfu_range"] = {*c.mfu_lo, *c.mfu_hi};
    if (c.mfu || !c.unchecked.empty()) j["outside_checked"] = c.unchecked;
    out.push_back(std::move(j));
  }
  return out;
}

namespace {
// The runs' paths less the directory they all share (the table's last column).
std::vector<std::string> short_names(const std::vector<LossObservation>& runs) {
  std::vector<std::string> names;
  for (const auto& r : runs) names.push_back(r.source);
  if (names.size() < 2) return names;
  size_t common = names.front().size();
  for (const auto& n : names) {
    size_t k = 0;
    while (k < common && k < n.size() && n[k] == names.front()[k]) ++k;
    common = k;
  }
  common = names.front().rfind('/', common == 0 ? 0 : common - 1);
  if (common == std::string::npos) return names;
  for (auto& n : names) n = n.substr(common + 1);
  return names;
}
}  // namespace

std::string format_fit(const FitResult& f, const std::vector<LossObservation>& runs) {
  std::string s = fmt::format("fitted L(N, D) = E + A/N^alpha + B/D^beta to {} runs (Huber on log-loss, L-BFGS from {} "
                              "starting points; objective {:.4g})\n",
                              runs.size(), f.starts, f.objective);
  const ScalingLaw& l = f.law;
  const double v[5] = {l.E, l.A, l.B, l.alpha, l.beta};
  const double sd[5] = {f.sigma.E, f.sigma.A, f.sigma.B, f.sigma.alpha, f.sigma.beta};
  const double lo[5] = {f.p05.E, f.p05.A, f.p05.B, f.p05.alpha, f.p05.beta};
  const double hi[5] = {f.p95.E, f.p95.A, f.p95.B, f.p95.alpha, f.p95.beta};
  const char* names[5] = {"E", "A", "B", "alpha", "beta"};
  if (f.bootstrap_samples > 0)
    s += fmt::format("  {:<6} {:>11} {:>11} {:>24}   (bootstrap over runs, {} resamples; sigma = half the 16-84% "
                     "range)\n",
                     "", "value", "sigma", "5% .. 95%", f.bootstrap_samples);
  for (int k = 0; k < 5; ++k) {
    if (f.bootstrap_samples > 0)
      s += fmt::format("  {:<6} {:>11.4g} {:>11.3g} {:>11.4g} .. {:<11.4g}\n", names[k], v[k], sd[k], lo[k], hi[k]);
    else
      s += fmt::format("  {:<6} {:>11.4g}\n", names[k], v[k]);
  }
  s += fmt::format("  as --law: {:.6g},{:.6g},{:.6g},{:.6g},{:.6g}\n", l.E, l.A, l.B, l.alpha, l.beta);
  const auto shown = short_names(runs);
  s += fmt::format("  {:>10} {:>10} {:>9} {:>9} {:>8}  run\n", "params", "tokens", "val loss", "fit", "error");
  for (size_t i = 0; i < runs.size(); ++i) {
    const double pred = l.loss(runs[i].params, runs[i].tokens);
    s += fmt::format("  {:>10} {:>10} {:>9.4f} {:>9.4f} {:>7.2f}%  {}\n", human(runs[i].params), human(runs[i].tokens),
                     runs[i].loss, pred, 100.0 * (pred - runs[i].loss) / runs[i].loss, shown[i]);
  }
  return s;
}

nlohmann::json fit_to_json(const FitResult& f, const std::vector<LossObservation>& runs) {
  auto law = [](const ScalingLaw& l) {
    return nlohmann::json{{"E", l.E}, {"A", l.A}, {"B", l.B}, {"alpha", l.alpha}, {"beta", l.beta}};
  };
  nlohmann::json j = {{"law", law(f.law)}, {"objective", f.objective}, {"starts", f.starts},
                      {"bootstrap_samples", f.bootstrap_samples}};
  if (f.bootstrap_samples > 0) {
    j["sigma"] = law(f.sigma);
    j["p05"] = law(f.p05);
    j["p95"] = law(f.p95);
  }
  j["runs"] = nlohmann::json::array();
  for (const auto& r : runs)
    j["runs"].push_back({{"path", r.source}, {"params", r.params}, {"tokens", r.tokens}, {"val_loss", r.loss},
                         {"fit_loss", f.law.loss(r.params, r.tokens)}});
  return j;
}

std::string plan_preset_text(const Candidate& c, const std::string& command, int gpus) {
  LLMTRAIN_CHECK(gpus >= 1, "--gpus must be >= 1, got {}", gpus);
  Config cfg = c.config;
  const double tokens_per_iter = static_cast<double>(cfg.tokens_per_iter(gpus));
  const auto iters = static_cast<int64_t>(std::ceil(c.tokens / tokens_per_iter));
  cfg.set("max_iters", std::to_string(iters));
  cfg.set("lr_decay_iters", std::to_string(std::max<int64_t>(1, iters)));
  if (cfg.warmup_iters > iters / 10) cfg.set("warmup_iters", std::to_string(iters / 10));
  cfg.validate();
  std::string s;
  s += fmt::format("# {}: {} parameters ({} non-embedding), planned by llmtrain-plan.\n", c.arch,
                   human(static_cast<double>(c.params)), human(static_cast<double>(c.non_embedding_params)));
  s += fmt::format("# {}\n", command);
  s += fmt::format("# {:.4g} FLOPs ({} accounting: {:.4g} FLOPs/token) -> {:.6g} tokens ({:.1f} per parameter); "
                   "expected loss {:.4f}\n",
                   c.flops, c.flops_per_token == c.flops_per_token_mfu ? "6N + 12LHQT" : "6N", c.flops_per_token,
                   c.tokens, c.tokens_per_param, c.loss);
  s += fmt::format("# max_iters = ceil(tokens / (batch_size {} x gradient_accumulation_steps {} x {} GPU(s) x "
                   "block_size {})) = {}\n",
                   cfg.batch_size, cfg.gradient_accumulation_steps, gpus, cfg.block_size, iters);
  const Config defaults;
  const char* model_keys[] = {"vocab_size", "n_layer", "n_head", "n_kv_head", "n_embd", "head_dim", "ffn_hidden"};
  for (const auto& k : Config::key_names()) {
    const bool always = std::find(std::begin(model_keys), std::end(model_keys), k) != std::end(model_keys);
    if (always || cfg.get(k) != defaults.get(k)) s += fmt::format("{} = {}\n", k, cfg.get(k));
  }
  return s;
}

}  // namespace llmtrain
