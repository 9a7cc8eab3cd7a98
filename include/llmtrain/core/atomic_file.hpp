// One atomic writer for every file the project writes (data index, run logs,
// plots' inputs, checkpoints, exports): the bytes go to a temporary name beside
// the target, are flushed and fsync'ed, the file is closed with its error
// checked, renamed over the target, and the directory is fsync'ed. On any
// failure the temporary file is removed and the target is untouched: a reader
// sees the old file or the complete new one, never a half.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace llmtrain {

// Writes `bytes` to `path` atomically. Throws Error naming the path and the OS
// error (ENOSPC, EACCES, ...).
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// For files another library writes (HDF5): write to temp_path(), then commit().
// Destroyed without commit() (an exception, a failed write), the temporary file
// is removed.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  const std::filesystem::path& temp_path() const { return temp_; }
  const std::filesystem::path& target() const { return target_; }
  // fsync of the finished temporary file, rename over the target, fsync of the directory.
  void commit();
  // Leaves the temporary file where it is (for a caller that renames it itself).
  void release() { committed_ = true; }

 private:
  std::filesystem::path target_, temp_;
  bool committed_ = false;
};

// fsync of a file or directory by path; throws Error naming it.
void fsync_path(const std::filesystem::path& path);

}  // namespace llmtrain
