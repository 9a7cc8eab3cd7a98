// Progress bar with it/s and ETA: redrawn in place on a terminal, plain
// periodic lines when stdout is a file (as under Slurm), silent off rank 0.
// On a terminal, a step that runs `long_step_s` or more shows its running time
// inside the step (a ticker thread redraws the bar every second).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace llmtrain {

class ProgressBar {
 public:
  enum class Mode { terminal, file, off };
  // off on ranks other than 0. LLMTRAIN_PROGRESS=terminal|file|off wins. Else
  // terminal only if stdout is a tty AND the process was not started by an MPI
  // launcher or inside a Slurm job: Open MPI's mpirun hands every rank a pty even
  // when its own output goes to a file, so isatty() cannot be trusted there.
  static Mode detect_mode();
  static Mode choose_mode(bool talks, bool stdout_is_tty, const std::function<const char*(const char*)>& getenv_fn);

  // Iterations [start_iter, end_iter). In file mode a line is written at most
  // every `file_interval_s` seconds (and at the end).
  ProgressBar(int64_t start_iter, int64_t end_iter, Mode mode, std::FILE* out = stdout,
              double file_interval_s = 30.0, int width = 30, double long_step_s = 5.0);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Iteration `iter` starts now (terminal mode: the ticker times it; update() ends it).
  void step_started(int64_t iter);
  // "00:26:14": the time left at the wall clock's rate so far (the log_interval line's ETA).
  std::string eta(int64_t done_iter) const;
  // The bar with a step in flight: render(...) + " | iter 12 running 00:00:07".
  std::string render_in_step(int64_t done_iter, double elapsed_s, int64_t iter, double step_s) const;

  // `done_iter` iterations completed (absolute index + 1). Uses the wall clock.
  void update(int64_t done_iter);
  // Same, with the seconds since construction given (tests).
  void update_at(int64_t done_iter, double elapsed_s);
  // Prints a full line (the log_interval line) without tearing the bar:
  // clears it, prints, redraws. Works in every mode (off: prints nothing).
  void print_line(const std::string& line);
  // Final state line; idempotent.
  void finish();

  // The bar text for a state, e.g. "[#####-----] 120/5000 2.4% 3.10 it/s ETA 00:26:14".
  std::string render(int64_t done_iter, double elapsed_s) const;
  Mode mode() const { return mode_; }

 private:
  void write(const std::string& s);
  void tick_loop();
  int64_t start_, end_;
  Mode mode_;
  std::FILE* out_;
  double file_interval_s_;
  int width_;
  std::chrono::steady_clock::time_point t0_;
  double last_file_line_s_ = -1e300;
  int64_t last_done_ = -1;
  double last_elapsed_s_ = 0.0;
  bool bar_visible_ = false;
  bool finished_ = false;
  // Terminal mode: the ticker thread and the step it times (under mu_).
  double long_step_s_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  int64_t step_iter_ = -1;  // -1: no step in flight
  std::chrono::steady_clock::time_point step_t0_{};
  std::thread ticker_;
};

// "01:02:03" (or "3d 01:02:03"); "--:--:--" for a non-finite or negative value.
std::string format_duration(double seconds);

}  // namespace llmtrain
