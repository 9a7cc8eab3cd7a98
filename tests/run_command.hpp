// Runs a shell command for tests that drive the real binaries; header-only, no MPI.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace llmtrain::testing {

struct CommandResult {
  int rc = -1;      // exit status, -1 if it could not start or did not exit normally
  std::string out;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  std::FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace llmtrain::testing
