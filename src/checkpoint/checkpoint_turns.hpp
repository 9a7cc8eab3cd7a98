// Turns for the writers of one node (CheckpointWriter::finish): on a file system
// that holds a file's inode lock for the whole of a buffered write (ext4, XFS,
// btrfs, tmpfs, f2fs, overlayfs, NFS), two ranks writing one file take turns
// write by write, each hand-off a sleep and a wake-up (measured: 9-10 s asleep
// per rank in a 23 s save under load). So the ranks of a node take turns for
// their whole share instead: each holds an flock on a node-local lock file for
// all its writes. The kernel frees the lock of a rank that dies. Parallel file
// systems (Lustre, GPFS, BeeGFS, ...) lock byte ranges: their writers run at once.
#pragma once
#include <cstddef>
#include <string>

namespace llmtrain {

// Whether writes to one file under `dir` exclude each other for the whole write
// (statfs f_type: ext2/3/4, XFS, btrfs, tmpfs, f2fs, overlayfs, NFS). False when
// `dir` cannot be statted or its file system is another (parallel) one.
bool file_system_serializes_writes(const std::string& dir);

// Direct I/O for a checkpoint file at `path` (CheckpointWriter::finish): a
// local block file system (ext2/3/4, XFS, btrfs, f2fs) and LLMTRAIN_CHECKPOINT_DIRECT_IO
// not "0". Returns the alignment that file offsets, lengths and buffers of an
// O_DIRECT write need there (statx's STATX_DIOALIGN, at least the page size),
// or 0 where direct I/O is not used (another file system; statx cannot say).
size_t checkpoint_direct_io_alignment(const std::string& path);

// The node-local lock file of the writers to checkpoint files in `dir`:
// /dev/shm/llmtrain-ckpt-turn-<crc32c of the absolute directory, hex>.lock.
std::string checkpoint_turn_lock_path(const std::string& dir);

// This process's turn: an exclusive flock on `lock_path`, taken in the
// constructor (it sleeps until the holder lets go) and released by the
// destructor. When the lock file cannot be opened (no /dev/shm) there are no
// turns: held() is false and the writes go on at once.
class WriteTurn {
 public:
  explicit WriteTurn(const std::string& lock_path);
  ~WriteTurn();
  WriteTurn(const WriteTurn&) = delete;
  WriteTurn& operator=(const WriteTurn&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace llmtrain
