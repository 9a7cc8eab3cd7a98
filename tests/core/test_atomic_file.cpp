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

TEST(AtomicFile, WritesPiecesInOrder) {
  const auto dir = llmtrain::testing::scratch_dir("atomic_pieces");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto f = dir / "x.bin";
  llmtrain::write_file_atomic(f, std::vector<std::string_view>{"ab", "", "cde"});
  EXPECT_EQ(slurp(f), "abcde");
  EXPECT_EQ(entries(dir), 1u) << "a temporary file was left behind";
}

TEST(AtomicFile, PublishFileMovesATemporaryNamedByTheCaller) {
  const auto dir = llmtrain::testing::scratch_dir("atomic_publish_file");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto tmp = dir / ".x.h5.tmp", f = dir / "x.h5";
  std::ofstream(tmp) << "data";
  llmtrain::publish_file(tmp, f);
  EXPECT_EQ(slurp(f), "data");
  EXPECT_FALSE(fs::exists(tmp));
  try {
    llmtrain::publish_file(dir / ".missing.tmp", dir / "y.h5");
    ADD_FAILURE() << "a missing temporary file was published";
  } catch (const llmtrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find(".missing.tmp"), std::string::npos) << e.what();
  }
}

TEST(AtomicFile, PublishDirectoryReplacesTheOldOneWhole) {
  const auto dir = llmtrain::testing::scratch_dir("atomic_publish_dir");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto target = dir / "data", tmp = dir / ".data.new";
  fs::create_directories(target);
  std::ofstream(target / "old.txt") << "old";
  fs::create_directories(tmp);
  llmtrain::write_file_atomic(tmp / "new.txt", "new");
  llmtrain::publish_directory(tmp, target);
  EXPECT_EQ(slurp(target / "new.txt"), "new");
  EXPECT_FALSE(fs::exists(target / "old.txt"));
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_EQ(entries(dir), 1u) << "the old copy or the temporary directory was left behind";
  // Into a place that does not exist yet: created by the rename.
  fs::create_directories(tmp);
  llmtrain::publish_directory(tmp, dir / "fresh");
  EXPECT_TRUE(fs::is_directory(dir / "fresh"));
}
