// llmtrain-report: summary, comparison, token-budget and scaling tables over
// one or many run logs (out_dir/run_*.json); --html writes one self-contained
// page and --plot the same figures as SVG files, both drawn by
// record/html_report.hpp. Exit code 3 when a log fails the self-check.
#include <filesystem>
#include <fstream>
#include <iostream>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "llmtrain/core/atomic_file.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/record/html_report.hpp"
#include "llmtrain/record/profile_report.hpp"  // defines: run_profile_report (--profile)
#include "llmtrain/record/run_log.hpp"
#include "llmtrain/record/run_log_reader.hpp"
#include "llmtrain/record/run_report.hpp"

namespace fs = std::filesystem;
namespace po = boost::program_options;

int main(int argc, char** argv) try {
  std::vector<std::string> logs, profiles;
  int64_t warmup = -1;
  double budget = 85e9;
  std::string plot_dir, json_out, html_out;
  po::options_description opts(
      "usage: llmtrain-report RUN_LOG|DIR [...] [options]\n"
      "       llmtrain-report --profile TRACE|DIR [...] [--json FILE]\n"
      "Summarizes llmtrain run logs (out_dir/run_*.json); figures after warm-up iterations");
  opts.add_options()("help,h", "this help")(
      "warmup", po::value<int64_t>(&warmup)->default_value(-1),
      "the most iterations left out as warm-up: those before the step time settles, at most this many "
      "(-1 = each log's warmup_report_iters, default 50; 0 = average every iteration)")(
      "tokens", po::value<double>(&budget)->default_value(85e9, "85e9"),
      "token budget for the time-to-train table")("scaling", "print the weak/strong scaling table")(
      "plot", po::value<std::string>(&plot_dir),
      "write the page's figures as SVG files (<figure id>.svg: phases-<i>, loss, lr, grad-norm, tokens-per-sec, mfu, "
      "memory; with several runs compare-*, scaling-*) to this directory")(
      "html", po::value<std::string>(&html_out),
      "write one self-contained HTML page (headline, step phases measured vs predicted, curves, memory, runs side by "
      "side, tables) to this file")(
      "json", po::value<std::string>(&json_out), "also write the summaries as JSON to this file")(
      "profile", po::value<std::vector<std::string>>(&profiles)->multitoken(),
      "instead of run logs: per step of these profile_steps traces (files or out_dir/profile directories), the "
      "top-level ops by category, the host synchronizations and, from a GPU, kernel time by category");
  po::options_description hidden;
  hidden.add_options()("logs", po::value<std::vector<std::string>>(&logs));
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("logs", -1);
  po::variables_map vm;
  po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
  po::notify(vm);
  if (!profiles.empty() && !vm.count("help")) {  // --profile A B, --profile=A B: every file named is a trace
    profiles.insert(profiles.end(), logs.begin(), logs.end());
    return llmtrain::run_profile_report(profiles, json_out);
  }
  if (vm.count("help") || logs.empty()) {
    std::cout << opts << "\n";
    return logs.empty() && !vm.count("help") ? 2 : 0;
  }
  if (budget <= 0) throw llmtrain::Error(fmt::format("--tokens must be positive, got {}", budget));

  std::vector<llmtrain::RunSummary> runs;
  std::vector<llmtrain::RunLogData> datas;
  for (const auto& p : llmtrain::expand_run_logs(logs, /*recursive=*/false)) {
    datas.push_back(llmtrain::load_run_log(p));
    runs.push_back(llmtrain::summarize_run_log(datas.back(), warmup));
  }

  std::cout << "runs:\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& s = runs[i].summary;
    std::cout << fmt::format("  [{}] {}  ({}, {} x {}; {} iterations, first {} skipped as warm-up; {})\n", i,
                             runs[i].path, runs[i].label, runs[i].world_size,
                             runs[i].device.empty() ? "?" : runs[i].device, s.value("iterations", 0),
                             s.value("warmup_iters_skipped", 0), runs[i].ending());
  }
  std::cout << "\n" << llmtrain::format_comparison_table(runs) << "\n";
  if (const std::string t = llmtrain::format_prediction_table(runs); !t.empty())
    std::cout << "measured against predicted (docs/performance-model.md):\n" << t << "\n";
  std::cout << llmtrain::format_budget_table(runs, budget);
  if (vm.count("scaling")) std::cout << "\n" << llmtrain::format_scaling_table(runs);

  int rc = 0;
  for (const auto& r : runs) {
    if (r.errors.empty()) continue;
    rc = 3;
    std::cout << fmt::format("\nERRORS in {} ({}): its figures are not results\n", r.path, r.errors.size());
    size_t shown = 0;
    for (const auto& e : r.errors) {
      if (++shown > 10) {
        std::cout << fmt::format("  ... and {} more\n", r.errors.size() - 10);
        break;
      }
      std::cout << "  " << e << "\n";
    }
  }

  if (!html_out.empty()) {
    llmtrain::write_file_atomic(html_out, llmtrain::format_html_report(runs, datas));
    std::cout << "\nwrote " << html_out << "\n";
  }
  if (!plot_dir.empty()) {
    fs::create_directories(plot_dir);
    for (const auto& f : llmtrain::report_figures(runs, datas)) {
      const std::string path = (fs::path(plot_dir) / (f.id + ".svg")).string();
      llmtrain::write_file_atomic(path, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + f.svg);
      std::cout << "wrote " << path << "\n";
    }
  }
  if (!json_out.empty()) {
    nlohmann::json out;
    out["token_budget"] = budget;
    out["scaling"] = llmtrain::scaling_efficiency(runs);
    out["runs"] = nlohmann::json::array();
    for (const auto& r : runs) {
      nlohmann::json j = {{"path", r.path},           {"label", r.label},         {"world_size", r.world_size},
                          {"batch_size", r.batch_size}, {"grad_accum", r.grad_accum}, {"tokens_per_iter", r.tokens_per_iter},
                          {"device", r.device},       {"summary", r.summary},     {"errors", r.errors},
                          {"status", r.status},       {"last_iter", r.last_iter}};
      out["runs"].push_back(std::move(j));
    }
    llmtrain::write_file_atomic(json_out, out.dump(2) + "\n");
  }
  return rc;
} catch (const std::exception& e) {
  std::cerr << "llmtrain-report: error: " << e.what() << "\n";
  return 1;
}
