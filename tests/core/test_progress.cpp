// The progress bar: plain periodic lines when stdout is a file (Slurm), in-place
// redraws on a terminal.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <thread>

#include "llmtrain/core/error.hpp"
#include "llmtrain/core/progress.hpp"
#include "test_util.hpp"

using llmtrain::ProgressBar;

namespace {
std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}
int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}
}  // namespace

TEST(Progress, FileModeWritesPlainPeriodicLines) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar(0, 100, ProgressBar::Mode::file, f, /*file_interval_s=*/10.0, /*width=*/10);
    // One iteration per second for 100 s: a line at t = 1 (the first), 11, 21, ... 91.
    for (int i = 1; i <= 100; ++i) {
      bar.update_at(i, static_cast<double>(i));
      if (i == 50) bar.print_line("iter 50/100 | loss 2.0");
    }
    bar.finish();
    bar.finish();  // idempotent
  }
  const auto out = read_all(f);
  std::fclose(f);
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  EXPECT_EQ(out.find('\033'), std::string::npos) << out;
  EXPECT_EQ(count(out, "progress "), 11) << out;  // 10 periodic + the final one
  EXPECT_NE(out.find("iter 50/100 | loss 2.0\n"), std::string::npos);
  // t = 1 s, 1 it done: 1.00 it/s, 99 left -> ETA 00:01:39
  EXPECT_NE(out.find("[----------] 1/100 1.0% 1.00 it/s elapsed 00:00:01 ETA 00:01:39\n"), std::string::npos) << out;
  EXPECT_NE(out.find("[##########] 100/100 100.0% 1.00 it/s elapsed 00:01:40 ETA 00:00:00\n"), std::string::npos)
      << out;
  // Every line ends with a newline: nothing half-written for a log reader.
  EXPECT_EQ(out.back(), '\n');
}

TEST(Progress, TerminalModeRedrawsInPlace) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar(10, 20, ProgressBar::Mode::terminal, f, 10.0, 10);
    bar.update_at(11, 0.5);
    bar.update_at(12, 1.0);
    bar.print_line("log line");
    bar.finish();
  }
  const auto out = read_all(f);
  std::fclose(f);
  EXPECT_GE(count(out, "\r\033[K"), 3);
  // The log line is printed whole on its own line, then the bar comes back.
  EXPECT_NE(out.find("\r\033[Klog line\n[##--------] 12/20"), std::string::npos) << out;
  EXPECT_NE(out.find("2.00 it/s"), std::string::npos);
  EXPECT_EQ(out.back(), '\n');
}

TEST(Progress, OffWritesNothingAndDurationsFormat) {
  std::FILE* f = std::tmpfile();
  {
    ProgressBar bar(0, 10, ProgressBar::Mode::off, f);
    bar.update_at(5, 1.0);
    bar.print_line("x");
    bar.finish();
  }
  EXPECT_EQ(read_all(f), "");
  std::fclose(f);
  EXPECT_EQ(llmtrain::format_duration(3725), "01:02:05");
  EXPECT_EQ(llmtrain::format_duration(2 * 86400 + 61), "2d 00:01:01");
  EXPECT_EQ(llmtrain::format_duration(-1), "--:--:--");
}

TEST(Progress, ModeUnderLaunchersIsFile) {
  auto env = [](std::map<std::string, std::string> m) {
    return [m](const char* k) -> const char* {
      auto it = m.find(k);
      return it == m.end() ? nullptr : it->second.c_str();
    };
  };
  using M = ProgressBar::Mode;
  EXPECT_EQ(ProgressBar::choose_mode(false, true, env({})), M::off);       // not rank 0
  EXPECT_EQ(ProgressBar::choose_mode(true, false, env({})), M::file);      // redirected to a file
  EXPECT_EQ(ProgressBar::choose_mode(true, true, env({})), M::terminal);   // a shell on a terminal
  // mpirun gives ranks a pty even when its output goes to a file; so does an sbatch job's srun --pty.
  EXPECT_EQ(ProgressBar::choose_mode(true, true, env({{"OMPI_COMM_WORLD_SIZE", "2"}})), M::file);
  EXPECT_EQ(ProgressBar::choose_mode(true, true, env({{"SLURM_JOB_ID", "42"}})), M::file);
  EXPECT_EQ(ProgressBar::choose_mode(true, true, env({{"SLURM_JOB_ID", "42"}, {"LLMTRAIN_PROGRESS", "terminal"}})),
            M::terminal);
  EXPECT_EQ(ProgressBar::choose_mode(true, false, env({{"LLMTRAIN_PROGRESS", "off"}})), M::off);
  EXPECT_THROW(ProgressBar::choose_mode(true, false, env({{"LLMTRAIN_PROGRESS", "fancy"}})), llmtrain::ConfigError);
}

TEST(Progress, LongStepShowsItsTimeOnATerminal) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    // long_step_s = 0: the ticker redraws within a second of the step's start.
    ProgressBar bar(0, 10, ProgressBar::Mode::terminal, f, 10.0, 10, /*long_step_s=*/0.0);
    bar.update_at(3, 3.0);
    bar.step_started(3);
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    bar.update_at(4, 6.0);
    bar.finish();
  }
  const auto out = read_all(f);
  std::fclose(f);
  EXPECT_NE(out.find("3/10 30.0%"), std::string::npos) << out;
  EXPECT_NE(out.find(" | iter 3 running 00:00:0"), std::string::npos) << out;
  // Steps shorter than long_step_s, and files (Slurm), never get the ticker's line.
  std::FILE* g = std::tmpfile();
  {
    ProgressBar bar(0, 10, ProgressBar::Mode::file, g, 10.0, 10, 0.0);
    bar.step_started(0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    bar.update_at(1, 1.2);
  }
  EXPECT_EQ(read_all(g).find("running"), std::string::npos);
  std::fclose(g);
  ProgressBar quiet(0, 10, ProgressBar::Mode::off, nullptr);
  EXPECT_EQ(quiet.render_in_step(5, 10.0, 5, 7.0),
            quiet.render(5, 10.0) + " | iter 5 running 00:00:07");
  EXPECT_EQ(quiet.eta(10), "00:00:00");
  EXPECT_EQ(quiet.eta(0), "--:--:--");
}
