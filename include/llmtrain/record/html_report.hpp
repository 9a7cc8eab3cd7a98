// llmtrain-report --html: one self-contained page (no script, no network): the
// run table, predicted against measured step time, and the loss, MFU and
// tokens/s curves as inline SVG drawn here. User doc: docs/monitoring.md.
#pragma once
#include <string>
#include <vector>

#include "llmtrain/record/run_log_reader.hpp"
#include "llmtrain/record/run_report.hpp"

namespace llmtrain {

// One curve of a plot.
struct PlotSeries {
  std::string label;
  std::vector<double> x, y;
};

// An SVG line plot (width x height px) with axes, ticks and a legend; an empty
// plot says "no data".
std::string svg_line_plot(const std::string& title, const std::string& y_label,
                          const std::vector<PlotSeries>& series, int width = 720, int height = 320);

// The predicted step time of a run in ms (startup_info.prediction.step_ms), or a
// negative number when the log has none.
double predicted_step_ms(const RunLogData& log);

// The page; runs[i] summarizes logs[i].
std::string format_html_report(const std::vector<RunSummary>& runs, const std::vector<RunLogData>& logs);

// &, <, >, " escaped.
std::string html_escape(const std::string& text);

}  // namespace llmtrain
