// CheckpointWriter and CheckpointReader: the HDF5 side of checkpoints (groups,
// attributes, whole tensors written and read as slices). The parts of the
// training state (train/checkpoint_parts.cpp) see only these two classes.
#include <fcntl.h>
#include <mpi.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <torch/torch.h>

#include "core/hdf5_util.hpp"
#include "checkpoint/checkpoint_comm.hpp"    // defines: CheckpointComm (MPI_Comm behind the opaque handle)
#include "checkpoint/checkpoint_ops.hpp"
#include "checkpoint/checkpoint_turns.hpp"
#include "llmtrain/core/activity_note.hpp"  // defines: ActivityNote (what the watchdog names if a file open hangs)
#include "llmtrain/core/crc32c.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/core/fault.hpp"
#include "llmtrain/core/hdf5_mutex.hpp"
#include "llmtrain/distributed/runtime.hpp"
#include "llmtrain/checkpoint/checkpoint.hpp"

namespace llmtrain {
namespace fs = std::filesystem;
using h5::H5Id;

namespace {

H5Id make_dxpl(H5FD_mpio_xfer_t mode) {
  H5Id dxpl(H5_CHECK(H5Pcreate(H5P_DATASET_XFER)), H5Pclose);
  H5_CHECK(H5Pset_dxpl_mpio(dxpl, mode));
  return dxpl;
}

// Selects the row-major element range [begin, begin + n) of a dataspace of
// rank 1 or 2 (parameters are vectors or matrices): at most three hyperslab
// blocks (a partial first row, whole rows, a partial last row). HDF5 visits a
// selection in dataspace order, so the elements meet the memory buffer in order.
void select_flat_range(hid_t space, const std::vector<int64_t>& shape, int64_t begin, int64_t n) {
  if (n <= 0) {
    H5_CHECK(H5Sselect_none(space));
    return;
  }
  if (shape.size() == 1) {
    hsize_t start = static_cast<hsize_t>(begin), count = static_cast<hsize_t>(n);
    H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &count, nullptr));
    return;
  }
  LLMTRAIN_CHECK(shape.size() == 2, "checkpoints store tensors of rank 1 or 2, got rank {}", shape.size());
  const int64_t C = shape[1];
  bool first = true;
  auto add = [&](int64_t row, int64_t col, int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    hsize_t start[2] = {static_cast<hsize_t>(row), static_cast<hsize_t>(col)};
    hsize_t count[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(cols)};
    H5_CHECK(H5Sselect_hyperslab(space, first ? H5S_SELECT_SET : H5S_SELECT_OR, start, nullptr, count, nullptr));
    first = false;
  };
  int64_t pos = begin, end = begin + n;
  if (pos % C != 0) {  // partial first row
    const int64_t take = std::min(end, (pos / C + 1) * C) - pos;
    add(pos / C, pos % C, 1, take);
    pos += take;
  }
  const int64_t whole = (end - pos) / C;
  add(pos / C, 0, whole, C);
  pos += whole * C;
  if (pos < end) add(pos / C, 0, 1, end - pos);
}

std::vector<int64_t> dims_of(hid_t space) {
  const int nd = H5_CHECK(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(nd, 0)));
  H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  return std::vector<int64_t>(dims.begin(), dims.end());
}

std::string join(const std::string& group, const std::string& name) {
  return group.empty() ? name : group + "/" + name;
}

// One rank's checksum of one slice of a dataset: bytes [offset, offset + bytes)
// of dataset number `dataset` (in the order of the collective calls, the same
// on every rank).
struct Piece {
  uint64_t dataset, offset, bytes;
  uint32_t crc;
};

std::vector<Piece> allgather_pieces(const std::vector<Piece>& mine, MPI_Comm comm = MPI_COMM_WORLD) {
  int world = 0;
  MPI_CHECK(MPI_Comm_size(comm, &world));
  const int n_bytes = static_cast<int>(mine.size() * sizeof(Piece));
  std::vector<int> counts(static_cast<size_t>(world)), displs(static_cast<size_t>(world));
  MPI_CHECK(MPI_Allgather(&n_bytes, 1, MPI_INT, counts.data(), 1, MPI_INT, comm));
  int total = 0;
  for (int r = 0; r < world; ++r) displs[r] = total, total += counts[r];
  std::vector<Piece> all(static_cast<size_t>(total) / sizeof(Piece));
  MPI_CHECK(MPI_Allgatherv(mine.data(), n_bytes, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE,
                           comm));
  return all;
}

// The whole dataset's CRC32C from the slices' (any rank, any order, repeats
// allowed); nullopt when the slices do not cover it.
std::vector<std::optional<uint32_t>> combine_pieces(std::vector<Piece> all, const std::vector<uint64_t>& sizes) {
  std::sort(all.begin(), all.end(), [](const Piece& a, const Piece& b) {
    return a.dataset != b.dataset ? a.dataset < b.dataset : a.offset < b.offset;
  });
  std::vector<std::optional<uint32_t>> out(sizes.size());
  std::vector<uint64_t> pos(sizes.size(), 0);
  std::vector<uint32_t> crc(sizes.size(), 0);
  for (const Piece& p : all) {
    if (p.dataset >= sizes.size() || p.offset != pos[p.dataset]) continue;  // a repeat, or past a gap
    crc[p.dataset] = crc32c_combine(crc[p.dataset], p.crc, p.bytes);
    pos[p.dataset] += p.bytes;
  }
  for (size_t d = 0; d < sizes.size(); ++d)
    if (pos[d] == sizes[d]) out[d] = crc[d];
  return out;
}

constexpr const char* kCrcAttr = "crc32c";

h5::AttrReader attr_reader(const std::string& path) {
  return h5::AttrReader(fmt::format("checkpoint '{}'", path),
                        "not an llmtrain checkpoint, or written by an incompatible version; "
                        "docs/checkpoint-format.md");
}

// A barrier that sleeps: a rank whose writes are done waits here while the
// others write, polling every millisecond instead of spinning in MPI_Barrier
// (a spinning rank takes the core of the rank that writes).
void sleeping_barrier(MPI_Comm comm) {
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ibarrier(comm, &req));
  for (int done = 0;;) {
    MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// A creation property list for datasets (H5P_DATASET_CREATE) or groups
// (H5P_GROUP_CREATE) that records no modification times: HDF5 stamps each object
// with the second it was written, so two saves of the same state differed in
// bytes when they fell either side of a second. The root's `created` attribute
// is the file's one time stamp.
H5Id untimed(hid_t cls) {
  H5Id p(H5_CHECK(H5Pcreate(cls)), H5Pclose);
  H5_CHECK(H5Pset_obj_track_times(p, false));
  return p;
}

}  // namespace

// ---- turns of the writers of one node (checkpoint/checkpoint_turns.hpp) ---------------------

namespace {

// The kinds of file system the writer treats apart, from statfs's f_type
// (linux/magic.h; NFS's from nfs_fs.h): local block file systems (direct I/O;
// a file's inode lock held for a whole buffered write), others that lock a
// whole file per write, and the rest (parallel file systems: byte-range locks).
enum class FsKind { local_block, locks_whole_file, other };

FsKind file_system_kind(const std::string& dir) {
  struct statfs st{};
  if (::statfs(dir.empty() ? "." : dir.c_str(), &st) != 0) return FsKind::other;
  switch (static_cast<uint64_t>(st.f_type) & 0xffffffffu) {
    case 0xEF53:      // ext2, ext3, ext4
    case 0x58465342:  // XFS
    case 0x9123683E:  // btrfs
    case 0xF2F52010:  // f2fs
      return FsKind::local_block;
    case 0x01021994:  // tmpfs
    case 0x794C7630:  // overlayfs
    case 0x6969:      // NFS
      return FsKind::locks_whole_file;
    default:
      return FsKind::other;  // Lustre 0x0BD00BD0, GPFS 0x47504653, BeeGFS 0x19830326, ...
  }
}

}  // namespace

bool file_system_serializes_writes(const std::string& dir) {
  return file_system_kind(dir) != FsKind::other;
}

std::string checkpoint_turn_lock_path(const std::string& dir) {
  fs::path p = fs::absolute(fs::path(dir)).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();  // "a/b/" is "a/b"
  const std::string abs = p.string();
  return fmt::format("/dev/shm/llmtrain-ckpt-turn-{:08x}.lock", crc32c(abs.data(), abs.size()));
}

size_t checkpoint_direct_io_alignment(const std::string& path) {
  if (const char* e = std::getenv("LLMTRAIN_CHECKPOINT_DIRECT_IO"); e && std::string(e) == "0") return 0;
  // tmpfs has no O_DIRECT; network and parallel file systems keep their own caching.
  if (file_system_kind(fs::path(path).parent_path().string()) != FsKind::local_block) return 0;
#ifdef STATX_DIOALIGN
  struct statx sx{};
  if (::statx(AT_FDCWD, path.c_str(), 0, STATX_DIOALIGN, &sx) != 0 || !(sx.stx_mask & STATX_DIOALIGN) ||
      sx.stx_dio_offset_align == 0)
    return 0;  // the kernel (before 6.1) or the file system cannot say: buffered
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return std::max({page, static_cast<size_t>(sx.stx_dio_offset_align), static_cast<size_t>(sx.stx_dio_mem_align)});
#else
  return 0;
#endif
}

WriteTurn::WriteTurn(const std::string& lock_path) {
  fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) return;
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;  // a signal (a pre-emption's SIGTERM): wait on
    ::close(fd_);                  // flock not supported there: no turns
    fd_ = -1;
    return;
  }
}

WriteTurn::~WriteTurn() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

// ---- the writer ----------------------------------------------------------------------

struct CheckpointWriter::File {
  H5Id file;
  MPI_Comm comm = MPI_COMM_WORLD;
  std::map<std::string, H5Id> groups;  // open until the file closes
  H5Id collective, independent;        // transfer property lists
  std::vector<H5Id> datasets;          // open until finish() writes their checksums
  std::vector<uint64_t> sizes;         // bytes of each
  std::vector<Piece> pieces;           // this rank's slices
  // A slice this rank writes in finish(), once every dataset exists.
  struct Pending {
    size_t index;                      // into datasets
    std::string name;                  // group/name, for errors
    std::vector<int64_t> shape;
    int64_t offset;
    torch::Tensor part;
  };
  std::vector<Pending> pending;        // in file order (the order of creation)
  int local_rank = 0;                  // among the ranks of this node
  std::string failure;                 // this rank's first failed write ("" = none)
  int failure_errno = 0;
  std::string dir;                     // where the file is (its file system's free space)
  std::string path;                    // the file
  // Direct I/O (O_DIRECT) for the page-aligned inside of each slice, through an
  // aligned staging buffer; the partial pages at its ends go through HDF5.
  struct Direct {
    int fd = -1;
    size_t align = 0;
    float* staging = nullptr;
    int64_t staging_elems = 0;
    ~Direct() {
      if (fd >= 0) ::close(fd);
      std::free(staging);
    }
  };
  // A failed write is remembered, not thrown: the other ranks go on with
  // their collective calls, and so must this one.
  void fail(const std::string& what) {
    int err = errno;
    if (!failure.empty()) return;
    // MPI-IO does not always leave the OS's errno: a file system with less than
    // 1 MiB free is full for a write of this size.
    struct statvfs st{};
    if (err != ENOSPC && ::statvfs(dir.c_str(), &st) == 0 && st.f_bavail * st.f_frsize < (1u << 20)) err = ENOSPC;
    failure_errno = err ? err : EIO;  // non-zero: failure_errno() says whether this rank failed
    failure = fmt::format("{}: {}", what, err ? std::strerror(err) : "HDF5 write failed");
  }
  size_t add_dataset(H5Id d, uint64_t bytes) {
    datasets.push_back(std::move(d));
    sizes.push_back(bytes);
    return datasets.size() - 1;
  }
  hid_t group(const std::string& path) {
    if (path.empty()) return file;
    if (auto it = groups.find(path); it != groups.end()) return it->second;
    const size_t slash = path.rfind('/');
    const hid_t parent = slash == std::string::npos ? file.get() : group(path.substr(0, slash));
    const std::string leaf = slash == std::string::npos ? path : path.substr(slash + 1);
    H5Id g(H5_CHECK(H5Gcreate2(parent, leaf.c_str(), H5P_DEFAULT, untimed(H5P_GROUP_CREATE), H5P_DEFAULT)),
           H5Gclose);
    return groups.emplace(path, std::move(g)).first->second;
  }
  void write(const Pending& w, Direct* direct);
  void write_pending(bool kill_half_way);
};

// Written in pieces of 1 MiB, each checksummed just before its write: the write
// copies the bytes from the cache the CRC has just read them into (one pass over
// memory, not two). The CRC is taken even after a failed write (the checksum
// allgather needs every piece); a full disk gets no more data.
//
// With direct I/O (write_pending) the whole pages inside the slice's bytes in
// the file bypass the page cache: each 8 MiB is copied into the aligned staging
// buffer, checksummed there and written with pwrite on an O_DIRECT descriptor.
// The partial pages at the two ends (shared with a neighbouring rank's slice or
// HDF5's metadata) go through HDF5 as before, so no page is written both ways.
// Why: a buffered write's cost is the page cache's, not the disk's, where fresh
// memory is dear (docs/performance.md, "One writer and the page cache").
void CheckpointWriter::File::write(const Pending& w, Direct* direct) {
  const torch::Tensor buf = w.part.to(torch::kCPU, torch::kFloat).contiguous();
  const float* data = buf.data_ptr<float>();
  const int64_t numel_part = buf.numel();
  std::vector<hsize_t> dims(w.shape.begin(), w.shape.end());
  H5Id fspace(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
  constexpr int64_t kPiece = (int64_t{1} << 20) / static_cast<int64_t>(sizeof(float));
  uint32_t crc = 0;
  auto through_hdf5 = [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; p += kPiece) {
      const int64_t m = std::min(kPiece, end - p);
      crc = crc32c(data + p, static_cast<size_t>(m) * sizeof(float), crc);
      if (!failure.empty()) continue;
      hsize_t hm = static_cast<hsize_t>(m);
      select_flat_range(fspace, w.shape, w.offset + p, m);
      H5Id mspace(H5_CHECK(H5Screate_simple(1, &hm, nullptr)), H5Sclose);
      errno = 0;
      if (H5_LOCKED(H5Dwrite(datasets[w.index], H5T_NATIVE_FLOAT, mspace, fspace, independent, data + p)) < 0)
        fail(fmt::format("writing dataset '{}'", w.name));
    }
  };
  // The elements [mid_begin, mid_end) whose bytes fill whole aligned blocks of the file.
  int64_t mid_begin = numel_part, mid_end = numel_part;
  uint64_t mid_offset = 0;
  if (direct && direct->fd >= 0 && failure.empty()) {
    const haddr_t base = H5_LOCKED(H5Dget_offset(datasets[w.index]));
    if (base != HADDR_UNDEF && base % sizeof(float) == 0) {
      const uint64_t a = direct->align;
      const uint64_t b0 = base + static_cast<uint64_t>(w.offset) * sizeof(float);
      const uint64_t b1 = b0 + static_cast<uint64_t>(numel_part) * sizeof(float);
      const uint64_t m0 = (b0 + a - 1) / a * a, m1 = b1 / a * a;
      if (m1 > m0) {
        mid_begin = static_cast<int64_t>((m0 - b0) / sizeof(float));
        mid_end = static_cast<int64_t>((m1 - b0) / sizeof(float));
        mid_offset = m0;
      }
    }
  }
  through_hdf5(0, mid_begin);
  for (int64_t p = mid_begin; p < mid_end;) {
    const int64_t m = std::min(direct->staging_elems, mid_end - p);
    const size_t len = static_cast<size_t>(m) * sizeof(float);
    std::memcpy(direct->staging, data + p, len);
    crc = crc32c(direct->staging, len, crc);
    const char* bytes = reinterpret_cast<const char*>(direct->staging);
    for (size_t done = 0; done < len && failure.empty();) {
      errno = 0;
      const ssize_t r = ::pwrite(direct->fd, bytes + done, len - done, static_cast<off_t>(mid_offset + done));
      if (r > 0) {
        done += static_cast<size_t>(r);
      } else if (r < 0 && errno == EINTR) {
        continue;
      } else {
        if (r == 0) errno = ENOSPC;
        fail(fmt::format("writing dataset '{}'", w.name));
      }
    }
    p += m;
    mid_offset += len;
  }
  through_hdf5(mid_end, numel_part);
  pieces.push_back({w.index, static_cast<uint64_t>(w.offset) * sizeof(float),
                    static_cast<uint64_t>(numel_part) * sizeof(float), crc});
}

// Every dataset exists: this rank writes all its slices in file order, with no
// collective call in between. Where the file system locks the whole file for a
// write, the ranks of this node take turns (checkpoint/checkpoint_turns.hpp): each
// writes its whole share holding the node's lock, so the writes of two ranks do
// not alternate piece by piece. A rank whose share is written waits asleep.
void CheckpointWriter::File::write_pending(bool kill_half_way) {
  const bool turns = file_system_serializes_writes(dir.empty() ? "." : dir);
  const std::string lock_path = turns ? checkpoint_turn_lock_path(dir.empty() ? "." : dir) : "";
  {
    std::optional<WriteTurn> turn;
    if (turns) turn.emplace(lock_path);
    Direct direct;
    if (!pending.empty()) direct.align = checkpoint_direct_io_alignment(path);
    if (direct.align > 0) {
      constexpr size_t kStagingBytes = size_t{8} << 20;
      const size_t bytes = (kStagingBytes + direct.align - 1) / direct.align * direct.align;
      direct.staging = static_cast<float*>(std::aligned_alloc(direct.align, bytes));
      direct.staging_elems = static_cast<int64_t>(bytes / sizeof(float));
      if (direct.staging) direct.fd = ::open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
    }
    // The test fault point: this rank dies half-way through its writes (holding its turn).
    for (size_t k = 0; k <= pending.size(); ++k) {
      if (kill_half_way && k == pending.size() / 2) std::raise(SIGKILL);
      if (k < pending.size()) write(pending[k], direct.fd >= 0 ? &direct : nullptr);
    }
  }
  pending.clear();
  sleeping_barrier(comm);
  // Every rank of the node has let go: the lock file goes (the next save makes it anew).
  if (turns && local_rank == 0) (void)::unlink(lock_path.c_str());
}

CheckpointWriter::CheckpointWriter(CheckpointOps& ops, const Runtime& rt, int64_t iteration)
    : record_(&ops), rank_(rt.rank()), world_size_(rt.world_size()), iteration_(iteration) {}

CheckpointWriter::CheckpointWriter(const std::string& path, const Runtime& rt, int64_t iteration,
                                   const CheckpointComm& over)
    : f_(std::make_unique<File>()), rank_(rt.rank()), world_size_(rt.world_size()), iteration_(iteration) {
  const MPI_Comm comm = over.comm;
  f_->comm = comm;
  f_->local_rank = rt.local_rank();
  H5Id fapl = h5::make_mpio_fapl(comm);
  // Large datasets start on 1 MiB boundaries (file-system stripes, MPI-IO aggregation).
  H5_CHECK(H5Pset_alignment(fapl, 1 << 20, 1 << 20));
  const ActivityNote note("creating " + path);
  const hid_t fid = H5_LOCKED(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
  if (fid < 0) throw Error(fmt::format("cannot create checkpoint '{}' (directory writable? disk full?)", path));
  f_->file = H5Id(fid, H5Fclose);
  f_->collective = make_dxpl(H5FD_MPIO_COLLECTIVE);
  // The tensors are written independently: each owner writes its contiguous
  // ranges of the whole tensor, with no two-phase shuffle between the ranks
  // (measured: 1.0x dd at one writer, against 0.68x collective).
  f_->independent = make_dxpl(H5FD_MPIO_INDEPENDENT);
  f_->dir = fs::path(path).parent_path().string();
  f_->path = path;
  h5::quiet_hdf5_once();  // a failed write is reported by the save, naming the file, not as an HDF5 stack
}

CheckpointWriter::~CheckpointWriter() = default;

void CheckpointWriter::replay(const CheckpointOps& ops) {
  using K = CheckpointOps::Kind;
  for (size_t i = 0; i < ops.ops.size(); ++i) {
    const auto& op = ops.ops[i];
    // One HDF5 call sequence at a time in the process (the loader's workers read
    // shards meanwhile); taken per call so that they wait for one tensor at most.
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    switch (op.kind) {
      case K::attr_i64: attr(op.group, op.name.c_str(), op.i64); break;
      case K::attr_f64: attr(op.group, op.name.c_str(), op.f64); break;
      case K::attr_str: attr(op.group, op.name.c_str(), op.str); break;
      case K::tensor: tensor(op.group, op.name, op.shape, op.offset, op.data); break;
      case K::rank_row: rank_row(op.group, op.name, op.row); break;
    }
  }
}


int CheckpointWriter::failure_errno() const { return f_->failure_errno; }

void CheckpointWriter::finish() {
  f_->write_pending(fault::hit(fault::Point::kill_during_save, rank_, iteration_));
  const auto crcs = combine_pieces(allgather_pieces(f_->pieces, f_->comm), f_->sizes);
  for (size_t d = 0; d < crcs.size(); ++d)
    if (crcs[d]) h5::write_attr(f_->datasets[d], kCrcAttr, static_cast<int64_t>(*crcs[d]));
  f_->datasets.clear();
  attr("", "checksum", std::string(kCrcAttr));
}

std::string CheckpointWriter::close() {
  f_->groups.clear();  // every object must be closed before the file (MPI-IO closes "semi")
  f_->datasets.clear();
  errno = 0;
  // H5Fclose flushes the last metadata: its error (a full disk) is the save's.
  if (f_->file.close() < 0) f_->fail("closing the file (writing its metadata)");
  return f_->failure;
}

void CheckpointWriter::attr(const std::string& group, const char* name, int64_t v) {
  if (record_) return void(record_->add(CheckpointOps::Kind::attr_i64, group, name).i64 = v);
  h5::write_attr(f_->group(group), name, v);
}
void CheckpointWriter::attr(const std::string& group, const char* name, double v) {
  if (record_) return void(record_->add(CheckpointOps::Kind::attr_f64, group, name).f64 = v);
  h5::write_attr(f_->group(group), name, v);
}
void CheckpointWriter::attr(const std::string& group, const char* name, const std::string& v) {
  if (record_) return void(record_->add(CheckpointOps::Kind::attr_str, group, name).str = v);
  h5::write_attr(f_->group(group), name, v, h5::StrPad::nullpad);
}

void CheckpointWriter::tensor(const std::string& group, const std::string& name, const std::vector<int64_t>& shape,
                              int64_t offset, const torch::Tensor& part) {
  if (record_) {
    torch::Tensor data;
    if (part.defined() && part.numel() > 0) data = record_->host_copy(part);
    auto& op = record_->add(CheckpointOps::Kind::tensor, group, name);
    op.shape = shape;
    op.offset = offset;
    op.data = std::move(data);
    return;
  }
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  H5Id fspace(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
  H5Id d(H5_CHECK(H5Dcreate2(f_->group(group), name.c_str(), H5T_IEEE_F32LE, fspace, H5P_DEFAULT,
                             untimed(H5P_DATASET_CREATE), H5P_DEFAULT)),
         H5Dclose);
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  const size_t index = f_->add_dataset(std::move(d), static_cast<uint64_t>(numel) * sizeof(float));
  if (!part.defined() || part.numel() == 0) return;  // independent I/O: only the owners write
  // Written in finish(), once every dataset exists (the tensor stays alive till then).
  f_->pending.push_back({index, join(group, name), shape, offset, part});
}

void CheckpointWriter::rank_row(const std::string& group, const std::string& name, const std::vector<uint8_t>& row) {
  if (record_) {
    record_->add(CheckpointOps::Kind::rank_row, group, name).row = row;
    return;
  }
  int64_t len = static_cast<int64_t>(row.size()), maxlen = 0;
  MPI_CHECK(MPI_Allreduce(&len, &maxlen, 1, MPI_INT64_T, MPI_MAX, f_->comm));
  LLMTRAIN_CHECK(len == maxlen, "checkpoint: rows of '{}' differ across ranks ({} vs {} bytes)", join(group, name),
                 len, maxlen);
  hsize_t dims[2] = {static_cast<hsize_t>(world_size_), static_cast<hsize_t>(len)};
  H5Id fspace(H5_CHECK(H5Screate_simple(2, dims, nullptr)), H5Sclose);
  H5Id d(H5_CHECK(H5Dcreate2(f_->group(group), name.c_str(), H5T_STD_U8LE, fspace, H5P_DEFAULT,
                             untimed(H5P_DATASET_CREATE), H5P_DEFAULT)),
         H5Dclose);
  hsize_t start[2] = {static_cast<hsize_t>(rank_), 0}, count[2] = {1, static_cast<hsize_t>(len)};
  H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, count, nullptr));
  hsize_t mdim = static_cast<hsize_t>(len);
  H5Id mspace(H5_CHECK(H5Screate_simple(1, &mdim, nullptr)), H5Sclose);
  const auto ulen = static_cast<uint64_t>(len);
  const size_t index = f_->add_dataset(std::move(d), ulen * static_cast<uint64_t>(world_size_));
  f_->pieces.push_back({index, ulen * static_cast<uint64_t>(rank_), ulen, crc32c(row.data(), row.size())});
  // Collective: every rank calls it, a failed one too (its error is kept, not thrown).
  errno = 0;
  if (H5_LOCKED(H5Dwrite(f_->datasets[index], H5T_NATIVE_UINT8, mspace, fspace, f_->collective, row.data())) < 0)
    f_->fail(fmt::format("writing dataset '{}'", join(group, name)));
}

// ---- the reader ----------------------------------------------------------------------

struct CheckpointReader::File {
  H5Id file;
  H5Id collective, independent;
  h5::AttrReader attrs{"", ""};
  std::vector<std::string> names;      // datasets read, in call order (the same on every rank)
  std::vector<uint64_t> sizes;
  std::vector<Piece> pieces;           // this rank's checksums of what it read
  size_t add_dataset(const std::string& path, hid_t space, size_t elem_bytes) {
    uint64_t n = 1;
    for (int64_t s : dims_of(space)) n *= static_cast<uint64_t>(s);
    names.push_back(path);
    sizes.push_back(n * elem_bytes);
    return names.size() - 1;
  }
  H5Id object(const std::string& path) const {  // a group (or the root) to read attributes of
    return H5Id(H5_CHECK(H5Oopen(file, path.empty() ? "/" : path.c_str(), H5P_DEFAULT)), H5Oclose);
  }
};

CheckpointReader::CheckpointReader(const std::string& path, const Runtime& rt, bool collective)
    : f_(std::make_unique<File>()), path_(path), rank_(rt.rank()), world_size_(rt.world_size()) {
  f_->attrs = attr_reader(path);
  h5::quiet_hdf5_once();
  if (collective) {
    H5Id fapl = h5::make_mpio_fapl(MPI_COMM_WORLD);
    const ActivityNote note("opening " + path);
    const hid_t fid = H5_LOCKED(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl));
    if (fid < 0) throw Error(fmt::format("cannot open checkpoint '{}'", path));
    f_->file = H5Id(fid, H5Fclose);
    f_->collective = make_dxpl(H5FD_MPIO_COLLECTIVE);
    // Read independently, as written: each rank its own contiguous ranges.
    f_->independent = make_dxpl(H5FD_MPIO_INDEPENDENT);
    return;
  }
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw CheckpointUnusable(fmt::format("'{}' is a directory, not a checkpoint file", path));
  if (!fs::is_regular_file(path)) throw CheckpointUnusable(fmt::format("'{}' does not exist", path));
  if (H5_LOCKED(H5Fis_hdf5(path.c_str())) <= 0)
    throw CheckpointUnusable(fmt::format("'{}' is not an HDF5 file (truncated or overwritten?)", path));
  const hid_t fid = H5_LOCKED(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (fid < 0) throw CheckpointUnusable(fmt::format("HDF5 cannot open '{}' (truncated?)", path));
  f_->file = H5Id(fid, H5Fclose);
}

CheckpointReader::~CheckpointReader() = default;

bool CheckpointReader::close() { return f_->file.close() >= 0; }

int64_t CheckpointReader::written_world_size() const { return attr_i64("", "world_size"); }
int64_t CheckpointReader::iteration() const { return attr_i64("", "iteration"); }

bool CheckpointReader::exists(const std::string& object) const {
  // Each link on the way: H5Lexists fails on a path whose parent is missing.
  for (size_t end = object.find('/');; end = object.find('/', end + 1)) {
    if (H5_LOCKED(H5Lexists(f_->file, object.substr(0, end).c_str(), H5P_DEFAULT)) <= 0) return false;
    if (end == std::string::npos) return true;
  }
}

void CheckpointReader::require_group(const std::string& group) const {
  if (!exists(group)) throw CheckpointUnusable(fmt::format("checkpoint '{}' has no group '{}'", path_, group));
}

bool CheckpointReader::has_attr(const std::string& group, const char* name) const {
  return f_->attrs.has(f_->object(group), name);
}

int64_t CheckpointReader::attr_i64(const std::string& group, const char* name) const {
  return f_->attrs.i64(f_->object(group), name);
}
double CheckpointReader::attr_f64(const std::string& group, const char* name) const {
  return f_->attrs.f64(f_->object(group), name);
}
std::string CheckpointReader::attr_str(const std::string& group, const char* name) const {
  return f_->attrs.str(f_->object(group), name);
}

CheckpointReader::Dataset CheckpointReader::dataset(const std::string& path) const {
  const hid_t did = H5_LOCKED(H5Dopen2(f_->file, path.c_str(), H5P_DEFAULT));
  if (did < 0) throw CheckpointUnusable(fmt::format("checkpoint '{}': dataset '{}' cannot be opened", path_, path));
  H5Id d(did, H5Dclose);
  H5Id space(H5_CHECK(H5Dget_space(d)), H5Sclose);
  H5Id type(H5_CHECK(H5Dget_type(d)), H5Tclose);
  return {dims_of(space), H5_LOCKED(H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 4)};
}

void CheckpointReader::read_tensor(const std::string& path, int64_t offset, const torch::Tensor& dst) {
  H5Id d(H5_CHECK(H5Dopen2(f_->file, path.c_str(), H5P_DEFAULT)), H5Dclose);
  H5Id fspace(H5_CHECK(H5Dget_space(d)), H5Sclose);
  const size_t index = f_->add_dataset(path, fspace, sizeof(float));
  if (!dst.defined() || dst.numel() == 0) return;
  // Straight into `dst` where it is contiguous fp32 on the CPU.
  const bool direct = dst.device().is_cpu() && dst.scalar_type() == torch::kFloat && dst.is_contiguous();
  torch::Tensor buf = direct ? dst : torch::empty({dst.numel()}, torch::TensorOptions().dtype(torch::kFloat));
  hsize_t n = static_cast<hsize_t>(buf.numel());
  select_flat_range(fspace, dims_of(fspace), offset, buf.numel());
  H5Id mspace(H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
  H5_CHECK(H5Dread(d, H5T_NATIVE_FLOAT, mspace, fspace, f_->independent, buf.data_ptr<float>()));
  const uint64_t bytes = static_cast<uint64_t>(buf.numel()) * sizeof(float);
  f_->pieces.push_back({index, static_cast<uint64_t>(offset) * sizeof(float), bytes, crc32c(buf.data_ptr(), bytes)});
  if (!direct) dst.copy_(buf.view(dst.sizes()));
}

std::optional<std::vector<uint8_t>> CheckpointReader::rank_row(const std::string& path) {
  if (!exists(path)) return std::nullopt;
  H5Id d(H5_CHECK(H5Dopen2(f_->file, path.c_str(), H5P_DEFAULT)), H5Dclose);
  H5Id fspace(H5_CHECK(H5Dget_space(d)), H5Sclose);
  const std::vector<int64_t> dims = dims_of(fspace);
  LLMTRAIN_CHECK(dims.size() == 2, "checkpoint '{}': '{}' is not a (world_size, bytes) table", path_, path);
  const bool same_world = dims[0] == world_size_;
  std::vector<uint8_t> row(static_cast<size_t>(dims[1]));
  if (same_world) {
    hsize_t start[2] = {static_cast<hsize_t>(rank_), 0}, count[2] = {1, static_cast<hsize_t>(dims[1])};
    H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, count, nullptr));
  } else {
    H5_CHECK(H5Sselect_none(fspace));
  }
  // Collective: every rank reads, those of another world size nothing.
  hsize_t mdim = std::max<hsize_t>(static_cast<hsize_t>(dims[1]), 1);
  H5Id mspace(H5_CHECK(H5Screate_simple(1, &mdim, nullptr)), H5Sclose);
  if (!same_world || dims[1] == 0) H5_CHECK(H5Sselect_none(mspace));
  uint8_t dummy = 0;
  H5_CHECK(H5Dread(d, H5T_NATIVE_UINT8, mspace, fspace, f_->collective, row.empty() ? &dummy : row.data()));
  const size_t index = f_->add_dataset(path, fspace, 1);
  if (!same_world) return std::nullopt;  // nothing read: not checked
  const auto len = static_cast<uint64_t>(row.size());
  f_->pieces.push_back({index, len * static_cast<uint64_t>(rank_), len, crc32c(row.data(), row.size())});
  return row;
}

std::vector<std::string> CheckpointReader::verify(int64_t& unchecked) {
  const auto crcs = combine_pieces(allgather_pieces(f_->pieces), f_->sizes);
  std::vector<std::string> bad;
  unchecked = 0;
  for (size_t d = 0; d < crcs.size(); ++d) {
    if (!crcs[d]) continue;  // read in part only (another world size's RNG rows)
    H5Id ds(H5_CHECK(H5Dopen2(f_->file, f_->names[d].c_str(), H5P_DEFAULT)), H5Dclose);
    if (H5_LOCKED(H5Aexists(ds, kCrcAttr)) <= 0) {
      ++unchecked;
      continue;
    }
    const auto stored = static_cast<uint32_t>(f_->attrs.i64(ds, kCrcAttr));
    if (stored != *crcs[d])
      bad.push_back(fmt::format("checkpoint '{}': dataset '{}' fails its checksum (crc32c stored {:08x}, read "
                                "{:08x}): the file is corrupt",
                                path_, f_->names[d], stored, *crcs[d]));
  }
  return bad;
}

}  // namespace llmtrain

// ---- checks shared by loading and llmtrain-checkpoint verify -----------------------------

namespace llmtrain {
namespace {

// Counters and sizes out of range mean a damaged file (or one edited by hand):
// the first problem, naming the file and the attribute, or "".
std::string metadata_problem(hid_t file, const h5::AttrReader& a, const std::string& path) {
  const auto obj = [&](const char* g) { return H5Id(H5_CHECK(H5Oopen(file, g, H5P_DEFAULT)), H5Oclose); };
  const auto bad = [&](const char* g, const char* name, const std::string& v, const char* expected) {
    return fmt::format("checkpoint '{}': attribute '{}{}' is {}, expected {} (the file is damaged)", path, g, name, v,
                       expected);
  };
  const H5Id root = obj("/");
  const int64_t it = a.i64(root, "iteration"), ws = a.i64(root, "world_size");
  if (it < 0) return bad("", "iteration", std::to_string(it), ">= 0");
  if (ws < 1) return bad("", "world_size", std::to_string(ws), ">= 1");
  if (H5_LOCKED(H5Lexists(file, "train_state", H5P_DEFAULT)) > 0) {
    const H5Id ts = obj("train_state");
    const int64_t ts_it = a.i64(ts, "iteration");
    if (ts_it != it) return bad("train_state/", "iteration", std::to_string(ts_it), fmt::format("{} (the root's)", it).c_str());
    for (const char* k : {"bad_steps"})
      if (a.has(ts, k) && a.i64(ts, k) < 0) return bad("train_state/", k, std::to_string(a.i64(ts, k)), ">= 0");
    for (const char* k : {"global_batch_sequences", "block_size"})
      if (a.has(ts, k) && a.i64(ts, k) < 1) return bad("train_state/", k, std::to_string(a.i64(ts, k)), ">= 1");
    if (a.has(ts, "best_val_loss") && std::isnan(a.f64(ts, "best_val_loss")))
      return bad("train_state/", "best_val_loss", "NaN", "a number or +inf");
  }
  if (H5_LOCKED(H5Lexists(file, "optimizer", H5P_DEFAULT)) > 0) {
    const H5Id o = obj("optimizer");
    if (a.has(o, "steps") && a.i64(o, "steps") < 0) return bad("optimizer/", "steps", std::to_string(a.i64(o, "steps")), ">= 0");
  }
  return "";
}

struct Visit {
  std::vector<std::string> datasets;
};
herr_t collect_dataset(hid_t g, const char* name, const H5L_info_t*, void* data) {
  const hid_t o = H5_LOCKED(H5Oopen(g, name, H5P_DEFAULT));
  if (o < 0) return 0;
  if (H5_LOCKED(H5Iget_type(o)) == H5I_DATASET) static_cast<Visit*>(data)->datasets.emplace_back(name);
  H5_LOCKED(H5Oclose(o));
  return 0;
}

}  // namespace

void CheckpointReader::check_metadata() const {
  const std::string p = metadata_problem(f_->file, f_->attrs, path_);
  if (!p.empty()) throw CheckpointUnusable(p);
}

std::vector<std::string> verify_checkpoint_file(const std::string& path, std::vector<std::string>& notes) {
  h5::quiet_hdf5_once();
  std::error_code ec;
  if (fs::is_directory(path, ec)) return {fmt::format("'{}' is a directory, not a checkpoint file", path)};
  if (!fs::is_regular_file(path)) return {fmt::format("'{}' does not exist", path)};
  if (H5_LOCKED(H5Fis_hdf5(path.c_str())) <= 0) return {fmt::format("'{}' is not an HDF5 file (truncated or overwritten?)", path)};
  const hid_t fid = H5_LOCKED(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (fid < 0) return {fmt::format("HDF5 cannot open '{}' (truncated?)", path)};
  H5Id file(fid, H5Fclose);
  const h5::AttrReader a = attr_reader(path);
  std::vector<std::string> problems;
  try {
    H5Id root(H5_CHECK(H5Oopen(file, "/", H5P_DEFAULT)), H5Oclose);
    if (a.str(root, "format") != "llmtrain-checkpoint") return {fmt::format("'{}' is not an llmtrain checkpoint", path)};
    if (std::string p = metadata_problem(file, a, path); !p.empty()) problems.push_back(p);
    Visit v;
    H5_CHECK(H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &v));
    int64_t unchecked = 0;
    for (const auto& name : v.datasets) {
      H5Id d(H5_CHECK(H5Dopen2(file, name.c_str(), H5P_DEFAULT)), H5Dclose);
      H5Id type(H5_CHECK(H5Dget_type(d)), H5Tclose);
      H5Id space(H5_CHECK(H5Dget_space(d)), H5Sclose);
      const auto n = static_cast<size_t>(H5_CHECK(H5Sget_simple_extent_npoints(space)));
      std::vector<uint8_t> buf(n * H5_LOCKED(H5Tget_size(type)));
      if (!buf.empty() && H5_LOCKED(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data())) < 0) {
        problems.push_back(fmt::format("checkpoint '{}': dataset '{}' cannot be read", path, name));
        continue;
      }
      if (!a.has(d, kCrcAttr)) {
        ++unchecked;
        continue;
      }
      const auto stored = static_cast<uint32_t>(a.i64(d, kCrcAttr)), got = crc32c(buf.data(), buf.size());
      if (stored != got)
        problems.push_back(fmt::format("checkpoint '{}': dataset '{}' fails its checksum (crc32c stored {:08x}, "
                                       "read {:08x})",
                                       path, name, stored, got));
    }
    if (unchecked)
      notes.push_back(fmt::format("{} of {} datasets carry no checksum (written before checksums): read, not verified",
                                  unchecked, v.datasets.size()));
    else
      notes.push_back(fmt::format("{} datasets, every crc32c verified", v.datasets.size()));
  } catch (const std::exception& e) {
    problems.push_back(e.what());
  }
  return problems;
}

}  // namespace llmtrain
