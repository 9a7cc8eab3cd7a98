#include "llmtrain/core/log.hpp"

#include <unistd.h>

#include <cstdio>
#include <mutex>

namespace llmtrain::log {
namespace {
int g_rank = 0;
bool g_talks = true;
std::mutex g_mutex;
}  // namespace

void set_rank(int rank, bool talks) {
  g_rank = rank;
  g_talks = talks;
}
int rank() { return g_rank; }
bool talks() { return g_talks; }
bool stdout_is_terminal() { return isatty(fileno(stdout)) != 0; }

void write_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void write_err_all(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "[rank %d] %s\n", g_rank, line.c_str());
  std::fflush(stderr);
}

}  // namespace llmtrain::log
