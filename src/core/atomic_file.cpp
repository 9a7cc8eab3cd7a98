#include "llmtrain/core/atomic_file.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>

#include <fmt/format.h>

#include "llmtrain/core/error.hpp"
#include "llmtrain/core/log.hpp"

namespace llmtrain {
namespace fs = std::filesystem;

namespace {

std::string os_error(int err) { return std::strerror(err); }

// "<dir>/.<name>.tmp.<pid>": hidden, unique per process, on the same file system.
fs::path temp_name(const fs::path& target) {
  return target.parent_path() / fmt::format(".{}.tmp.{}", target.filename().string(), static_cast<long>(::getpid()));
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw Error(fmt::format("cannot rename '{}' to '{}': {}", from.string(), to.string(), os_error(errno)));
}

void fsync_dir_of(const fs::path& path) {
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  fsync_path(dir);
}

}  // namespace

void fsync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("cannot open '{}' to sync it: {}", path.string(), os_error(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems refuse fsync on directories (EINVAL): nothing more to do there.
  if (rc != 0 && !(err == EINVAL && fs::is_directory(path)))
    throw Error(fmt::format("fsync of '{}' failed: {}", path.string(), os_error(err)));
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  write_file_atomic(path, std::vector<std::string_view>{bytes});
}

void write_file_atomic(const fs::path& path, const std::vector<std::string_view>& pieces) {
  AtomicFile file(path);
  const int fd = ::open(file.temp_path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error(fmt::format("cannot write '{}' (temporary '{}'): {}", path.string(), file.temp_path().string(),
                            os_error(errno)));
  int err = 0;
  for (size_t i = 0; i < pieces.size() && err == 0; ++i) {
    const char* p = pieces[i].data();
    size_t left = pieces[i].size();
    while (left > 0) {
      const ssize_t n = ::write(fd, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        err = errno;
        break;
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  // close() reports write-back errors (NFS, quota) that write() did not.
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) throw Error(fmt::format("writing '{}' failed: {}", path.string(), os_error(err)));
  file.commit();
}

AtomicFile::AtomicFile(fs::path target) : target_(std::move(target)), temp_(temp_name(target_)) {}
AtomicFile::AtomicFile(fs::path target, fs::path temp) : target_(std::move(target)), temp_(std::move(temp)) {}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  std::error_code ec;
  fs::remove(temp_, ec);  // best effort: the original error is what the caller reports
}

void AtomicFile::commit() {
  publish_file(temp_, target_);
  committed_ = true;
}

void publish_file(const fs::path& temp, const fs::path& target) {
  fsync_path(temp);
  rename_or_throw(temp, target);
  fsync_dir_of(target);
}

void publish_directory(const fs::path& temp, const fs::path& target) {
  fsync_path(temp);
  std::error_code ec;
  const bool replace = fs::exists(fs::symlink_status(target, ec));
  const fs::path old = target.parent_path() / fmt::format(".{}.old-{}", target.filename().string(),
                                                          static_cast<long>(::getpid()));
  if (replace) {
    fs::remove_all(old, ec);
    if (std::rename(target.c_str(), old.c_str()) != 0)
      throw Error(fmt::format("cannot move the old '{}' aside to '{}': {}", target.string(), old.string(),
                              os_error(errno)));
  }
  try {
    rename_or_throw(temp, target);
  } catch (const Error&) {
    if (replace) std::rename(old.c_str(), target.c_str());  // put the old one back
    throw;
  }
  fsync_dir_of(target);
  if (replace) {
    fs::remove_all(old, ec);
    if (ec)
      log::warn("the new '{}' is in place, but removing the old copy '{}' failed: {}", target.string(), old.string(),
                ec.message());
  }
}

int64_t free_bytes(const std::filesystem::path& dir) {
  struct statvfs st{};
  if (::statvfs(dir.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

}  // namespace llmtrain
