// The one atomic writer (core/atomic_file.hpp) on a full disk (issue 19, part 3):
// the error names the file and the OS's reason, the old content survives, and no
// temporary file is left. A small tmpfs is mounted for it (root; skipped where
// mounting is not allowed).
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "llmtrain/core/atomic_file.hpp"
#include "llmtrain/core/error.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

namespace {
std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
size_t entries(const fs::path& d) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(d)) ++n;
  return n;
}
}  // namespace

TEST(AtomicFile, WritesAndReplaces) {
  const auto dir = llmtrain::testing::scratch_dir("atomic_file");
  const auto f = dir / "x.json";
  fs::remove(f);
  llmtrain::write_file_atomic(f, "one");
  llmtrain::write_file_atomic(f, "two");
  EXPECT_EQ(slurp(f), "two");
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

TEST(AtomicFile, FullDiskKeepsTheOldFileAndNamesTheError) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  const auto mnt = llmtrain::testing::scratch_dir("atomic_full") / "mnt";
  fs::create_directories(mnt);
  umount2(mnt.c_str(), MNT_DETACH);  // a leftover of an interrupted run
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  const auto f = mnt / "index.json";
  llmtrain::write_file_atomic(f, "old content");
  try {
    llmtrain::write_file_atomic(f, std::string(1 << 20, 'x'));
    ADD_FAILURE() << "1 MiB written to a 64 KiB file system";
  } catch (const llmtrain::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(f.string()), std::string::npos) << m;
    EXPECT_NE(m.find("No space left on device"), std::string::npos) << m;
  }
  EXPECT_EQ(slurp(f), "old content");
  EXPECT_EQ(entries(mnt), 1u) << "a temporary file was left behind";
  umount2(mnt.c_str(), MNT_DETACH);
}
