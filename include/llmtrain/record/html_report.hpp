// The figures of llmtrain-report, drawn once as SVG here: the page of --html
// embeds them, --plot writes the same SVGs to files (one plotting path, no
// matplotlib). The page is one self-contained file: no script, nothing
// fetched. User doc: docs/monitoring.md.
#pragma once
#include <string>
#include <vector>

#include "llmtrain/record/run_log_reader.hpp"
#include "llmtrain/record/run_report.hpp"

namespace llmtrain {

// One curve of a line plot.
struct PlotSeries {
  std::string label;
  std::vector<double> x, y;
  // dots: faint raw points under a smoothed line; dashed: a dashed line with a marker at each point;
  // markers: a marker at each point, no line; none: drawn as nothing, it only widens the axes.
  enum class Mark { line, dots, dashed, markers, none } mark = Mark::line;
  int color = -1;          // palette index; -1: the series' position
  bool in_legend = true;
};

// An SVG line plot (width x height px, plus its legend) with axes, ticks and
// units in the labels; an empty plot shows `empty_text` (wrapped) instead.
std::string svg_line_plot(const std::string& title, const std::string& y_label, const std::vector<PlotSeries>& series,
                          int width = 600, int height = 300, const std::string& x_label = "iteration",
                          const std::string& empty_text = "no data");

// One row of a horizontal bar chart: its segments (stacked, or side by side),
// a NaN segment drawn as nothing, and a text after the bar.
struct BarRow {
  std::string label;
  std::vector<double> values;
  std::string text;
};
// Horizontal bars over a value axis from 0; `footer` lines are written under the axis.
std::string svg_bar_chart(const std::string& title, const std::string& value_label,
                          const std::vector<std::string>& segment_names, const std::vector<BarRow>& rows, bool stacked,
                          const std::vector<std::string>& footer = {}, int width = 600);

// A figure of the report: `id` is the page element's id ("fig-" + id) and the
// --plot file name (id + ".svg"); `title` carries the units.
struct ReportFigure {
  std::string id, title, svg;
};
// Every figure for these runs (runs[i] summarizes logs[i]): per run the step's
// phases, measured beside predicted; the loss, learning rate, gradient norm,
// tokens/s, MFU and memory; with several runs tokens/s and MFU per
// configuration, and with several GPU counts the scaling efficiency.
std::vector<ReportFigure> report_figures(const std::vector<RunSummary>& runs, const std::vector<RunLogData>& logs);

// The predicted step time of a run in ms (startup_info.prediction.step_time_s), or a
// negative number when the log has none.
double predicted_step_ms(const RunLogData& log);

// The memory plan of a run: bytes per rank predicted by the memory model
// (prediction/memory_model.hpp, the start-up memory check's figure):
// startup_info.memory.plan_bytes where the run recorded it, else made here from
// the configuration its log records; negative when it cannot be made.
double planned_memory_bytes(const RunLogData& log);

// The page; runs[i] summarizes logs[i].
std::string format_html_report(const std::vector<RunSummary>& runs, const std::vector<RunLogData>& logs);

// &, <, >, " escaped.
std::string html_escape(const std::string& text);

}  // namespace llmtrain
