// One atomic writer for every file the project writes (data index, run logs,
// plots' inputs, checkpoints, exports): the bytes go to a temporary name beside
// the target, are flushed and fsync'ed, the file is closed with its error
// checked, renamed over the target, and the directory is fsync'ed. On any
// failure the temporary file is removed and the target is untouched: a reader
// sees the old file or the complete new one, never a half.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace llmtrain {

// Writes `bytes` to `path` atomically. Throws Error naming the path and the OS
// error (ENOSPC, EACCES, ...).
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);
// The same for a file made of pieces, written in order (no copy into one buffer).
void write_file_atomic(const std::filesystem::path& path, const std::vector<std::string_view>& pieces);

// For files another library writes (HDF5): write to temp_path(), then commit().
// Destroyed without commit() (an exception, a failed write), the temporary file
// is removed.
class AtomicFile {
 public:
  // The temporary name is "<dir>/.<name>.tmp.<pid>", or `temp` where given.
  explicit AtomicFile(std::filesystem::path target);
  AtomicFile(std::filesystem::path target, std::filesystem::path temp);
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

// Puts a finished temporary file in place: fsync of `temp`, rename over
// `target`, fsync of the directory (AtomicFile::commit). For files written under
// a name the caller chose, e.g. the one name every rank of a collective write
// agrees on. Throws Error naming both paths; `temp` is left for the caller then.
void publish_file(const std::filesystem::path& temp, const std::filesystem::path& target);

// Puts a finished temporary directory (its files already synced, e.g. written
// with the helpers above) in place on the same file system: fsync of `temp`,
// an existing `target` moved aside, `temp` renamed to `target` (the old one put
// back if that fails), fsync of the parent, the old one removed (a failure there
// is only warned about: the new data is in place). Throws Error naming the paths.
void publish_directory(const std::filesystem::path& temp, const std::filesystem::path& target);

// fsync of a file or directory by path; throws Error naming it.
void fsync_path(const std::filesystem::path& path);

// Bytes the file system of `dir` has free for this user (-1 when unknown): the
// writers' ENOSPC messages (checkpoints, token shards).
int64_t free_bytes(const std::filesystem::path& dir);

}  // namespace llmtrain
