// llmtrain-report --html: the page and its SVG plots, with no script and
// nothing fetched (fonts, styles and plots are all in the one file).
#include "llmtrain/record/html_report.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace llmtrain {
namespace {

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

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

// About five round tick values (1, 2 or 5 times a power of ten apart) in [lo, hi].
std::vector<double> ticks(const Range& r) {
  const double raw = (r.hi - r.lo) / 5.0;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / p < 1.5 ? p : raw / p < 3.5 ? 2 * p : raw / p < 7.5 ? 5 * p : 10 * p;
  std::vector<double> t;
  for (double v = std::ceil(r.lo / step) * step; v <= r.hi + step * 1e-9; v += step) t.push_back(v);
  return t;
}

std::string svg_text(double x, double y, const std::string& anchor, const std::string& text, int size = 12) {
  return fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="{}" font-size="{}">{}</text>)", x, y, anchor, size,
                     html_escape(text));
}

struct Frame {  // the plot area inside the margins, and the data ranges it maps
  double left, top, right, bottom;
  Range x, y;
  double px(double v) const { return left + (v - x.lo) / (x.hi - x.lo) * (right - left); }
  double py(double v) const { return bottom - (v - y.lo) / (y.hi - y.lo) * (bottom - top); }
};

std::string svg_axes(const Frame& f, const std::string& y_label) {
  std::string s = fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="none" stroke="#444"/>)",
                              f.left, f.top, f.right - f.left, f.bottom - f.top);
  for (double v : ticks(f.x))
    s += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2:.1f}" stroke="#ddd"/>)", f.px(v), f.top,
                     f.bottom) +
         svg_text(f.px(v), f.bottom + 16, "middle", fmt::format("{:.6g}", v));
  for (double v : ticks(f.y))
    s += fmt::format(R"(<line x1="{1:.1f}" y1="{0:.1f}" x2="{2:.1f}" y2="{0:.1f}" stroke="#ddd"/>)", f.py(v), f.left,
                     f.right) +
         svg_text(f.left - 6, f.py(v) + 4, "end", fmt::format("{:.4g}", v));
  s += svg_text((f.left + f.right) / 2, f.bottom + 36, "middle", "iteration");
  s += fmt::format(R"~(<text transform="translate(14,{:.1f}) rotate(-90)" text-anchor="middle" font-size="12">{}</text>)~",
                   (f.top + f.bottom) / 2, html_escape(y_label));
  return s;
}

std::string svg_series(const Frame& f, const PlotSeries& s, const char* color) {
  std::string points;
  for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
    if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) points += fmt::format("{:.1f},{:.1f} ", f.px(s.x[i]), f.py(s.y[i]));
  return fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"/>)", color, points);
}

std::string svg_legend(const Frame& f, const std::vector<PlotSeries>& series) {
  std::string s;
  for (size_t i = 0; i < series.size(); ++i) {
    const double y = f.top + 14 + 16 * static_cast<double>(i);
    s += fmt::format(R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}" stroke-width="3"/>)",
                     f.right - 150, y - 4, f.right - 130, y - 4, kColors[i % std::size(kColors)]);
    s += svg_text(f.right - 126, y, "start", series[i].label, 11);
  }
  return s;
}

std::string cell(const nlohmann::json& s, const char* key, const char* spec) {
  const auto it = s.find(key);
  return it != s.end() && it->is_number() ? fmt::format(fmt::runtime(spec), it->get<double>()) : "—";
}

std::string run_table(const std::vector<RunSummary>& runs) {
  std::string h =
      "<table><tr><th>#</th><th>run</th><th>config</th><th>devices</th><th>tokens/iter</th><th>ms/iter</th>"
      "<th>tokens/s</th><th>TFLOP/s</th><th>MFU %</th><th>peak mem GB</th><th>iterations</th><th>final loss</th>"
      "</tr>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    const auto& m = r.summary;
    h += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{} × {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td></tr>\n",
        i, html_escape(r.path), html_escape(r.label), r.world_size, html_escape(r.device.empty() ? "?" : r.device),
        r.tokens_per_iter, cell(m, "mean_dt_ms", "{:.1f}"), cell(m, "tokens_per_sec", "{:.0f}"),
        cell(m, "achieved_tflops", "{:.3g}"), r.errors.empty() ? cell(m, "mfu", "{:.2f}") : "ERROR",
        cell(m, "memory_peak_gb", "{:.2f}"), cell(m, "iterations", "{:.0f}"), cell(m, "final_loss", "{:.4f}"));
  }
  return h + "</table>\n";
}

std::string prediction_table(const std::vector<RunSummary>& runs, const std::vector<RunLogData>& logs) {
  std::string h = "<table><tr><th>#</th><th>predicted ms/iter</th><th>measured ms/iter</th><th>measured / predicted</th></tr>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const double p = predicted_step_ms(logs[i]);
    const auto it = runs[i].summary.find("mean_dt_ms");
    const double m = it != runs[i].summary.end() && it->is_number() ? it->get<double>() : -1.0;
    h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n", i,
                     p > 0 ? fmt::format("{:.1f}", p) : "none (the run log has no prediction)",
                     m > 0 ? fmt::format("{:.1f}", m) : "—", p > 0 && m > 0 ? fmt::format("{:.3f}", m / p) : "—");
  }
  return h + "</table>\n";
}

// One curve per run of training_iterations[].key.
std::vector<PlotSeries> curves(const std::vector<RunLogData>& logs, const char* key) {
  std::vector<PlotSeries> out;
  for (size_t i = 0; i < logs.size(); ++i) {
    PlotSeries s{fmt::format("[{}]", i), {}, {}};
    for (const auto& rec : logs[i].iterations) {
      const auto it = rec.find(key);
      if (it == rec.end() || !it->is_number() || !rec.contains("iter")) continue;
      s.x.push_back(rec["iter"].get<double>());
      s.y.push_back(it->get<double>());
    }
    out.push_back(std::move(s));
  }
  return out;
}

constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:24px;color:#222;background:#fff}"
    "table{border-collapse:collapse;margin:8px 0 24px}td,th{border:1px solid #bbb;padding:4px 8px;text-align:right}"
    "td:nth-child(2),td:nth-child(3){text-align:left}th{background:#eee}svg{display:block;margin:8px 0 24px}";

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
                          int width, int height) {
  Frame f{70.0, 30.0, width - 20.0, height - 45.0, {}, {}};
  for (const auto& s : series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) f.x.add(s.x[i]), f.y.add(s.y[i]);
  std::string svg = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" viewBox="0 0 {0} {1}" role="img">)", width,
      height);
  svg += svg_text(width / 2.0, 18, "middle", title, 14);
  if (f.x.empty()) return svg + svg_text(width / 2.0, height / 2.0, "middle", "no data") + "</svg>\n";
  f.x.widen_if_flat();
  f.y.widen_if_flat();
  svg += svg_axes(f, y_label);
  for (size_t i = 0; i < series.size(); ++i) svg += svg_series(f, series[i], kColors[i % std::size(kColors)]);
  return svg + svg_legend(f, series) + "</svg>\n";
}

double predicted_step_ms(const RunLogData& log) {
  const auto* p = log.startup({"prediction", "step_time_s"});  // docs/performance-model.md
  return p && p->is_number() ? p->get<double>() * 1e3 : -1.0;
}

std::string format_html_report(const std::vector<RunSummary>& runs, const std::vector<RunLogData>& logs) {
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>llmtrain report</title>";
  h += fmt::format("<style>{}</style></head><body>\n<h1>llmtrain report</h1>\n<h2>Runs</h2>\n", kStyle);
  h += run_table(runs);
  h += "<h2>Predicted against measured</h2>\n" + prediction_table(runs, logs);
  h += "<h2>Curves</h2>\n";
  h += svg_line_plot("training loss", "loss", curves(logs, "loss"));
  h += svg_line_plot("model FLOPs utilization", "MFU (%)", curves(logs, "mfu"));
  h += svg_line_plot("throughput", "tokens/s (global)", curves(logs, "tokens_per_sec"));
  for (size_t i = 0; i < runs.size(); ++i)
    for (const auto& e : runs[i].errors)
      h += fmt::format("<p class=\"error\">[{}] {}</p>\n", i, html_escape(e));
  return h + "</body></html>\n";
}

}  // namespace llmtrain
