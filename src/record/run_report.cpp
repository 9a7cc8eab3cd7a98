// llmtrain-report's half of the run log: reading logs back, condensing them
// (RunSummary) and the comparison, budget and scaling tables.
#include "llmtrain/record/run_report.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "llmtrain/core/config.hpp"
#include "llmtrain/record/metrics.hpp"

namespace llmtrain {
namespace {

template <typename T>
T value_or(const nlohmann::json& j, const char* key, T def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return def;
  }
}
double sum_num(const nlohmann::json& s, const char* key) { return value_or<double>(s, key, 0.0); }
std::string fmt_opt(const nlohmann::json& s, const char* key, const char* spec_fmt) {
  auto it = s.find(key);
  if (it == s.end() || !it->is_number()) return "unknown";
  return fmt::format(fmt::runtime(spec_fmt), it->get<double>());
}

}  // namespace

std::string RunSummary::ending() const {
  // last_iter < 0: the log holds no iteration (the run ended in its start-up).
  const std::string where =
      last_iter < 0 ? std::string("before its first iteration") : fmt::format("at iteration {}", last_iter);
  if (cut_off()) return fmt::format("cut off {} (no summary: killed, a node lost, or still running)", where);
  if (status == "completed") return status;
  return fmt::format("{} {}", status, where);
}

RunSummary summarize_run_log(const RunLogData& log, int64_t warmup_iters) {
  RunSummary r;
  r.path = log.path;
  const auto& cfg = log.config();
  const auto& iters = log.iterations;
  r.world_size = value_or<int>(cfg, "world_size", 1);
  r.num_nodes = value_or<int>(cfg, "num_nodes", 1);
  r.batch_size = value_or<int64_t>(cfg, "batch_size", 0);
  r.grad_accum = value_or<int64_t>(cfg, "gradient_accumulation_steps_per_gpu",
                                   value_or<int64_t>(cfg, "gradient_accumulation_steps", 0));
  r.block_size = value_or<int64_t>(cfg, "block_size", 0);
  if (cfg.contains("tokens_per_iter")) {
    r.tokens_per_iter = cfg["tokens_per_iter"].get<int64_t>();
  } else {  // logs from before the key: the one formula
    Config c;
    c.batch_size = r.batch_size;
    c.gradient_accumulation_steps = r.grad_accum;
    c.block_size = r.block_size;
    r.tokens_per_iter = c.tokens_per_iter(r.world_size);
  }
  r.device = value_or<std::string>(cfg, "device_name", "");
  r.label = value_or<std::string>(cfg, "config_label", "");
  if (r.label.empty()) {
    r.label = value_or<std::string>(cfg, "attention_backend_used", value_or<std::string>(cfg, "attention_backend", "?")) +
              "+" + value_or<std::string>(cfg, "dtype", "?");
    if (value_or<bool>(cfg, "compile", false)) r.label += "+compile";
    if (value_or<bool>(cfg, "use_dataloader", false)) r.label += "+dataloader";
  }
  if (warmup_iters < 0) warmup_iters = value_or<int64_t>(cfg, "warmup_report_iters", 50);

  if (const auto* p = log.startup({"prediction"}); p && p->contains("step_time_s")) r.prediction = *p;
  r.errors = log.errors;
  r.status = log.summary.empty() ? "cut off" : value_or<std::string>(log.summary, "status", "unknown");
  if (!iters.empty()) r.last_iter = value_or<int64_t>(iters.back(), "iter", static_cast<int64_t>(iters.size()) - 1);
  // Re-run the self-check: a log edited or produced by a buggy build is caught here.
  double fpt = 0.0, peak_total = 0.0;
  if (const auto* m = log.startup({"mfu"})) {
    fpt = value_or<double>(*m, "flops_per_token", 0.0);
    peak_total = value_or<double>(*m, "peak_tflops_total", 0.0);
  }
  for (const auto& rec : iters) {
    for (auto& e : check_iteration_record(rec, fpt, peak_total)) {
      if (std::find(r.errors.begin(), r.errors.end(), e) == r.errors.end()) r.errors.push_back(std::move(e));
    }
  }
  r.summary = summarize_records(iters, warmup_iters);
  r.summary["tokens_per_sec_per_device"] =
      sum_num(r.summary, "tokens_per_sec") / static_cast<double>(std::max(1, r.world_size));
  return r;
}

RunSummary read_run_log(const std::string& path, int64_t warmup_iters) {
  return summarize_run_log(load_run_log(path), warmup_iters);
}

std::string format_prediction_table(const std::vector<RunSummary>& runs) {
  // Run-log phase (summary mean_<name>) -> the prediction's phase.
  static const std::pair<const char*, const char*> phases[] = {{"data_ms", "data_s"},
                                                               {"forward_backward_ms", "forward_backward_s"},
                                                               {"communication_ms", "communication_s"},
                                                               {"optimizer_ms", "optimizer_s"}};
  std::string s;
  for (const auto& r : runs) {
    if (r.prediction.is_null()) continue;
    if (s.empty())
      s = fmt::format("{:<44} {:>5} {:>12} {:>13} {:>9}  {}\n", "config", "GPUs", "measured ms", "predicted ms",
                      "error", "largest difference (measured / predicted ms)");
    const double meas = sum_num(r.summary, "mean_dt_ms");
    const double pred = value_or<double>(r.prediction, "step_time_s", 0.0) * 1e3;
    if (!(meas > 0)) {  // no iteration measured (a run that ended in its start-up): nothing to compare
      s += fmt::format("{:<44} {:>5} {:>12} {:>13.1f} {:>9}  no iteration measured\n", r.label, r.world_size, "-",
                       pred, "-");
      continue;
    }
    std::string worst = "-";
    double worst_diff = 0;
    const auto& pp = r.prediction.contains("phases") ? r.prediction["phases"] : nlohmann::json::object();
    for (const auto& [mk, pk] : phases) {
      const double m = sum_num(r.summary, (std::string("mean_") + mk).c_str());
      const double p = value_or<double>(pp, pk, 0.0) * 1e3;
      if (std::abs(m - p) > worst_diff)
        worst_diff = std::abs(m - p), worst = fmt::format("{} {:.4g} / {:.4g}", mk, m, p);
    }
    const double err = pred > 0 ? meas / pred - 1.0 : 0.0;
    s += fmt::format("{:<44} {:>5} {:>12.1f} {:>13.1f} {:>+8.1f}%  {}{}\n", r.label, r.world_size, meas, pred,
                     100.0 * err, worst, std::abs(err) > 0.25 ? "  OFF by more than 25%" : "");
  }
  return s;
}

std::string format_comparison_table(const std::vector<RunSummary>& runs) {
  std::string s = fmt::format("{:<44} {:>5} {:>6} {:>6} {:>10} {:>10} {:>12} {:>11} {:>9} {:>8} {:>9} {:>6}\n",
                              "config", "GPUs", "batch", "accum", "tok/iter", "ms/iter", "tokens/s", "tok/s/GPU",
                              "TFLOP/s", "MFU %", "mem GB", "iters");
  for (const auto& r : runs) {
    const auto& m = r.summary;
    // A run whose figures failed the self-check shows no MFU: it is not a result.
    const std::string mfu = r.errors.empty() ? fmt_opt(m, "mfu", "{:.2f}") : "ERROR";
    s += fmt::format("{:<44} {:>5} {:>6} {:>6} {:>10} {:>10.1f} {:>12.0f} {:>11.0f} {:>9.2f} {:>8} {:>9.2f} {:>6}\n",
                     r.label, r.world_size, r.batch_size, r.grad_accum, r.tokens_per_iter, sum_num(m, "mean_dt_ms"),
                     sum_num(m, "tokens_per_sec"), sum_num(m, "tokens_per_sec_per_device"),
                     sum_num(m, "achieved_tflops"), mfu, sum_num(m, "memory_peak_gb"),
                     fmt::format("{}/{}", value_or<int64_t>(m, "iterations_averaged", 0),
                                 value_or<int64_t>(m, "iterations", 0)));
  }
  return s;
}

std::string format_budget_table(const std::vector<RunSummary>& runs, double token_budget) {
  std::string s = fmt::format("time to train {:.4g}B tokens:\n{:<44} {:>5} {:>12} {:>10} {:>8}\n", token_budget / 1e9,
                              "config", "GPUs", "tokens/s", "hours", "days");
  for (const auto& r : runs) {
    const double tps = sum_num(r.summary, "tokens_per_sec");
    if (r.cut_off()) {  // its speed may be the warm-up's only: no figure to plan a run on
      s += fmt::format("{:<44} {:>5} {:>12} {:>10} {:>8}  ({})\n", r.label, r.world_size, "-", "-", "-", r.ending());
      continue;
    }
    if (tps <= 0) {
      s += fmt::format("{:<44} {:>5} {:>12} {:>10} {:>8}\n", r.label, r.world_size, "-", "-", "-");
      continue;
    }
    const double hours = token_budget / tps / 3600.0;
    s += fmt::format("{:<44} {:>5} {:>12.0f} {:>10.1f} {:>8.2f}{}\n", r.label, r.world_size, tps, hours, hours / 24.0,
                     r.errors.empty() ? "" : "  (log failed the self-check)");
  }
  return s;
}

nlohmann::json scaling_efficiency(const std::vector<RunSummary>& runs) {
  nlohmann::json out = nlohmann::json::array();
  if (runs.empty()) return out;
  size_t b = 0;
  for (size_t i = 1; i < runs.size(); ++i)
    if (runs[i].world_size < runs[b].world_size) b = i;
  const auto& base = runs[b];
  const double base_dt = sum_num(base.summary, "mean_dt_ms");
  const double base_tpd = sum_num(base.summary, "tokens_per_sec_per_device");
  const double base_tpi_dev = static_cast<double>(base.tokens_per_iter) / base.world_size;
  for (const auto& r : runs) {
    nlohmann::json e;
    e["path"] = r.path;
    e["label"] = r.label;
    e["world_size"] = r.world_size;
    e["tokens_per_sec"] = sum_num(r.summary, "tokens_per_sec");
    e["speedup"] = base_dt > 0 && sum_num(base.summary, "tokens_per_sec") > 0
                       ? sum_num(r.summary, "tokens_per_sec") / sum_num(base.summary, "tokens_per_sec")
                       : 0.0;
    const double dt = sum_num(r.summary, "mean_dt_ms");
    // Strong scaling: the same global batch split over more devices.
    // Not comparable -> the key is absent (never null), as in the run log.
    if (r.tokens_per_iter == base.tokens_per_iter && dt > 0)
      e["strong_efficiency"] = (base_dt * base.world_size) / (dt * r.world_size);
    // Weak scaling: the same work per device.
    if (static_cast<double>(r.tokens_per_iter) / r.world_size == base_tpi_dev && base_tpd > 0)
      e["weak_efficiency"] = sum_num(r.summary, "tokens_per_sec_per_device") / base_tpd;
    out.push_back(std::move(e));
  }
  return out;
}

std::string format_scaling_table(const std::vector<RunSummary>& runs) {
  const auto eff = scaling_efficiency(runs);
  std::vector<size_t> order(runs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return runs[a].world_size < runs[b].world_size; });
  std::string s = fmt::format(
      "scaling relative to the smallest run (strong: same global tokens/iter; weak: same tokens/iter per GPU);\n"
      "comm ms = exposed communication per iteration (waits on collectives not hidden behind compute)\n"
      "{:<44} {:>5} {:>5} {:>10} {:>12} {:>8} {:>10} {:>8} {:>9} {:>7}\n",
      "config", "GPUs", "nodes", "tok/iter", "tokens/s", "speedup", "strong %", "weak %", "comm ms", "comm %");
  for (size_t i : order) {
    const auto& e = eff[i];
    auto pct = [&e](const char* key) {
      const auto it = e.find(key);
      return it != e.end() && it->is_number() ? fmt::format("{:.1f}", 100.0 * it->get<double>()) : std::string("n/a");
    };
    const double dt = sum_num(runs[i].summary, "mean_dt_ms");
    const double comm = sum_num(runs[i].summary, "mean_communication_ms");
    s += fmt::format("{:<44} {:>5} {:>5} {:>10} {:>12.0f} {:>8.2f} {:>10} {:>8} {:>9.2f} {:>7.1f}\n", runs[i].label,
                     runs[i].world_size, runs[i].num_nodes, runs[i].tokens_per_iter, e["tokens_per_sec"].get<double>(),
                     e["speedup"].get<double>(), pct("strong_efficiency"), pct("weak_efficiency"), comm,
                     dt > 0 ? 100.0 * comm / dt : 0.0);
  }
  return s;
}

}  // namespace llmtrain
