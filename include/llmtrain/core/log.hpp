// Rank-0 console output. Non-root ranks get a logger that prints nothing
// (except errors and warn_all), so the training loop never tests the rank.
#pragma once
#include <string>

#include <fmt/format.h>

namespace llmtrain::log {

// Set once by Runtime: which rank this is and whether it talks.
void set_rank(int rank, bool talks);
int rank();
bool talks();
bool stdout_is_terminal();

void write_line(const std::string& line);          // rank 0 only, to stdout
void write_err_all(const std::string& line);       // every rank, prefixed "[rank r]", to stderr

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (talks()) write_line(fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (talks()) write_line("warning: " + fmt::format(f, std::forward<Args>(args)...));
}
// Every rank, for things that differ between ranks.
template <typename... Args>
void warn_all(fmt::format_string<Args...> f, Args&&... args) {
  write_err_all("warning: " + fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace llmtrain::log
