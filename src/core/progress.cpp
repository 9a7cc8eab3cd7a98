#include "llmtrain/core/progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "llmtrain/core/error.hpp"
#include "llmtrain/core/log.hpp"

namespace llmtrain {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--:--";
  auto s = static_cast<int64_t>(std::llround(seconds));
  const int64_t days = s / 86400;
  s %= 86400;
  std::string hms = fmt::format("{:02d}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
  return days > 0 ? fmt::format("{}d {}", days, hms) : hms;
}

ProgressBar::Mode ProgressBar::choose_mode(bool talks, bool stdout_is_tty,
                                           const std::function<const char*(const char*)>& getenv_fn) {
  if (!talks) return Mode::off;
  if (const char* v = getenv_fn("LLMTRAIN_PROGRESS")) {
    const std::string want = v;
    if (want == "terminal") return Mode::terminal;
    if (want == "file") return Mode::file;
    if (want == "off") return Mode::off;
    throw ConfigError(fmt::format("LLMTRAIN_PROGRESS = '{}' is not one of terminal, file, off", want));
  }
  if (!stdout_is_tty) return Mode::file;
  // A pty from a launcher says nothing about where the job's output ends up.
  for (const char* launcher : {"OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMIX_RANK", "SLURM_JOB_ID"})
    if (getenv_fn(launcher)) return Mode::file;
  return Mode::terminal;
}

ProgressBar::Mode ProgressBar::detect_mode() {
  return choose_mode(log::talks(), log::stdout_is_terminal(), [](const char* k) { return std::getenv(k); });
}

ProgressBar::ProgressBar(int64_t start_iter, int64_t end_iter, Mode mode, std::FILE* out, double file_interval_s,
                         int width, double long_step_s)
    : start_(start_iter),
      end_(std::max(start_iter, end_iter)),
      mode_(out ? mode : Mode::off),
      out_(out),
      file_interval_s_(file_interval_s),
      width_(std::max(width, 1)),
      t0_(std::chrono::steady_clock::now()),
      long_step_s_(long_step_s) {
  if (mode_ == Mode::terminal) ticker_ = std::thread([this] { tick_loop(); });
}

ProgressBar::~ProgressBar() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  // Leave the terminal on a fresh line; the final line is finish()'s job.
  if (mode_ == Mode::terminal && bar_visible_) write("\n");
}

void ProgressBar::step_started(int64_t iter) {
  std::lock_guard<std::mutex> lock(mu_);
  step_iter_ = iter;
  step_t0_ = std::chrono::steady_clock::now();
}

// Every second: a step in flight for long_step_s or more redraws the bar with its time.
void ProgressBar::tick_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!wake_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; })) {
    if (step_iter_ < 0 || finished_) continue;
    const auto now = std::chrono::steady_clock::now();
    const double step_s = std::chrono::duration<double>(now - step_t0_).count();
    if (step_s < long_step_s_) continue;
    const double elapsed = std::chrono::duration<double>(now - t0_).count();
    write("\r\033[K" + render_in_step(last_done_ >= 0 ? last_done_ : start_, elapsed, step_iter_, step_s));
    bar_visible_ = true;
  }
}

std::string ProgressBar::eta(int64_t done_iter) const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  const int64_t done = std::clamp<int64_t>(done_iter - start_, 0, end_ - start_);
  if (done >= end_ - start_) return format_duration(0.0);
  return format_duration(done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(end_ - start_ - done)
                                  : -1.0);
}

std::string ProgressBar::render_in_step(int64_t done_iter, double elapsed_s, int64_t iter, double step_s) const {
  return render(done_iter, elapsed_s) + fmt::format(" | iter {} running {}", iter, format_duration(step_s));
}

std::string ProgressBar::render(int64_t done_iter, double elapsed_s) const {
  const int64_t total = end_ - start_;
  const int64_t done = std::clamp<int64_t>(done_iter - start_, 0, total);
  const double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  const int filled = static_cast<int>(std::floor(frac * width_));
  const double its = (elapsed_s > 0 && done > 0) ? static_cast<double>(done) / elapsed_s : 0.0;
  const double eta = its > 0 ? static_cast<double>(total - done) / its : -1.0;
  return fmt::format("[{}{}] {}/{} {:.1f}% {:.2f} it/s elapsed {} ETA {}", std::string(filled, '#'),
                     std::string(width_ - filled, '-'), start_ + done, end_, 100.0 * frac, its,
                     format_duration(elapsed_s), format_duration(done >= total ? 0.0 : eta));
}

void ProgressBar::write(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), out_);
  std::fflush(out_);
}

void ProgressBar::update(int64_t done_iter) {
  update_at(done_iter, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
}

void ProgressBar::update_at(int64_t done_iter, double elapsed_s) {
  std::lock_guard<std::mutex> lock(mu_);
  step_iter_ = -1;
  if (mode_ == Mode::off || finished_) return;
  last_done_ = done_iter;
  last_elapsed_s_ = elapsed_s;
  if (mode_ == Mode::terminal) {
    // \r + clear-to-end-of-line: redraw in place.
    write("\r\033[K" + render(done_iter, elapsed_s));
    bar_visible_ = true;
    return;
  }
  // File (Slurm log): a plain line now and then, never control characters.
  if (elapsed_s - last_file_line_s_ >= file_interval_s_) {
    write("progress " + render(done_iter, elapsed_s) + "\n");
    last_file_line_s_ = elapsed_s;
  }
}

void ProgressBar::print_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (mode_ == Mode::off) return;
  if (mode_ == Mode::terminal && bar_visible_) {
    write("\r\033[K" + line + "\n");
    if (!finished_ && last_done_ >= 0) write(render(last_done_, last_elapsed_s_));
    return;
  }
  write(line + "\n");
}

void ProgressBar::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (mode_ == Mode::off || finished_) return;
  const int64_t done = last_done_ >= 0 ? last_done_ : start_;
  if (mode_ == Mode::terminal) {
    write("\r\033[K" + render(done, last_elapsed_s_) + "\n");
  } else {
    write("progress " + render(done, last_elapsed_s_) + "\n");
  }
  bar_visible_ = false;
  finished_ = true;
}

}  // namespace llmtrain
