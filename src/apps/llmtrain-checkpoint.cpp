// llmtrain-checkpoint verify PATH: checks checkpoints without training (one
// process, no MPI launch): every ckpt_*.h5 of PATH (a run's out_dir, its
// checkpoints/ directory, or one file), newest first: the header, the
// counters in range, every dataset read whole against its crc32c
// (docs/checkpoint-format.md). Exit 0 when every file is sound, 1 when one is
// not, 2 on a usage error.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "llmtrain/checkpoint/checkpoint.hpp"

namespace fs = std::filesystem;

namespace {

constexpr const char* kUsage =
    "usage: llmtrain-checkpoint verify PATH\n"
    "  PATH: a run's out_dir, its checkpoints/ directory, or one checkpoint file\n";

// The files to check, newest first (a directory named like one too: it is reported),
// the name `latest` points to ("" if none) and the directory that holds them.
std::vector<fs::path> checkpoint_files(const fs::path& path, std::string& latest, fs::path& dir_out) {
  if (fs::is_regular_file(path)) return {path};
  const fs::path dir = fs::is_directory(path / "checkpoints") ? path / "checkpoints" : path;
  dir_out = dir;
  std::ifstream(dir / "latest") >> latest;
  std::vector<fs::path> out;
  const std::regex name(R"(ckpt_\d{8,}\.h5)");
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (std::regex_match(e.path().filename().string(), name)) out.push_back(e.path());
  std::sort(out.rbegin(), out.rend());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::string(argv[1]) != "verify") {
    std::cerr << kUsage;
    return 2;
  }
  std::string latest;
  fs::path dir;
  const auto files = checkpoint_files(argv[2], latest, dir);
  if (files.empty()) {
    std::cerr << fmt::format("llmtrain-checkpoint: no checkpoint (ckpt_*.h5) in '{}'\n", argv[2]);
    return 1;
  }
  int bad = 0;
  for (const auto& f : files) {
    std::vector<std::string> notes;
    const auto problems = llmtrain::verify_checkpoint_file(f.string(), notes);
    const std::string tag = f.filename().string() == latest ? " (latest)" : "";
    if (problems.empty()) {
      std::cout << fmt::format("ok   {}{}: {}\n", f.string(), tag, notes.empty() ? "" : notes.back());
      continue;
    }
    ++bad;
    for (const auto& p : problems) std::cout << fmt::format("BAD  {}{}: {}\n", f.string(), tag, p);
  }
  // `latest` must name one of this directory's checkpoints: a resume loads what it
  // names, so a name elsewhere (../other_run/ckpt_...h5, an absolute path) or of a
  // file that is not there is a fault of the directory.
  bool latest_bad = false;
  if (!latest.empty()) {
    const bool listed = std::any_of(files.begin(), files.end(),
                                    [&](const fs::path& f) { return f.filename().string() == latest; });
    if (!listed || latest.find('/') != std::string::npos) {
      latest_bad = true;
      std::cout << fmt::format("BAD  {}: points to '{}', which is not a checkpoint file of '{}'\n",
                               (dir / "latest").string(), latest, dir.string());
    }
  }
  std::cout << fmt::format("{} of {} checkpoint(s) sound{}\n", files.size() - bad, files.size(),
                           latest_bad ? "; `latest` is not" : "");
  return bad || latest_bad ? 1 : 0;
}
