// llmtrain-report's figures (SVG drawn here, the one plotting path of --html and
// --plot) and the page around them, with no script and nothing fetched.
#include "llmtrain/record/html_report.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "llmtrain/core/config.hpp"              // defines: Config (rebuilt from startup_info.config)
#include "llmtrain/model/model_config.hpp"       // defines: ModelConfig::from_config
#include "llmtrain/prediction/memory_model.hpp"  // defines: estimate_memory (the memory plan)

namespace llmtrain {
namespace {

using nlohmann::json;

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"};
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kCharPx = 6.4;  // width of one character at font-size 11, for layout

const char* color(size_t i) { return kColors[i % std::size(kColors)]; }

double num(const json& j, const char* key, double def = kNaN) {
  const auto it = j.is_object() ? j.find(key) : j.end();
  return it != j.end() && it->is_number() ? it->get<double>() : def;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
  void widen_if_flat() {
    if (hi > lo) return;
    const double pad = lo == 0 ? 1.0 : std::abs(lo) * 0.05;
    lo -= pad;
    hi += pad;
  }
};

// About five round tick values (1, 2 or 5 times a power of ten apart) in [lo, hi];
// with `integer`, never closer than 1 apart (GPU counts, iterations).
std::vector<double> ticks(const Range& r, bool integer = false) {
  const double raw = (r.hi - r.lo) / 5.0;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  double step = raw / p < 1.5 ? p : raw / p < 3.5 ? 2 * p : raw / p < 7.5 ? 5 * p : 10 * p;
  if (integer) step = std::max(step, 1.0);
  std::vector<double> t;
  for (double v = std::ceil(r.lo / step) * step; v <= r.hi + step * 1e-9; v += step) t.push_back(v);
  return t;
}

// A tick's label: short enough for a 600 px axis (1.5M, 250k, 0.0006).
std::string tick_label(double v) {
  const double a = std::abs(v);
  if (a >= 1e9) return fmt::format("{:.4g}B", v / 1e9);
  if (a >= 1e6) return fmt::format("{:.4g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:.4g}k", v / 1e3);
  return fmt::format("{:.4g}", v);
}

std::string svg_text(double x, double y, const std::string& anchor, const std::string& text, int size = 12,
                     const std::string& extra = "") {
  return fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="{}" font-size="{}"{}>{}</text>)", x, y, anchor, size,
                     extra, html_escape(text));
}

// `text` cut into lines of at most `width` characters at spaces.
std::vector<std::string> wrap(const std::string& text, size_t width) {
  std::vector<std::string> lines;
  std::string line;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(at, end - at);
    if (!line.empty() && line.size() + 1 + word.size() > width) lines.push_back(std::move(line)), line.clear();
    line += (line.empty() ? "" : " ") + word;
    at = end + 1;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

// The opening of every figure: size, a white ground (a standalone .svg opened
// in a dark viewer stays readable), the title as text and as <title>.
std::string svg_open(const std::string& title, int width, double height) {
  return fmt::format(
             R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1:.0f}" viewBox="0 0 {0} {1:.0f}" )"
             R"(role="img" font-family="sans-serif"><title>{2}</title><rect width="100%" height="100%" fill="#fff"/>)",
             width, height, html_escape(title)) +
         svg_text(width / 2.0, 20, "middle", title, 14, R"( font-weight="bold")");
}

struct Frame {  // the plot area inside the margins, and the data ranges it maps
  double left, top, right, bottom;
  Range x, y;
  double px(double v) const { return left + (v - x.lo) / (x.hi - x.lo) * (right - left); }
  double py(double v) const { return bottom - (v - y.lo) / (y.hi - y.lo) * (bottom - top); }
};

std::string svg_axes(const Frame& f, const std::string& x_label, const std::string& y_label, bool x_integer) {
  std::string s = fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="none" stroke="#444"/>)",
                              f.left, f.top, f.right - f.left, f.bottom - f.top);
  for (double v : ticks(f.x, x_integer))
    s += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2:.1f}" stroke="#ddd"/>)", f.px(v), f.top,
                     f.bottom) +
         svg_text(f.px(v), f.bottom + 15, "middle", tick_label(v), 11);
  for (double v : ticks(f.y))
    s += fmt::format(R"(<line x1="{1:.1f}" y1="{0:.1f}" x2="{2:.1f}" y2="{0:.1f}" stroke="#ddd"/>)", f.py(v), f.left,
                     f.right) +
         svg_text(f.left - 5, f.py(v) + 4, "end", tick_label(v), 11);
  s += svg_text((f.left + f.right) / 2, f.bottom + 32, "middle", x_label);
  s += fmt::format(R"~(<text transform="translate(14,{:.1f}) rotate(-90)" text-anchor="middle" font-size="12">{}</text>)~",
                   (f.top + f.bottom) / 2, html_escape(y_label));
  return s;
}

std::string svg_series(const Frame& f, const PlotSeries& s, const char* c) {
  std::string points, dots;
  for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
    if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
    points += fmt::format("{:.1f},{:.1f} ", f.px(s.x[i]), f.py(s.y[i]));
    if (s.mark != PlotSeries::Mark::line)
      dots += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="{}"/>)", f.px(s.x[i]), f.py(s.y[i]),
                          s.mark == PlotSeries::Mark::dots ? 2.5 : s.mark == PlotSeries::Mark::markers ? 4.0 : 3.0);
  }
  switch (s.mark) {
    case PlotSeries::Mark::none: return "";
    case PlotSeries::Mark::line:
      return fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="1.8" points="{}"/>)", c, points);
    case PlotSeries::Mark::dots:
      return fmt::format(R"(<g fill="{}" fill-opacity="0.45">{}</g>)", c, dots);
    case PlotSeries::Mark::markers:
      return fmt::format(R"(<g fill="{}">{}</g>)", c, dots);
    case PlotSeries::Mark::dashed:
      return fmt::format(R"(<polyline fill="none" stroke="{0}" stroke-width="1.8" stroke-dasharray="6 4" points="{1}"/>)"
                         R"(<g fill="{0}">{2}</g>)",
                         c, points, dots);
  }
  return "";
}

// Legend items laid out in rows under the plot; returns the SVG and sets `rows`.
std::string svg_legend(double left, double right, double top, const std::vector<PlotSeries>& series, int* rows) {
  std::string s;
  double x = left, y = top;
  *rows = 0;
  for (size_t i = 0; i < series.size(); ++i) {
    const auto& p = series[i];
    if (!p.in_legend || p.label.empty()) continue;
    const double w = 34 + kCharPx * static_cast<double>(p.label.size());
    if (*rows == 0) *rows = 1;
    if (x > left && x + w > right) x = left, y += 16, ++*rows;
    const char* c = p.color >= 0 ? color(static_cast<size_t>(p.color)) : color(i);
    if (p.mark == PlotSeries::Mark::dots || p.mark == PlotSeries::Mark::markers)
      s += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3.5" fill="{}"{}/>)", x + 10, y - 4, c,
                       p.mark == PlotSeries::Mark::dots ? R"( fill-opacity="0.5")" : "");
    else
      s += fmt::format(R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}" stroke-width="3"{}/>)", x,
                       y - 4, x + 20, y - 4, c,
                       p.mark == PlotSeries::Mark::dashed ? R"( stroke-dasharray="5 3")" : "");
    s += svg_text(x + 25, y, "start", p.label, 11);
    x += w;
  }
  return s;
}

// Running median of 2k+1 points (k from the length): the trend of a noisy
// per-iteration figure; a median, so one slow step (iteration 0, a checkpoint)
// does not bend it.
PlotSeries running_median(const PlotSeries& raw, int* window) {
  PlotSeries out = raw;
  out.y.clear();
  const size_t n = raw.y.size();
  const size_t k = std::clamp<size_t>(n / 20, 1, 25);
  *window = static_cast<int>(2 * k + 1);
  for (size_t i = 0; i < n; ++i) {
    std::vector<double> w;
    for (size_t j = i >= k ? i - k : 0; j < std::min(n, i + k + 1); ++j)
      if (std::isfinite(raw.y[j])) w.push_back(raw.y[j]);
    if (w.empty()) {
      out.y.push_back(kNaN);
      continue;
    }
    std::nth_element(w.begin(), w.begin() + static_cast<long>(w.size() / 2), w.end());
    out.y.push_back(w[w.size() / 2]);
  }
  return out;
}

// ---- what the figures read from a run log

std::string run_tag(size_t i, size_t n) { return n > 1 ? fmt::format("[{}] ", i) : ""; }

std::string run_name(const RunSummary& r, size_t i) {
  return fmt::format("[{}] {}, {} rank{}", i, r.label, r.world_size, r.world_size == 1 ? "" : "s");
}

// training_iterations[].key against iter.
PlotSeries iteration_series(const RunLogData& log, const char* key) {
  PlotSeries s;
  for (const auto& rec : log.iterations) {
    const double v = num(rec, key);
    if (!std::isfinite(v) || !rec.contains("iter")) continue;
    s.x.push_back(num(rec, "iter"));
    s.y.push_back(v);
  }
  return s;
}

// Why a run log has no MFU: its absent_keys' reason, or the self-check's.
std::string why_no_mfu(const RunLogData& log, const RunSummary& r) {
  if (const auto* a = log.startup({"absent_keys"}))
    for (const char* k : {"training_iterations[].mfu", "summary.mfu", "startup_info.mfu.peak_tflops_per_device"})
      if (a->contains(k) && (*a)[k].is_string()) return (*a)[k].get<std::string>();
  if (!r.errors.empty()) return "the log failed the self-check (see its errors): its MFU is not a result";
  return "the run log has no mfu values";
}

struct PhaseColumn {
  const char* name;           // as the figure says it
  const char* measured_key;   // RunSummary.summary mean_<...>
  const char* predicted_key;  // startup_info.prediction.phases.<...>; nullptr: predicted 0
};
constexpr PhaseColumn kPhases[] = {
    {"forward/backward", "mean_forward_backward_ms", "forward_backward_s"},
    {"optimizer", "mean_optimizer_ms", "optimizer_s"},
    {"exposed communication", "mean_communication_ms", "communication_s"},
    {"data", "mean_data_ms", "data_s"},
    {"other", "mean_other_ms", nullptr},  // the model predicts no time outside the phases
};

std::string fmt_duration(double s) {
  if (s < 120) return fmt::format("{:.0f} s", s);
  if (s < 2 * 3600) return fmt::format("{:.0f} min", s / 60);
  if (s < 48 * 3600) return fmt::format("{:.1f} h", s / 3600);
  return fmt::format("{:.1f} days", s / 86400);
}

std::string fmt_count(double v) {
  if (v >= 1e12) return fmt::format("{:.3g}T", v / 1e12);
  if (v >= 1e9) return fmt::format("{:.3g}B", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.3g}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.3g}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

std::string fmt_ms(double ms) { return ms >= 100 ? fmt::format("{:.0f} ms", ms) : fmt::format("{:.3g} ms", ms); }

ReportFigure phases_figure(const RunSummary& r, const RunLogData& log, size_t i, size_t n) {
  const std::string title = fmt::format("{}Where a step's time went (ms per step)", run_tag(i, n));
  std::vector<std::string> names;
  BarRow measured{"measured", {}, ""}, predicted{"predicted", {}, ""};
  const json* pred = log.startup({"prediction", "phases"});
  double m_total = 0, p_total = 0;
  for (const auto& p : kPhases) {
    names.push_back(p.name);
    measured.values.push_back(num(r.summary, p.measured_key, 0.0));
    m_total += measured.values.back();
    predicted.values.push_back(pred ? (p.predicted_key ? num(*pred, p.predicted_key, 0.0) * 1e3 : 0.0) : kNaN);
    if (pred) p_total += predicted.values.back();
  }
  measured.text = fmt_ms(m_total);
  std::vector<std::string> footer;
  if (pred) {
    predicted.text = fmt_ms(p_total);
    size_t worst = 0;
    for (size_t k = 1; k < std::size(kPhases); ++k)
      if (std::abs(measured.values[k] - predicted.values[k]) > std::abs(measured.values[worst] - predicted.values[worst]))
        worst = k;
    const double m = measured.values[worst], p = predicted.values[worst];
    footer.push_back(fmt::format("Largest miss: {}: measured {}, predicted {}{}", kPhases[worst].name, fmt_ms(m),
                                 fmt_ms(p), p > 0 ? fmt::format(" ({:.2f}x the prediction)", m / p) : ""));
  } else {
    const json* why = log.startup({"prediction", "unknown"});
    predicted.text = "no prediction";
    footer.push_back("No prediction in this run log" +
                     (why && why->is_string() ? ": " + why->get<std::string>() : std::string(".")));
  }
  footer.push_back(fmt::format("Means over iterations {}+ (after warm-up); predicted: startup_info.prediction.",
                               static_cast<int64_t>(num(r.summary, "warmup_iters_skipped", 0))));
  return {fmt::format("phases-{}", i), title,
          svg_bar_chart(title, "time per step (ms)", names, {measured, predicted}, /*stacked=*/true, footer)};
}

// A curve per run with its running median over the raw points.
ReportFigure noisy_figure(const std::string& id, const std::string& title, const std::string& y_label,
                          const std::vector<RunSummary>& runs, const std::vector<RunLogData>& logs, const char* key,
                          const std::string& empty_text) {
  std::vector<PlotSeries> series;
  int window = 0;
  for (size_t i = 0; i < logs.size(); ++i) {
    PlotSeries raw = iteration_series(logs[i], key);
    if (raw.x.empty()) continue;
    raw.mark = PlotSeries::Mark::dots;
    raw.color = static_cast<int>(i);
    raw.label = "each iteration";
    raw.in_legend = series.empty();  // once: the dots are the same thing in every colour
    PlotSeries line = running_median(raw, &window);
    line.mark = PlotSeries::Mark::line;
    line.in_legend = true;
    line.label = runs.size() > 1 ? fmt::format("[{}] running median of {}", i, window)
                                 : fmt::format("running median of {} iterations", window);
    series.push_back(std::move(raw));
    series.push_back(std::move(line));
  }
  return {id, title, svg_line_plot(title, y_label, series, 600, 300, "iteration", empty_text)};
}

ReportFigure loss_figure(const std::vector<RunSummary>& runs, const std::vector<RunLogData>& logs) {
  const std::string title = "Training and validation loss (nats/token)";
  std::vector<PlotSeries> series;
  for (size_t i = 0; i < logs.size(); ++i) {
    PlotSeries train = iteration_series(logs[i], "loss");
    train.label = run_tag(i, runs.size()) + "train (each iteration)";
    train.color = static_cast<int>(i);
    series.push_back(std::move(train));
    PlotSeries val{run_tag(i, runs.size()) + "val (each evaluation)", {}, {}, PlotSeries::Mark::dashed,
                   static_cast<int>(i)};
    for (const auto& ev : logs[i].evals) {
      const double v = num(ev, "val_loss");
      if (std::isfinite(v)) val.x.push_back(num(ev, "iter")), val.y.push_back(v);
    }
    if (!val.x.empty()) series.push_back(std::move(val));
  }
  return {"loss", title, svg_line_plot(title, "loss (nats/token)", series)};
}

ReportFigure lr_figure(const std::vector<RunSummary>& runs, const std::vector<RunLogData>& logs) {
  const std::string title = "Learning rate (per iteration, dimensionless)";
  std::vector<PlotSeries> series;
  for (size_t i = 0; i < logs.size(); ++i) {
    PlotSeries s = iteration_series(logs[i], "lr");
    s.label = runs.size() > 1 ? run_name(runs[i], i) : "";
    s.color = static_cast<int>(i);
    series.push_back(std::move(s));
  }
  return {"lr", title, svg_line_plot(title, "learning rate", series)};
}

// Bytes of the memory figure's "device capacity": startup_info.memory.capacity_bytes
// when the run recorded what its device held (negative otherwise).
double capacity_bytes(const RunLogData& log) {
  const json* c = log.startup({"memory", "capacity_bytes"});
  return c && c->is_number() ? c->get<double>() : -1.0;
}

ReportFigure memory_figure(const std::vector<RunSummary>& runs, const std::vector<RunLogData>& logs) {
  const std::string title = "Memory per rank: measured, planned, available (GiB)";
  std::vector<BarRow> rows;
  bool no_capacity = false;
  for (size_t i = 0; i < runs.size(); ++i) {
    double peak = num(logs[i].summary, "allocated_peak_bytes");  // every rank's largest
    if (!std::isfinite(peak)) peak = num(runs[i].summary, "allocated_peak_bytes");
    const double plan = planned_memory_bytes(logs[i]);
    const double cap = capacity_bytes(logs[i]);
    no_capacity = no_capacity || cap < 0;
    BarRow row{runs.size() > 1 ? run_name(runs[i], i) : runs[i].label,
               {std::isfinite(peak) ? gib(peak) : kNaN, plan > 0 ? gib(plan) : kNaN, cap > 0 ? gib(cap) : kNaN},
               ""};
    if (std::isfinite(peak) && plan > 0) row.text = fmt::format("measured / plan = {:.2f}", peak / plan);
    rows.push_back(std::move(row));
  }
  std::vector<std::string> footer = {
      "Measured: the most bytes LibTorch held at once on any rank (allocated_peak_bytes).",
      "Plan: the memory model's prediction for this configuration (docs/memory.md)."};
  footer.push_back(no_capacity ? "Available: not in this run log (startup_info.memory.capacity_bytes)."
                               : "Available: what the rank could allocate at start-up (startup_info.memory).");
  return {"memory", title,
          svg_bar_chart(title, "GiB per rank", {"allocated peak (measured)", "memory plan", "available on the device"},
                        rows, /*stacked=*/false, footer)};
}

// Several runs: tokens/s and MFU per configuration.
ReportFigure compare_figure(const std::string& id, const std::string& title, const std::string& value_label,
                            const std::vector<RunSummary>& runs, const std::vector<RunLogData>& logs, const char* key) {
  std::vector<BarRow> rows;
  std::map<std::string, std::string> reasons;  // why there is no value -> the runs, "[1] [2]"
  const bool mfu = std::string(key) == "mfu";
  for (size_t i = 0; i < runs.size(); ++i) {
    const double v = runs[i].errors.empty() || !mfu ? num(runs[i].summary, key) : kNaN;
    BarRow row{run_name(runs[i], i), {v}, ""};
    if (std::isfinite(v)) {
      row.text = mfu ? fmt::format("{:.2f} %", v) : fmt::format("{:.0f}", v);
    } else {
      row.text = "n/a (below)";
      reasons[mfu ? why_no_mfu(logs[i], runs[i]) : "not in the log"] += fmt::format("[{}] ", i);
    }
    rows.push_back(std::move(row));
  }
  std::vector<std::string> footer;
  for (const auto& [why, which] : reasons) footer.push_back(fmt::format("{}no {}: {}", which, key, why));
  return {id, title, svg_bar_chart(title, value_label, {value_label}, rows, false, footer)};
}

// Several GPU counts: efficiency against GPUs and tokens/s against linear. A
// set of logs may hold more than one study (a strong and a weak one, as the
// scaling jobs write them: STUDY_DIR/ws<N>/): runs are grouped by what a study
// keeps fixed, each group against its own run with the fewest GPUs, with the
// formulas of the --scaling table (run_report.hpp):
//   strong (same global tokens/iter):  (dt_base x n_base) / (dt x n)
//   weak (same tokens/iter per GPU):   per-GPU tokens/s / the base's
std::vector<ReportFigure> scaling_figures(const std::vector<RunSummary>& runs) {
  std::set<int> sizes;
  for (const auto& r : runs) sizes.insert(r.world_size);
  if (sizes.size() < 2) return {};
  std::vector<size_t> order(runs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return runs[a].world_size < runs[b].world_size; });
  const double lo = *sizes.begin(), hi = *sizes.rbegin();

  std::vector<PlotSeries> series;
  auto add_groups = [&](bool strong) {
    std::map<double, std::vector<size_t>> groups;  // fixed tokens/iter (global or per GPU) -> runs, by GPUs
    for (size_t i : order)
      if (num(runs[i].summary, "mean_dt_ms", 0.0) > 0)
        groups[static_cast<double>(runs[i].tokens_per_iter) / (strong ? 1 : runs[i].world_size)].push_back(i);
    for (const auto& [tokens, members] : groups) {
      std::set<int> n;
      for (size_t i : members) n.insert(runs[i].world_size);
      if (n.size() < 2) continue;  // not a study: one GPU count
      const auto& base = runs[members.front()];
      PlotSeries s{fmt::format("{}, {} tokens/iter{}", strong ? "strong" : "weak", fmt_count(tokens),
                               strong ? "" : " per GPU"),
                   {}, {}, PlotSeries::Mark::dashed, static_cast<int>(series.size())};
      s.mark = PlotSeries::Mark::line;
      for (size_t i : members) {
        const auto& r = runs[i];
        const double e = strong ? num(base.summary, "mean_dt_ms") * base.world_size /
                                      (num(r.summary, "mean_dt_ms") * r.world_size)
                                : num(r.summary, "tokens_per_sec_per_device") /
                                      num(base.summary, "tokens_per_sec_per_device");
        s.x.push_back(r.world_size);
        s.y.push_back(100 * e);
      }
      PlotSeries pts = s;
      pts.mark = PlotSeries::Mark::markers;
      pts.in_legend = false;
      series.push_back(std::move(s));
      series.push_back(std::move(pts));
    }
  };
  add_groups(true);
  add_groups(false);
  series.push_back({"ideal (100%)", {lo, hi}, {100, 100}, PlotSeries::Mark::dashed, 6});
  const PlotSeries zero{"", {lo}, {0}, PlotSeries::Mark::none};  // the y axis from 0
  series.push_back(zero);
  const std::string t1 = "Scaling efficiency against GPUs (%)";
  std::vector<ReportFigure> out;
  out.push_back({"scaling-efficiency", t1,
                 svg_line_plot(t1, "efficiency (%)", series, 600, 300, "GPUs (ranks)")});

  const size_t base = order.front();
  const double base_tps = num(runs[base].summary, "tokens_per_sec", 0.0);
  PlotSeries measured{"measured (each run)", {}, {}, PlotSeries::Mark::markers, 0};
  PlotSeries linear{fmt::format("linear from run [{}]", base), {}, {}, PlotSeries::Mark::dashed, 6};
  for (size_t i : order) {
    measured.x.push_back(runs[i].world_size);
    measured.y.push_back(num(runs[i].summary, "tokens_per_sec"));
  }
  for (int s : sizes) linear.x.push_back(s), linear.y.push_back(base_tps * s / runs[base].world_size);
  const std::string t2 = "Throughput against GPUs (tokens/s, global)";
  out.push_back({"scaling-throughput", t2,
                 svg_line_plot(t2, "tokens/s (global)", {measured, linear, zero}, 600, 300, "GPUs (ranks)")});
  return out;
}

// ---- the page

std::string cell(const json& s, const char* key, const char* spec) {
  const double v = num(s, key);
  return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : "—";
}

std::string run_table(const std::vector<RunSummary>& runs) {
  std::string h =
      "<div class=\"scroll\"><table id=\"run-table\"><tr><th>#</th><th>run log</th><th>config</th><th>devices</th>"
      "<th>tokens/iter</th><th>ms/iter</th><th>tokens/s</th><th>TFLOP/s</th><th>MFU %</th><th>peak mem GB</th>"
      "<th>iterations</th><th>final loss</th><th>ended</th></tr>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    const auto& m = r.summary;
    h += fmt::format(
        "<tr><td>{}</td><td class=\"path\">{}</td><td class=\"label\">{}</td><td>{} × {}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"label\">{}</td></tr>\n",
        i, html_escape(r.path), html_escape(r.label), r.world_size, html_escape(r.device.empty() ? "?" : r.device),
        r.tokens_per_iter, cell(m, "mean_dt_ms", "{:.1f}"), cell(m, "tokens_per_sec", "{:.0f}"),
        cell(m, "achieved_tflops", "{:.3g}"), r.errors.empty() ? cell(m, "mfu", "{:.2f}") : "ERROR",
        cell(m, "memory_peak_gb", "{:.2f}"), cell(m, "iterations", "{:.0f}"), cell(m, "final_loss", "{:.4f}"),
        html_escape(r.ending()));
  }
  return h + "</table></div>\n";
}

std::string prediction_table(const std::vector<RunSummary>& runs, const std::vector<RunLogData>& logs) {
  std::string h =
      "<div class=\"scroll\"><table id=\"prediction-table\"><tr><th>#</th><th>predicted ms/iter</th>"
      "<th>measured ms/iter</th><th>measured / predicted</th></tr>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const double p = predicted_step_ms(logs[i]);
    const double m = num(runs[i].summary, "mean_dt_ms", -1.0);
    h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n", i,
                     p > 0 ? fmt::format("{:.1f}", p) : "none (the run log has no prediction)",
                     m > 0 ? fmt::format("{:.1f}", m) : "—", p > 0 && m > 0 ? fmt::format("{:.3f}", m / p) : "—");
  }
  return h + "</table></div>\n";
}

std::string stat(const std::string& what, const std::string& value, const std::string& detail) {
  return fmt::format("<div class=\"stat\"><small>{}</small><b>{}</b><small>{}</small></div>", html_escape(what),
                     html_escape(value), html_escape(detail));
}

// The run's headline: tokens/s, MFU, final losses, the step against its
// prediction, and the time the planned tokens (max_iters x tokens/iter) take.
std::string headline(const RunSummary& r, const RunLogData& log, size_t i, size_t n) {
  const auto& s = r.summary;
  std::string h = fmt::format("<div class=\"headline\" id=\"headline-{}\"><h3>{}{}, {} × {} ({})</h3><div class=\"stats\">",
                              i, html_escape(run_tag(i, n)), html_escape(r.label), r.world_size,
                              html_escape(r.device.empty() ? "?" : r.device), html_escape(r.ending()));
  const double tps = num(s, "tokens_per_sec");
  h += stat("throughput", std::isfinite(tps) ? fmt::format("{:.0f} tokens/s", tps) : "—",
            fmt::format("global; {:.0f} per device; after {} warm-up iterations", num(s, "tokens_per_sec_per_device", 0),
                        static_cast<int64_t>(num(s, "warmup_iters_skipped", 0))));
  const double mfu = num(s, "mfu");
  if (std::isfinite(mfu) && r.errors.empty())
    h += stat("MFU", fmt::format("{:.2f} %", mfu), fmt::format("{:.3g} TFLOP/s achieved", num(s, "achieved_tflops", 0)));
  else
    h += stat("MFU", "n/a", why_no_mfu(log, r));
  const json* last_eval = log.evals.empty() ? nullptr : &log.evals.back();
  const double train = last_eval ? num(*last_eval, "train_loss") : num(s, "final_loss");
  h += stat("final train loss", std::isfinite(train) ? fmt::format("{:.4f}", train) : "—",
            last_eval ? fmt::format("evaluated at iteration {:.0f}", num(*last_eval, "iter"))
                      : "last iteration's (no evaluation)");
  const double val = last_eval ? num(*last_eval, "val_loss") : kNaN;
  h += stat("final val loss", std::isfinite(val) ? fmt::format("{:.4f}", val) : "—",
            last_eval ? fmt::format("evaluated at iteration {:.0f}", num(*last_eval, "iter")) : "no evaluation ran");
  const double ms = num(s, "mean_dt_ms"), pred = predicted_step_ms(log);
  h += stat("step time", std::isfinite(ms) ? fmt_ms(ms) : "—",
            pred > 0 ? fmt::format("predicted {} ({:+.0f}%)", fmt_ms(pred), 100 * (ms / pred - 1)) : "no prediction");
  const double planned = num(log.config(), "max_iters", 0) * static_cast<double>(r.tokens_per_iter);
  h += stat(fmt::format("time to train the planned {} tokens", fmt_count(planned)),
            tps > 0 && planned > 0 ? fmt_duration(planned / tps) : "—",
            fmt::format("max_iters × {} tokens/iter at this throughput", r.tokens_per_iter));
  return h + "</div></div>\n";
}

constexpr const char* kStyle =
    "*{box-sizing:border-box}body{font-family:sans-serif;margin:24px;color:#222;background:#fff}"
    "h1{margin:0 0 4px}h2{margin:28px 0 8px;border-bottom:1px solid #ccc}h3{margin:12px 0 6px;font-size:1em}"
    ".scroll{overflow-x:auto;max-width:100%;margin:8px 0 16px}"
    "table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #bbb;padding:3px 6px;text-align:right;vertical-align:top}"
    "td.path{text-align:left;word-break:break-all;min-width:12em}td.label{text-align:left;overflow-wrap:anywhere;min-width:9em}"
    "th{background:#eee}"
    ".grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,520px),1fr));gap:16px 24px}"
    "figure{margin:0;min-width:0}figure svg{display:block;width:100%;height:auto}"
    ".stats{display:flex;flex-wrap:wrap;gap:10px}"
    ".stat{border:1px solid #ccc;border-radius:6px;padding:8px 12px;flex:1 1 170px;min-width:0;overflow-wrap:anywhere}"
    ".stat b{display:block;font-size:1.4em;margin:2px 0}.stat small{display:block;color:#555;font-size:.8em}"
    ".note{color:#555}.error{color:#b00;overflow-wrap:anywhere}";

std::string figure_html(const ReportFigure& f) {
  return fmt::format("<figure id=\"fig-{}\" aria-label=\"{}\">{}</figure>\n", f.id, html_escape(f.title), f.svg);
}

}  // namespace

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string svg_line_plot(const std::string& title, const std::string& y_label, const std::vector<PlotSeries>& series,
                          int width, int height, const std::string& x_label, const std::string& empty_text) {
  Frame f{70.0, 34.0, width - 16.0, height - 44.0, {}, {}};
  bool x_integer = true, any = false;
  for (const auto& s : series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) {
        f.x.add(s.x[i]), f.y.add(s.y[i]);
        x_integer = x_integer && s.x[i] == std::floor(s.x[i]);
        any = any || s.mark != PlotSeries::Mark::none;
      }
  if (!any) {
    const auto lines = wrap(empty_text, static_cast<size_t>((width - 40) / 6.8));
    std::string svg = svg_open(title, width, height);
    double y = height / 2.0 - 8.0 * static_cast<double>(lines.size() - 1);
    for (const auto& l : lines) svg += svg_text(width / 2.0, y, "middle", l, 12, R"( fill="#555")"), y += 17;
    return svg + "</svg>\n";
  }
  f.x.widen_if_flat();
  f.y.widen_if_flat();
  int rows = 0;
  const std::string legend = svg_legend(f.left, f.right, height + 4.0, series, &rows);
  std::string svg = svg_open(title, width, height + 16.0 * rows + (rows ? 6 : 0));
  svg += svg_axes(f, x_label, y_label, x_integer);
  for (size_t i = 0; i < series.size(); ++i)
    svg += svg_series(f, series[i], series[i].color >= 0 ? color(static_cast<size_t>(series[i].color)) : color(i));
  return svg + legend + "</svg>\n";
}

std::string svg_bar_chart(const std::string& title, const std::string& value_label,
                          const std::vector<std::string>& segment_names, const std::vector<BarRow>& rows, bool stacked,
                          const std::vector<std::string>& footer, int width) {
  const size_t nseg = segment_names.size();
  size_t label_chars = 4;
  for (const auto& r : rows) label_chars = std::max(label_chars, r.label.size());
  const double left = std::min(260.0, 14 + kCharPx * static_cast<double>(label_chars));
  const size_t fit = static_cast<size_t>((left - 14) / kCharPx + 0.5);  // longer labels end in "..."
  auto row_label = [fit](const std::string& l) { return l.size() <= fit ? l : l.substr(0, fit - 3) + "..."; };
  const double text_room = 110;  // the text after the longest bar
  Frame f{left, 34.0, width - 16.0 - text_room, 0, {}, {}};
  const double bar_h = stacked ? 22 : 12, row_h = stacked ? 32 : 12.0 * static_cast<double>(nseg) + 12;
  // Legend (segment names) under the title.
  std::vector<PlotSeries> keys;
  for (size_t k = 0; k < nseg; ++k) keys.push_back({segment_names[k], {}, {}, PlotSeries::Mark::line, static_cast<int>(k)});
  int legend_rows = 0;
  std::string legend = nseg > 1 ? svg_legend(f.left, width - 16.0, f.top + 8, keys, &legend_rows) : "";
  f.top += 16.0 * legend_rows + (legend_rows ? 4 : 0);
  f.bottom = f.top + row_h * static_cast<double>(rows.size());
  std::vector<std::vector<std::string>> foot;
  double foot_lines = 0;
  for (const auto& l : footer) foot.push_back(wrap(l, static_cast<size_t>((width - 24) / 6.4))), foot_lines += foot.back().size();
  const double height = f.bottom + 40 + 15 * foot_lines + 4;

  f.x.add(0);
  for (const auto& r : rows) {
    double sum = 0;
    for (double v : r.values) {
      if (!std::isfinite(v)) continue;
      if (stacked)
        sum += v;
      else
        f.x.add(v);
    }
    if (stacked) f.x.add(sum);
  }
  if (f.x.hi <= 0) f.x.hi = 1;  // nothing to draw: an axis from 0 all the same
  f.x.hi *= 1.05;
  f.y = {0, 1};
  std::string svg = svg_open(title, width, height);
  svg += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="none" stroke="#444"/>)", f.left,
                     f.top, f.right - f.left, f.bottom - f.top);
  for (double v : ticks(f.x))
    svg += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2:.1f}" stroke="#ddd"/>)", f.px(v), f.top,
                       f.bottom) +
           svg_text(f.px(v), f.bottom + 15, "middle", tick_label(v), 11);
  svg += svg_text((f.left + f.right) / 2, f.bottom + 32, "middle", value_label);
  for (size_t r = 0; r < rows.size(); ++r) {
    const double y0 = f.top + row_h * static_cast<double>(r) + 5;
    svg += svg_text(f.left - 6, y0 + (row_h - 10) / 2 + 4, "end", row_label(rows[r].label), 11);
    double x = 0, end = 0;
    for (size_t k = 0; k < rows[r].values.size() && k < std::max<size_t>(nseg, 1); ++k) {
      const double v = rows[r].values[k];
      if (!std::isfinite(v)) continue;
      const double y = stacked ? y0 : y0 + 12.0 * static_cast<double>(k);
      const double from = stacked ? x : 0, to = stacked ? x + v : v;
      svg += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.2f}" height="{:.1f}" fill="{}"><title>{}: {:.4g}</title></rect>)",
                         f.px(from), y, std::max(0.0, f.px(to) - f.px(from)), stacked ? bar_h : bar_h - 2,
                         nseg > 1 ? color(k) : color(0), html_escape(k < nseg ? segment_names[k] : ""), v);
      x = to;
      end = std::max(end, to);
    }
    if (!rows[r].text.empty())
      svg += svg_text(f.px(end) + 5, y0 + (row_h - 10) / 2 + 4, "start", rows[r].text, 11);
  }
  double y = f.bottom + 52;
  for (const auto& lines : foot)
    for (const auto& l : lines) svg += svg_text(12, y, "start", l, 11, R"( fill="#333")"), y += 15;
  return svg + legend + "</svg>\n";
}

double predicted_step_ms(const RunLogData& log) {
  const auto* p = log.startup({"prediction", "step_time_s"});  // docs/performance-model.md
  return p && p->is_number() ? p->get<double>() * 1e3 : -1.0;
}

double planned_memory_bytes(const RunLogData& log) {
  if (const json* p = log.startup({"memory", "plan_bytes"}); p && p->is_number()) return p->get<double>();
  try {
    Config c;
    for (const auto& [key, value] : log.config().items()) {
      if (key == "init_from" || !Config::has_key(key)) continue;  // hf:DIR's files are not needed: its keys are here
      try {
        c.set(key, value.is_string() ? value.get<std::string>() : value.is_boolean() ? (value.get<bool>() ? "True" : "False")
                                                                                     : value.dump());
      } catch (const std::exception&) {  // a key this build reads differently: the plan may still be made
      }
    }
    const double vocab = num(log.startup_info.value("model", json::object()), "vocab_size", 0.0);
    if (vocab <= 0) return -1.0;
    const ModelConfig m = ModelConfig::from_config(c, static_cast<int64_t>(vocab));
    const int64_t world = static_cast<int64_t>(num(log.config(), "world_size", 1.0));
    return estimate_memory(m, MemoryInputs::from_config(c, world), c.strategy()).total();
  } catch (const std::exception&) {
    return -1.0;
  }
}

std::vector<ReportFigure> report_figures(const std::vector<RunSummary>& runs, const std::vector<RunLogData>& logs) {
  std::vector<ReportFigure> out;
  for (size_t i = 0; i < runs.size(); ++i) out.push_back(phases_figure(runs[i], logs[i], i, runs.size()));
  out.push_back(loss_figure(runs, logs));
  out.push_back(lr_figure(runs, logs));
  out.push_back(noisy_figure("grad-norm", "Gradient norm before clipping (L2, dimensionless)", "gradient norm", runs,
                             logs, "grad_norm", "no grad_norm in these run logs"));
  out.push_back(noisy_figure("tokens-per-sec", "Throughput (tokens/s, global)", "tokens/s (global)", runs, logs,
                             "tokens_per_sec", "no tokens_per_sec in these run logs"));
  std::string no_mfu = "No MFU in these run logs.";
  if (!logs.empty()) no_mfu = "No MFU: " + why_no_mfu(logs.front(), runs.front());
  out.push_back(noisy_figure("mfu", "Model FLOPs utilization (MFU, % of the dense peak)", "MFU (%)", runs, logs, "mfu",
                             no_mfu));
  out.push_back(memory_figure(runs, logs));
  if (runs.size() > 1) {
    out.push_back(compare_figure("compare-tokens-per-sec", "Throughput per configuration (tokens/s, global)",
                                 "tokens/s (global)", runs, logs, "tokens_per_sec"));
    out.push_back(compare_figure("compare-mfu", "MFU per configuration (% of the dense peak)", "MFU (%)", runs, logs,
                                 "mfu"));
    for (auto& f : scaling_figures(runs)) out.push_back(std::move(f));
  }
  return out;
}

std::string format_html_report(const std::vector<RunSummary>& runs, const std::vector<RunLogData>& logs) {
  const auto figures = report_figures(runs, logs);
  auto section = [&figures](const std::string& prefix_or_id, bool prefix) {
    std::string h;
    for (const auto& f : figures)
      if (prefix ? f.id.rfind(prefix_or_id, 0) == 0 : f.id == prefix_or_id) h += figure_html(f);
    return h;
  };
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>llmtrain report</title>";
  h += fmt::format("<style>{}</style></head><body>\n<h1>llmtrain report</h1>\n<p class=\"note\">{} run log{}. "
                   "Figures after each run's warm-up iterations, as the text report. [i] is the run's row in the "
                   "run table.</p>\n",
                   kStyle, runs.size(), runs.size() == 1 ? "" : "s");
  h += "<section id=\"headline\">\n";
  for (size_t i = 0; i < runs.size(); ++i) h += headline(runs[i], logs[i], i, runs.size());
  h += "</section>\n<h2>Where the time went</h2>\n<div class=\"grid\">" + section("phases-", true) + "</div>\n";
  h += "<h2>Curves</h2>\n<div class=\"grid\">";
  for (const char* id : {"loss", "lr", "grad-norm", "tokens-per-sec", "mfu", "memory"}) h += section(id, false);
  h += "</div>\n";
  if (runs.size() > 1)
    h += "<h2>Runs side by side</h2>\n<div class=\"grid\">" + section("compare-", true) + section("scaling-", true) +
         "</div>\n";
  h += "<h2>Runs</h2>\n" + run_table(runs);
  h += "<h2>Predicted against measured</h2>\n" + prediction_table(runs, logs);
  for (size_t i = 0; i < runs.size(); ++i)
    for (const auto& e : runs[i].errors) h += fmt::format("<p class=\"error\">[{}] {}</p>\n", i, html_escape(e));
  return h + "</body></html>\n";
}

}  // namespace llmtrain
