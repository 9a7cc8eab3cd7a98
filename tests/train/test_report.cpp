// llmtrain-report over the fixture logs in tests/train/fixtures (made by
// make_fixtures.py: every figure derived from dt_ms and tokens, except in
// run_inconsistent.json).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "run_command.hpp"
#include "llmtrain/record/html_report.hpp"
#include "llmtrain/record/run_log.hpp"
#include "llmtrain/record/run_report.hpp"
#include "llmtrain/record/tensorboard.hpp"
#include "test_util.hpp"

using namespace llmtrain;
namespace fs = std::filesystem;

namespace {
std::string fixture(const std::string& name) {
  return (fs::path(llmtrain::testing::source_dir()) / "tests/train/fixtures" / name).string();
}
using Result = llmtrain::testing::CommandResult;
inline Result run(const std::string& cmd) { return llmtrain::testing::run_command(cmd); }
std::string report_bin() { return (fs::path(llmtrain::testing::build_dir()) / "bin/llmtrain-report").string(); }
}  // namespace

TEST(Report, SummarySkipsWarmup) {
  // 100 iterations of 262144 tokens: 50 at 3 x 2621.44 ms, then 50 at 2621.44 ms.
  const auto r = read_run_log(fixture("run_1gpu.json"), -1);  // the log's warmup_report_iters = 50
  EXPECT_TRUE(r.errors.empty()) << r.errors[0];
  EXPECT_EQ(r.summary["warmup_iters_skipped"], 50);
  EXPECT_NEAR(r.summary["mean_dt_ms"].get<double>(), 2621.44, 1e-9);
  EXPECT_NEAR(r.summary["tokens_per_sec"].get<double>(), 100000.0, 1e-6);
  // 100,000 x 8,341,291,008 / 1e12 = 834.1291008 TFLOP/s; / 2250 = 37.0724045 %
  EXPECT_NEAR(r.summary["achieved_tflops"].get<double>(), 834.1291008, 1e-6);
  EXPECT_NEAR(r.summary["mfu"].get<double>(), 37.0724045, 1e-6);
  // No warm-up skipped: 100 x 262144 tokens / (50 x 7.86432 + 50 x 2.62144 s) = 50,000 tokens/s.
  const auto r0 = read_run_log(fixture("run_1gpu.json"), 0);
  EXPECT_NEAR(r0.summary["tokens_per_sec"].get<double>(), 50000.0, 1e-6);
}

TEST(Report, ComparisonBudgetAndScalingTables) {
  std::vector<RunSummary> runs;
  for (const char* f : {"run_8gpu_strong.json", "run_1gpu.json", "run_2gpu_weak.json"})
    runs.push_back(read_run_log(fixture(f), 50));
  const auto table = format_comparison_table(runs);
  EXPECT_NE(table.find("flash_attn_2+bfloat16+compile+dataloader"), std::string::npos) << table;
  EXPECT_NE(table.find("37.07"), std::string::npos) << table;   // 1-GPU MFU
  EXPECT_NE(table.find("700000"), std::string::npos) << table;  // 8-GPU tokens/s
  EXPECT_NE(table.find("87500"), std::string::npos) << table;   // 8-GPU tokens/s per GPU
  EXPECT_NE(table.find("2621.4"), std::string::npos) << table;  // 1-GPU ms/iter

  // 85B tokens at 100,000 tokens/s = 850,000 s = 236.1 h = 9.84 days;
  // at 700,000 tokens/s: 33.7 h = 1.41 days.
  const auto budget = format_budget_table(runs, 85e9);
  EXPECT_NE(budget.find("236.1"), std::string::npos) << budget;
  EXPECT_NE(budget.find("9.84"), std::string::npos) << budget;
  EXPECT_NE(budget.find("33.7"), std::string::npos) << budget;
  EXPECT_NE(budget.find("1.41"), std::string::npos) << budget;

  // Base = the 1-GPU run. 8 GPUs on the same 262144 tokens/iter: 374.49 ms vs
  // 2621.44 ms -> strong efficiency 2621.44 / (8 x 374.49) = 87.5 %.
  // 2 GPUs with the same 262144 tokens/iter per GPU: 93,750 vs 100,000 tokens/s
  // per GPU -> weak efficiency 93.75 %.
  const auto eff = scaling_efficiency(runs);
  ASSERT_EQ(eff.size(), 3u);
  EXPECT_NEAR(eff[0]["strong_efficiency"].get<double>(), 0.875, 1e-9);
  EXPECT_FALSE(eff[0].contains("weak_efficiency"));  // not comparable: absent, not null
  EXPECT_NEAR(eff[1]["strong_efficiency"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(eff[1]["weak_efficiency"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(eff[2]["weak_efficiency"].get<double>(), 0.9375, 1e-9);
  EXPECT_FALSE(eff[2].contains("strong_efficiency"));
  EXPECT_NEAR(eff[0]["speedup"].get<double>(), 7.0, 1e-9);
  const auto scaling = format_scaling_table(runs);
  EXPECT_NE(scaling.find("87.5"), std::string::npos) << scaling;
  EXPECT_NE(scaling.find("93.8"), std::string::npos) << scaling;
  // Sorted by GPUs: the 1-GPU line comes first.
  EXPECT_LT(scaling.find(" 1 "), scaling.find(" 8 ")) << scaling;
  // Exposed communication: the fixtures spend 5% of every iteration waiting on
  // collectives (communication_ms / dt_ms; 8 GPUs: 18.72 of 374.49 ms).
  EXPECT_NE(scaling.find("comm ms"), std::string::npos) << scaling;
  std::istringstream lines(scaling);
  int rows_with_comm = 0;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream f(line);
    std::vector<std::string> w{std::istream_iterator<std::string>(f), std::istream_iterator<std::string>()};
    if (w.size() >= 10 && (w[1] == "1" || w[1] == "2" || w[1] == "8")) {
      EXPECT_EQ(w.back(), "5.0") << line;
      if (w[1] == "8") EXPECT_EQ(w[w.size() - 2], "18.72") << line;
      ++rows_with_comm;
    }
  }
  EXPECT_EQ(rows_with_comm, 3) << scaling;
}

TEST(Report, SelfCheckFiresOnAnInconsistentLog) {
  const auto r = read_run_log(fixture("run_inconsistent.json"), 50);
  ASSERT_GE(r.errors.size(), 2u);
  bool mfu = false, tps = false;
  for (const auto& e : r.errors) {
    mfu |= e.find("iteration 55") != std::string::npos && e.find("exceeds 100%") != std::string::npos;
    tps |= e.find("iteration 56") != std::string::npos && e.find("tokens_per_sec") != std::string::npos;
  }
  EXPECT_TRUE(mfu);
  EXPECT_TRUE(tps);
  // The table shows no MFU figure for it.
  const auto table = format_comparison_table({r});
  EXPECT_NE(table.find("ERROR"), std::string::npos) << table;
}

// Issue 30, point 5: a log with no summary (killed by SIGKILL, a node lost) is
// not a finished run: the report says where it was cut off and gives it no
// time to train (its speed may be the warm-up's only).
TEST(Report, CutOffRunIsMarkedAndGetsNoTimeToTrain) {
  const auto cut = read_run_log(fixture("run_cut_off.json"), 50);
  EXPECT_TRUE(cut.cut_off());
  EXPECT_EQ(cut.last_iter, 29);
  EXPECT_EQ(cut.ending().rfind("cut off at iteration 29", 0), 0u) << cut.ending();
  const auto done = read_run_log(fixture("run_1gpu.json"), 50);
  EXPECT_FALSE(done.cut_off());
  EXPECT_EQ(done.ending(), "completed");
  const auto budget = format_budget_table({done, cut}, 85e9);
  EXPECT_NE(budget.find("236.1"), std::string::npos) << budget;  // the finished run: 85B at 100,000 tokens/s
  // tokens/s, hours and days are "-" for the cut-off run.
  EXPECT_TRUE(std::regex_search(budget, std::regex(R"(dataloader +1 +- +- +-  \(cut off at iteration 29 )")))
      << budget;
}

TEST(ReportTool, CutOffRunInTheRunsListAndBudget) {
  if (!fs::exists(report_bin())) GTEST_SKIP() << report_bin() << " not built";
  const auto r = run(report_bin() + " " + fixture("run_1gpu.json") + " " + fixture("run_cut_off.json"));
  EXPECT_EQ(r.rc, 0) << r.out;
  const auto runs = r.out.substr(0, r.out.find("time to train"));
  EXPECT_NE(runs.find("run_1gpu.json  (sdpa+bfloat16+compile+dataloader, 1 x NVIDIA B200; 100 iterations, first 50 "
                      "skipped as warm-up; completed)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(runs.find("30 iterations, first"), std::string::npos) << r.out;
  EXPECT_NE(runs.find("; cut off at iteration 29 (no summary"), std::string::npos) << r.out;
  const auto budget = r.out.substr(r.out.find("time to train"));
  EXPECT_NE(budget.find("-  (cut off at iteration 29"), std::string::npos) << budget;
}

// Issue 49: a run that ended in its start-up (a log with no iteration) is not
// "cut off at iteration -1" and its prediction row is not "-100.0% OFF".
TEST(Report, ALogWithNoIterationSaysSo) {
  const auto dir = llmtrain::testing::scratch_dir("metrics-report-no-iterations");
  std::ifstream in(fixture("run_1gpu.json"));
  nlohmann::json j = nlohmann::json::parse(in);
  j["training_iterations"] = nlohmann::json::array();
  j["eval_results"] = nlohmann::json::array();
  j["startup_info"]["prediction"] = {{"step_time_s", 0.5}, {"phases", {{"forward_backward_s", 0.4}}}};
  const auto cut_path = (dir / "run_no_iterations_cut.json").string();
  nlohmann::json cut = j;
  cut.erase("summary");
  std::ofstream(cut_path) << cut.dump();
  const auto r = read_run_log(cut_path, 50);
  EXPECT_EQ(r.ending(), "cut off before its first iteration (no summary: killed, a node lost, or still running)");
  const auto failed_path = (dir / "run_no_iterations_failed.json").string();
  j["summary"] = {{"status", "failed"}};
  std::ofstream(failed_path) << j.dump();
  const auto f = read_run_log(failed_path, 50);
  EXPECT_EQ(f.ending(), "failed before its first iteration");
  const std::string table = format_prediction_table({f});
  EXPECT_EQ(table.find("-100.0%"), std::string::npos) << table;
  EXPECT_EQ(table.find("OFF"), std::string::npos) << table;
  EXPECT_NE(table.find("no iteration measured"), std::string::npos) << table;
}

TEST(Report, BadLogsAreNamed) {
  const auto dir = llmtrain::testing::scratch_dir("metrics-report-bad");
  const auto p = (dir / "run_broken.json").string();
  std::ofstream(p) << "{\"startup_info\": {";
  try {
    read_run_log(p, 0);
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
  std::ofstream(p, std::ios::trunc) << "{\"summary\": {}}";
  try {
    read_run_log(p, 0);
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("startup_info"), std::string::npos) << e.what();
  }
}

TEST(ReportTool, TablesExitCodesAndPlots) {
  if (!fs::exists(report_bin())) GTEST_SKIP() << report_bin() << " not built";
  const auto good = run(report_bin() + " --scaling " + fixture("run_1gpu.json") + " " + fixture("run_8gpu_strong.json") +
                        " " + fixture("run_2gpu_weak.json") + " --tokens 85e9");
  EXPECT_EQ(good.rc, 0) << good.out;
  for (const char* want : {"MFU %", "37.07", "time to train 85B tokens", "236.1", "strong %", "87.5", "93.8"})
    EXPECT_NE(good.out.find(want), std::string::npos) << want << "\n" << good.out;

  const auto bad = run(report_bin() + " " + fixture("run_inconsistent.json"));
  EXPECT_EQ(bad.rc, 3) << bad.out;
  EXPECT_NE(bad.out.find("ERRORS in"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("exceeds 100%"), std::string::npos) << bad.out;

  const auto missing = run(report_bin() + " /nonexistent/run_x.json");
  EXPECT_EQ(missing.rc, 1);
  EXPECT_NE(missing.out.find("/nonexistent/run_x.json"), std::string::npos) << missing.out;

  // --plot: the page's own figures as SVG files (one plotting path).
  const auto out = llmtrain::testing::scratch_dir("metrics-report-plots");
  fs::remove_all(out);
  const auto plots = run(report_bin() + " " + fixture("run_1gpu.json") + " " + fixture("run_8gpu_strong.json") + " " +
                         fixture("run_2gpu_weak.json") + " --plot " + out.string());
  EXPECT_EQ(plots.rc, 0) << plots.out;
  for (const char* svg : {"phases-0.svg", "phases-2.svg", "loss.svg", "lr.svg", "grad-norm.svg", "tokens-per-sec.svg",
                          "mfu.svg", "memory.svg", "compare-tokens-per-sec.svg", "compare-mfu.svg",
                          "scaling-efficiency.svg", "scaling-throughput.svg"}) {
    ASSERT_TRUE(fs::exists(out / svg)) << svg << "\n" << plots.out;
    std::ifstream f(out / svg);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.rfind("<?xml", 0), 0u) << svg;
    EXPECT_NE(text.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos) << svg;
    EXPECT_NE(text.find("</svg>"), std::string::npos) << svg;
    // The same figure as the page's.
    std::vector<RunLogData> logs;
    std::vector<RunSummary> runs;
    for (const char* fx : {"run_1gpu.json", "run_8gpu_strong.json", "run_2gpu_weak.json"}) {
      logs.push_back(load_run_log(fixture(fx)));
      runs.push_back(summarize_run_log(logs.back(), -1));
    }
    bool same = false;
    for (const auto& fig : report_figures(runs, logs))
      if (fig.id + ".svg" == std::string(svg)) same = text.find(fig.svg) != std::string::npos;
    EXPECT_TRUE(same) << svg << " differs from report_figures()'s";
  }
}

// ---- TensorBoard event files (tests/train/test_monitoring.py reads them with TensorBoard's own reader)

TEST(TensorBoard, Crc32cKnownValues) {
  // RFC 3720 B.4 and the usual check value of CRC-32C.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xA282EAD8u);
}

TEST(TensorBoard, RecordsAreFramedAndChecksummed) {
  const auto dir = llmtrain::testing::scratch_dir("tensorboard-records");
  fs::remove_all(dir);
  std::string path;
  {
    EventFileWriter w(dir.string());
    w.add_scalar("loss/train", 7, 2.5);
    w.add_text("config", 0, "block_size: 64");
    w.flush();
    path = w.path();
  }
  EXPECT_NE(fs::path(path).filename().string().find("events.out.tfevents."), std::string::npos);
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  for (size_t at = 0; at < bytes.size();) {
    ASSERT_LE(at + 12, bytes.size());
    uint64_t n;
    uint32_t len_crc, data_crc;
    std::memcpy(&n, bytes.data() + at, 8);
    std::memcpy(&len_crc, bytes.data() + at + 8, 4);
    ASSERT_EQ(len_crc, masked_crc32c(bytes.data() + at, 8));
    ASSERT_LE(at + 16 + n, bytes.size());
    std::memcpy(&data_crc, bytes.data() + at + 12 + n, 4);
    ASSERT_EQ(data_crc, masked_crc32c(bytes.data() + at + 12, n));
    records.push_back(bytes.substr(at + 12, n));
    at += 16 + n;
  }
  ASSERT_EQ(records.size(), 3u);  // file_version, the scalar, the text
  EXPECT_NE(records[0].find("brain.Event:2"), std::string::npos);
  const float v = 2.5f;
  EXPECT_NE(records[1].find("loss/train"), std::string::npos);
  EXPECT_NE(records[1].find(std::string("\x15") + std::string(reinterpret_cast<const char*>(&v), 4)), std::string::npos);
  EXPECT_NE(records[2].find("block_size: 64"), std::string::npos);
  EXPECT_NE(records[2].find("text"), std::string::npos);
}

TEST(TensorBoard, UnwritableDirectoryIsNamed) {
  try {
    EventFileWriter w("/proc/llmtrain-no-such-dir/tb");
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("tensorboard_dir '/proc/llmtrain-no-such-dir/tb'"), std::string::npos)
        << e.what();
  }
}

// ---- llmtrain-report --html (tests/train/test_monitoring.py opens it in headless Chromium)

TEST(HtmlReport, PageHoldsTablesAndPlotsAndNothingExternal) {
  std::vector<RunLogData> logs;
  std::vector<RunSummary> runs;
  for (const char* f : {"run_1gpu.json", "run_8gpu_strong.json"}) {
    logs.push_back(load_run_log(fixture(f)));
    runs.push_back(summarize_run_log(logs.back(), -1));
  }
  logs[1].startup_info["prediction"] = {
      {"step_time_s", 1.0},
      {"phases", {{"data_s", 0.0}, {"forward_backward_s", 0.9}, {"communication_s", 0.05}, {"optimizer_s", 0.05}}}};
  const std::string page = format_html_report(runs, logs);
  // Every figure of the page is one of report_figures(), at its id.
  const auto figures = report_figures(runs, logs);
  std::vector<std::string> ids;
  for (const auto& f : figures) {
    ids.push_back(f.id);
    EXPECT_NE(page.find("<figure id=\"fig-" + f.id + "\""), std::string::npos) << f.id;
    EXPECT_NE(page.find(f.svg), std::string::npos) << f.id;
    EXPECT_TRUE(std::regex_search(f.title, std::regex(R"(\(.+\))"))) << "no units in the title: " << f.title;
  }
  // 1 and 8 GPUs: the scaling figures are drawn.
  for (const char* id : {"phases-0", "phases-1", "loss", "lr", "grad-norm", "tokens-per-sec", "mfu", "memory",
                         "compare-tokens-per-sec", "compare-mfu", "scaling-efficiency", "scaling-throughput"})
    EXPECT_NE(std::find(ids.begin(), ids.end(), id), ids.end()) << id;
  size_t svgs = 0;
  for (size_t at = page.find("<svg"); at != std::string::npos; at = page.find("<svg", at + 1)) ++svgs;
  EXPECT_EQ(svgs, figures.size());
  EXPECT_NE(page.find("<polyline"), std::string::npos);
  EXPECT_NE(page.find("37.07"), std::string::npos);  // run_1gpu's MFU, as the text table
  EXPECT_NE(page.find("none (the run log has no prediction)"), std::string::npos);
  EXPECT_NE(page.find("<td>1000.0</td>"), std::string::npos);
  // run 1's phases: about 300 ms of forward/backward measured against the 900 ms predicted.
  const auto& ph1 = figures[1].svg;
  EXPECT_NE(ph1.find("Largest miss: forward/backward"), std::string::npos) << ph1;
  EXPECT_NE(figures[0].svg.find("No prediction in this run log"), std::string::npos);
  for (const char* external : {"<script", "src=", "href=", "@import", "url("})
    EXPECT_EQ(page.find(external), std::string::npos) << external;
  EXPECT_NE(svg_line_plot("t (u)", "y", {}, 600, 300, "iteration", "nothing to draw").find("nothing to draw"),
            std::string::npos);
  EXPECT_EQ(html_escape("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
}

TEST(HtmlReport, MfuPlotSaysWhyThereIsNone) {
  auto log = load_run_log(fixture("run_1gpu.json"));
  for (auto& rec : log.iterations) rec.erase("mfu");
  log.startup_info["absent_keys"] = {{"training_iterations[].mfu", "MFU needs the device's dense peak (cpu)"}};
  const auto run = summarize_run_log(log, -1);
  bool found = false;
  for (const auto& f : report_figures({run}, {log})) {
    if (f.id != "mfu") continue;
    found = true;
    EXPECT_NE(f.svg.find("No MFU: MFU needs the device"), std::string::npos) << f.svg;
    EXPECT_EQ(f.svg.find("<circle"), std::string::npos) << "an MFU figure without MFU values draws points";
  }
  EXPECT_TRUE(found);
}

TEST(ReportTool, HtmlPage) {
  if (!fs::exists(report_bin())) GTEST_SKIP() << report_bin() << " not built";
  const auto out = llmtrain::testing::scratch_dir("metrics-report-html") / "report.html";
  fs::remove_all(out.parent_path());
  fs::create_directories(out.parent_path());
  const auto r = run(report_bin() + " " + fixture("run_1gpu.json") + " --html " + out.string());
  EXPECT_EQ(r.rc, 0) << r.out;
  ASSERT_TRUE(fs::exists(out)) << r.out;
  std::ifstream f(out);
  const std::string page((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("</html>"), std::string::npos);
}
