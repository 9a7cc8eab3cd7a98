// HDF5 token shards: headers and the collective shard writer (docs/data-format.md).
#include "data/shard_io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "data/data_index.hpp"
#include "llmtrain/core/activity_note.hpp"  // defines: ActivityNote (what the watchdog names if a file open hangs)
#include "llmtrain/core/atomic_file.hpp"
#include "llmtrain/core/crc32c.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/core/hdf5_mutex.hpp"

namespace llmtrain {
namespace data {

namespace fs = std::filesystem;

std::string shard_file_name(Split split, int64_t index) {
  return fmt::format("{}_{:05d}.h5", to_string(split), index);
}

H5Id open_shard_file(const std::string& path, MPI_Comm comm) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  // The OS's reason first (EACCES, EIO, ...): HDF5 would only say "unable to open".
  if (const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    ::close(fd);
  } else if (errno == ENOENT) {
    throw DataError(fmt::format("shard '{}' is missing (listed in the data directory's index.json); "
                                "re-run llmtrain-prepare", path));
  } else {
    throw DataError(fmt::format("cannot read shard '{}': {}", path, std::strerror(errno)));
  }
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw DataError(fmt::format("shard '{}' is not a regular file", path));
  const htri_t is_h5 = H5_LOCKED(H5Fis_hdf5(path.c_str()));
  if (is_h5 <= 0)
    throw DataError(fmt::format("shard '{}' is not a readable HDF5 file (truncated or not written by "
                                "llmtrain-prepare)", path));
  H5Id fapl = make_mpio_fapl(comm);
  const ActivityNote note("opening " + path);
  try {
    return H5Id(H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl)), H5Fclose);
  } catch (const Error& e) {
    throw DataError(fmt::format("shard '{}' is not a readable HDF5 file (truncated or not written by "
                                "llmtrain-prepare): {}", path, e.what()));
  }
}

ShardHeader read_shard_header(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  H5Id file = open_shard_file(path, MPI_COMM_SELF);
  if (H5_CHECK(H5Lexists(file, kTokensDataset, H5P_DEFAULT)) <= 0)
    throw DataError(fmt::format("shard '{}' has no dataset '{}'", path, kTokensDataset));
  H5Id dset(H5_CHECK(H5Dopen2(file, kTokensDataset, H5P_DEFAULT)), H5Dclose);
  ShardHeader h;
  h.path = path;
  H5Id type(H5_CHECK(H5Dget_type(dset)), H5Tclose);
  const size_t size = H5_LOCKED(H5Tget_size(type));
  const H5T_class_t type_class = static_cast<H5T_class_t>(H5_CHECK(H5Tget_class(type)));
  const bool is_unsigned = H5_LOCKED(H5Tget_sign(type)) == H5T_SGN_NONE;
  const bool uint_ok = type_class == H5T_INTEGER && is_unsigned && (size == 2 || size == 4);
  if (!uint_ok) {
    const char* cls = type_class == H5T_INTEGER ? (is_unsigned ? "uint" : "int")
                      : type_class == H5T_FLOAT ? "float"
                                                : "non-integer";
    throw DataError(fmt::format("shard '{}': dataset 'tokens' has type {}{}; expected uint16 or uint32", path,
                                cls, size * 8));
  }
  h.dtype = size == 2 ? "uint16" : "uint32";
  H5Id space(H5_CHECK(H5Dget_space(dset)), H5Sclose);
  if (H5_CHECK(H5Sget_simple_extent_ndims(space)) != 1)
    throw DataError(fmt::format("shard '{}': dataset 'tokens' must be 1-D", path));
  hsize_t n = 0;
  H5_CHECK(H5Sget_simple_extent_dims(space, &n, nullptr));
  h.num_tokens = static_cast<int64_t>(n);
  const h5::AttrReader attr(fmt::format("shard '{}', dataset 'tokens'", path),
                            "not written by llmtrain-prepare? see docs/data-format.md", /*data_error=*/true);
  h.format_version = attr.i64(dset, "format_version");
  if (h.format_version != kFormatVersion)
    throw DataError(fmt::format("shard '{}' has format_version {}; this llmtrain reads version {}", path,
                                h.format_version, kFormatVersion));
  h.vocab_size = attr.i64(dset, "vocab_size");
  h.eos_id = attr.i64(dset, "eos_id");
  h.shard_index = attr.i64(dset, "shard_index");
  const int64_t attr_n = attr.i64(dset, "num_tokens");
  if (attr_n != h.num_tokens)
    throw DataError(fmt::format("shard '{}': attribute num_tokens = {} but the dataset holds {} tokens "
                                "(incomplete write?)", path, attr_n, h.num_tokens));
  h.tokenizer = attr.str(dset, "tokenizer");
  h.tokenizer_hash = attr.str(dset, "tokenizer_hash");
  h.split = attr.str(dset, "split");
  return h;
}

ChunkCrcs read_chunk_crcs(hid_t file, const std::string& path, int64_t num_tokens) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  ChunkCrcs c;
  if (H5_CHECK(H5Lexists(file, kChunkCrcDataset, H5P_DEFAULT)) <= 0) return c;  // prepared before chunk checksums
  H5Id d(H5_CHECK(H5Dopen2(file, kChunkCrcDataset, H5P_DEFAULT)), H5Dclose);
  const h5::AttrReader attr(fmt::format("shard '{}', dataset '{}'", path, kChunkCrcDataset),
                            "not written by llmtrain-prepare? see docs/data-format.md", /*data_error=*/true);
  c.chunk_tokens = attr.i64(d, "chunk_tokens");
  H5Id space(H5_CHECK(H5Dget_space(d)), H5Sclose);
  const auto n = static_cast<int64_t>(H5_CHECK(H5Sget_simple_extent_npoints(space)));
  if (c.chunk_tokens < 1 || n != c.chunks_of(num_tokens))
    throw DataError(fmt::format("shard '{}': dataset '{}' holds {} checksums of chunks of {} tokens, but {} tokens "
                                "need {} (the file is damaged)",
                                path, kChunkCrcDataset, n, c.chunk_tokens, num_tokens,
                                c.chunk_tokens < 1 ? 0 : c.chunks_of(num_tokens)));
  c.crc.resize(static_cast<size_t>(n));
  if (n > 0) H5_CHECK(H5Dread(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, c.crc.data()));
  return c;
}

std::string chunk_crc_error(const std::string& path, const ChunkCrcs& c, int64_t chunk, int64_t num_tokens,
                            uint32_t got) {
  const int64_t a = chunk * c.chunk_tokens, b = std::min(num_tokens, a + c.chunk_tokens);
  return fmt::format("shard '{}', dataset '{}': chunk {} (tokens [{}, {})) fails its checksum (crc32c stored {:08x}, "
                     "read {:08x}): the file is corrupt; llmtrain-prepare --verify {} checks every shard",
                     path, kTokensDataset, chunk, a, b, c.crc[static_cast<size_t>(chunk)], got,
                     fs::path(path).parent_path().string());
}

namespace {

// A shard's chunk checksums from every rank's part of it, tokens [lo, hi) at
// `part` (shard-relative chunk k covers [begin + k*C, begin + (k+1)*C)): a chunk
// that straddles two ranks is joined from their pieces in order (crc32c_combine).
template <typename T>
std::vector<uint32_t> gather_chunk_crcs(MPI_Comm comm, const T* part, int64_t lo, int64_t hi, int64_t begin,
                                        int64_t n) {
  constexpr int64_t C = kCrcChunkTokens;
  std::vector<uint64_t> mine;  // (chunk, byte offset in the chunk, bytes, crc) per piece
  for (int64_t p = lo; p < hi;) {
    const int64_t k = (p - begin) / C, q = std::min(hi, begin + (k + 1) * C);
    const auto bytes = static_cast<uint64_t>(q - p) * sizeof(T);
    mine.insert(mine.end(), {static_cast<uint64_t>(k), static_cast<uint64_t>(p - begin - k * C) * sizeof(T), bytes,
                             crc32c(part + (p - lo), bytes)});
    p = q;
  }
  int world = 0;
  MPI_CHECK(MPI_Comm_size(comm, &world));
  const int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<size_t>(world)), displs(static_cast<size_t>(world));
  MPI_CHECK(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm));
  int total = 0;
  for (int r = 0; r < world; ++r) displs[r] = total, total += counts[r];
  std::vector<uint64_t> all(static_cast<size_t>(total));
  MPI_CHECK(MPI_Allgatherv(mine.data(), count, MPI_UINT64_T, all.data(), counts.data(), displs.data(), MPI_UINT64_T,
                           comm));
  std::vector<std::array<uint64_t, 4>> pieces;
  for (size_t i = 0; i + 3 < all.size(); i += 4) pieces.push_back({all[i], all[i + 1], all[i + 2], all[i + 3]});
  std::sort(pieces.begin(), pieces.end());
  std::vector<uint32_t> crc(static_cast<size_t>((n + C - 1) / C), 0);
  for (const auto& p : pieces) crc[p[0]] = crc32c_combine(crc[p[0]], static_cast<uint32_t>(p[3]), p[2]);
  return crc;
}

// The whole shard's CRC32C from every rank's (offset, bytes, crc) of its part.
uint32_t combine_parts(MPI_Comm comm, uint64_t offset, uint64_t bytes, uint32_t crc) {
  int world = 0;
  MPI_CHECK(MPI_Comm_size(comm, &world));
  uint64_t mine[3] = {offset, bytes, crc};
  std::vector<uint64_t> all(static_cast<size_t>(world) * 3);
  MPI_CHECK(MPI_Allgather(mine, 3, MPI_UINT64_T, all.data(), 3, MPI_UINT64_T, comm));
  std::vector<std::array<uint64_t, 3>> parts;
  for (int r = 0; r < world; ++r)
    if (all[3 * r + 1] > 0) parts.push_back({all[3 * r], all[3 * r + 1], all[3 * r + 2]});
  std::sort(parts.begin(), parts.end());
  uint32_t out = 0;
  for (const auto& p : parts) out = crc32c_combine(out, static_cast<uint32_t>(p[2]), p[1]);
  return out;
}

// Collective: the first failing rank's message and errno ("" when none).
std::string agree_on_write_failure(MPI_Comm comm, const std::string& mine, int& err) {
  int rank = 0, world = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &world));
  int first = mine.empty() ? world : rank;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == world) return "";
  MPI_CHECK(MPI_Bcast(&err, 1, MPI_INT, first, comm));
  int n = static_cast<int>(mine.size());
  MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT, first, comm));
  std::string text = mine;
  text.resize(static_cast<size_t>(n));
  MPI_CHECK(MPI_Bcast(text.data(), n, MPI_CHAR, first, comm));
  return text;
}

// Creates `path` empty, allocates `bytes` for it and gives them back: "" when the
// file system had them, else what failed (errno in `err`). Where fallocate is not
// supported (some NFS), statvfs's free count decides.
std::string reserve_space(const std::string& path, const std::string& dir, int64_t bytes, int& err) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    err = errno;
    return fmt::format("creating shard '{}'", path);
  }
  int rc = ::fallocate(fd, 0, 0, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
  if (rc == EOPNOTSUPP || rc == ENOSYS) rc = free_bytes(dir) >= bytes ? 0 : ENOSPC;
  if (::ftruncate(fd, 0) != 0 && rc == 0) rc = errno;  // the space goes back (H5Fcreate truncates too)
  ::close(fd);
  if (rc == 0) return "";
  err = rc;
  return fmt::format("writing shard '{}'", path);
}

// An upper bound of a shard file's size: its tokens, one checksum per chunk, and
// HDF5's metadata (superblock, root group, two object headers with their
// attributes: about 4 KiB measured, docs/data-format.md).
int64_t shard_file_bound(int64_t n, int64_t token_bytes) {
  return n * token_bytes + (n + kCrcChunkTokens - 1) / kCrcChunkTokens * 4 + (int64_t{64} << 10);
}

}  // namespace

template <typename T>
std::vector<int64_t> write_split_shards(MPI_Comm comm, const std::string& out_dir, Split split,
                                        const std::vector<T>& local, int64_t global_offset,
                                        int64_t global_total, int64_t shard_tokens, const ShardMeta& meta) {
  static_assert(std::is_same_v<T, uint16_t> || std::is_same_v<T, uint32_t>);
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  const hid_t file_type = H5_LOCKED(std::is_same_v<T, uint16_t> ? H5T_STD_U16LE : H5T_STD_U32LE);
  const hid_t mem_type = H5_LOCKED(std::is_same_v<T, uint16_t> ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32);
  std::vector<int64_t> counts;
  std::vector<std::string> names;
  const int64_t nshards = (global_total + shard_tokens - 1) / shard_tokens;
  const int64_t local_begin = global_offset, local_end = global_offset + static_cast<int64_t>(local.size());
  h5::quiet_hdf5_once();  // a failed write is reported below, naming the file and the disk
  for (int64_t s = 0; s < nshards; ++s) {
    const int64_t begin = s * shard_tokens, end = std::min(global_total, begin + shard_tokens);
    const int64_t n = end - begin;
    const std::string name = shard_file_name(split, s);
    const std::string tmp = (fs::path(out_dir) / (name + ".tmp")).string();
    // What a failure says, agreed by all ranks, after which the .tmp file is removed.
    const auto throw_failure = [&](const std::string& what, int err) {
      std::error_code ec;
      if (rank == 0) fs::remove(tmp, ec);
      const int64_t needed = (global_total - begin) * static_cast<int64_t>(sizeof(T));
      throw DataError(fmt::format("{} failed: {} ({} bytes free on the file system of '{}', {} more needed for the "
                                  "{} split); the data directory is left as it was",
                                  what, err ? std::strerror(err) : "the HDF5 write failed", free_bytes(out_dir),
                                  out_dir, needed, to_string(split)));
    };
    // The shard's space first, before HDF5 touches the file. Parallel HDF5 has no
    // collective error path: a write that fails on one rank inside H5Fclose's
    // metadata flush leaves the others waiting in its collectives for ever (a full
    // disk hung prepare that way). Allocated and given back here, the space is
    // there for the writes below, and a full disk is found where all ranks agree.
    {
      int err = 0;
      std::string failure;
      if (rank == 0) failure = reserve_space(tmp, out_dir, shard_file_bound(n, sizeof(T)), err);
      failure = agree_on_write_failure(comm, failure, err);
      if (!failure.empty()) throw_failure(failure, err);
    }

    // Times off and fixed-size attributes: the file's bytes depend only on the tokens
    // and the metadata, never on the clock or the number of ranks.
    H5Id fcpl(H5_CHECK(H5Pcreate(H5P_FILE_CREATE)), H5Pclose);
    H5_CHECK(H5Pset_obj_track_times(fcpl, false));
    H5Id fapl = make_mpio_fapl(comm);
    // Closed by hand below, with its error checked (the last data and metadata
    // reach the disk there: a full disk shows up at this close); closed without a
    // check only when an exception leaves early.
    struct FileGuard {
      hid_t id;
      ~FileGuard() { if (id >= 0) H5_LOCKED(H5Fclose(id)); }
    } file{[&] {
      const ActivityNote note("creating " + tmp);
      return H5_CHECK(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, fcpl, fapl));
    }()};
    const hsize_t dims = static_cast<hsize_t>(n);
    H5Id fspace(H5_CHECK(H5Screate_simple(1, &dims, nullptr)), H5Sclose);
    // Contiguous + early allocation: a window is one contiguous byte range on disk,
    // and parallel HDF5 needs the space allocated at creation anyway.
    H5Id dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
    H5_CHECK(H5Pset_layout(dcpl, H5D_CONTIGUOUS));
    H5_CHECK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));
    H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
    H5_CHECK(H5Pset_obj_track_times(dcpl, false));
    H5Id dset(H5_CHECK(H5Dcreate2(file.id, kTokensDataset, file_type, fspace, H5P_DEFAULT, dcpl, H5P_DEFAULT)),
              H5Dclose);
    // Attributes are metadata: every rank of `comm` writes the same values.
    h5::write_attr(dset, "format_version", kFormatVersion);
    h5::write_attr(dset, "vocab_size", meta.vocab_size);
    h5::write_attr(dset, "eos_id", meta.eos_id);
    h5::write_attr(dset, "num_tokens", n);
    h5::write_attr(dset, "shard_index", s);
    h5::write_attr(dset, "tokenizer", meta.tokenizer, h5::StrPad::nullterm);
    h5::write_attr(dset, "tokenizer_hash", meta.tokenizer_hash, h5::StrPad::nullterm);
    h5::write_attr(dset, "split", std::string(to_string(split)), h5::StrPad::nullterm);

    // This rank's part of the shard, written independently in pieces of at most
    // 2^28 tokens (MPI-IO counts are int).
    // A failed write is kept, not thrown: every rank goes on to the same
    // collective calls, then all learn of it together (no rank left waiting).
    std::string failure;
    int err = 0;
    const auto fail = [&](const char* what) {
      if (!failure.empty()) return;
      err = errno;
      if (err != ENOSPC && free_bytes(out_dir) < (int64_t{1} << 20)) err = ENOSPC;  // MPI-IO may not keep errno
      failure = fmt::format("{} '{}'", what, tmp);
    };
    const int64_t lo = std::max(begin, local_begin), hi = std::min(end, local_end);
    for (int64_t p = lo; p < hi && failure.empty(); p += (int64_t{1} << 28)) {
      const int64_t q = std::min(hi, p + (int64_t{1} << 28));
      const hsize_t start = static_cast<hsize_t>(p - begin), count = static_cast<hsize_t>(q - p);
      H5Id sel(H5_CHECK(H5Scopy(fspace)), H5Sclose);
      H5_CHECK(H5Sselect_hyperslab(sel, H5S_SELECT_SET, &start, nullptr, &count, nullptr));
      H5Id mspace(H5_CHECK(H5Screate_simple(1, &count, nullptr)), H5Sclose);
      errno = 0;
      if (H5_LOCKED(H5Dwrite(dset, mem_type, mspace, sel, H5P_DEFAULT, local.data() + (p - local_begin))) < 0)
        fail("writing shard");
    }
    // The shard's checksum, from each rank's part while it is in memory (docs/data-format.md).
    const uint64_t part_bytes = hi > lo ? static_cast<uint64_t>(hi - lo) * sizeof(T) : 0;
    const uint32_t part_crc = part_bytes ? crc32c(local.data() + (lo - local_begin), part_bytes) : 0;
    const uint32_t crc = combine_parts(comm, static_cast<uint64_t>(std::max<int64_t>(lo - begin, 0)) * sizeof(T),
                                       part_bytes, part_crc);
    h5::write_attr(dset, "crc32c", static_cast<int64_t>(crc));
    dset.reset();
    // Each chunk's checksum (what the loader verifies), written by rank 0.
    const std::vector<uint32_t> chunks =
        gather_chunk_crcs(comm, hi > lo ? local.data() + (lo - local_begin) : nullptr, lo, hi, begin, n);
    {
      const auto nc = static_cast<hsize_t>(chunks.size());
      H5Id cspace(H5_CHECK(H5Screate_simple(1, &nc, nullptr)), H5Sclose);
      H5Id cset(H5_CHECK(H5Dcreate2(file.id, kChunkCrcDataset, H5T_STD_U32LE, cspace, H5P_DEFAULT, dcpl,
                                    H5P_DEFAULT)),
                H5Dclose);
      h5::write_attr(cset, "chunk_tokens", kCrcChunkTokens);
      errno = 0;
      if (rank == 0 && failure.empty() &&
          H5_LOCKED(H5Dwrite(cset, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, chunks.data())) < 0)
        fail("writing shard");
    }
    const hid_t id = std::exchange(file.id, -1);
    errno = 0;
    if (H5_LOCKED(H5Fclose(id)) < 0) fail("closing shard");  // collective: every rank's data is written after this
    failure = agree_on_write_failure(comm, failure, err);
    if (!failure.empty()) throw_failure(failure, err);
    counts.push_back(n);
    names.push_back(name);
  }
  MPI_CHECK(MPI_Barrier(comm));
  if (rank == 0) {
    // On disk before their final names appear (core/atomic_file.hpp's rule).
    for (const auto& name : names) publish_file(fs::path(out_dir) / (name + ".tmp"), fs::path(out_dir) / name);
  }
  MPI_CHECK(MPI_Barrier(comm));
  return counts;
}

template std::vector<int64_t> write_split_shards<uint16_t>(MPI_Comm, const std::string&, Split,
                                                           const std::vector<uint16_t>&, int64_t, int64_t,
                                                           int64_t, const ShardMeta&);
template std::vector<int64_t> write_split_shards<uint32_t>(MPI_Comm, const std::string&, Split,
                                                           const std::vector<uint32_t>&, int64_t, int64_t,
                                                           int64_t, const ShardMeta&);

namespace {

// One shard read whole, in pieces of whole chunks: every chunk and the shard's
// crc32c attribute checked. "" when sound, else the first problem; `chunks` the
// number of chunks verified (0: the shard has no chunk checksums).
std::string verify_shard(const std::string& path, int64_t& chunks) {
  const ShardHeader h = read_shard_header(path);
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  H5Id file = open_shard_file(path, MPI_COMM_SELF);
  H5Id d(H5_CHECK(H5Dopen2(file, kTokensDataset, H5P_DEFAULT)), H5Dclose);
  const ChunkCrcs c = read_chunk_crcs(file, path, h.num_tokens);
  const size_t esize = h.dtype == "uint16" ? 2 : 4;
  const int64_t step = c.chunk_tokens > 0 ? c.chunk_tokens * std::max<int64_t>(1, (int64_t{1} << 24) / c.chunk_tokens)
                                          : int64_t{1} << 24;
  std::vector<uint8_t> buf;
  uint32_t whole = 0;
  chunks = 0;
  for (int64_t pos = 0; pos < h.num_tokens; pos += step) {
    const int64_t n = std::min(step, h.num_tokens - pos);
    buf.resize(static_cast<size_t>(n) * esize);
    H5Id fspace(H5_CHECK(H5Dget_space(d)), H5Sclose);
    const hsize_t start = static_cast<hsize_t>(pos), count = static_cast<hsize_t>(n);
    H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, nullptr, &count, nullptr));
    H5Id mspace(H5_CHECK(H5Screate_simple(1, &count, nullptr)), H5Sclose);
    H5_CHECK(H5Dread(d, esize == 2 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32, mspace, fspace, H5P_DEFAULT, buf.data()));
    whole = crc32c(buf.data(), buf.size(), whole);
    for (int64_t t = 0; c.chunk_tokens > 0 && t < n; t += c.chunk_tokens, ++chunks) {
      const size_t bytes = static_cast<size_t>(std::min(c.chunk_tokens, n - t)) * esize;
      const uint32_t got = crc32c(buf.data() + static_cast<size_t>(t) * esize, bytes);
      if (got != c.crc[static_cast<size_t>((pos + t) / c.chunk_tokens)])
        return chunk_crc_error(path, c, (pos + t) / c.chunk_tokens, h.num_tokens, got);
    }
  }
  const h5::AttrReader attr(fmt::format("shard '{}', dataset 'tokens'", path), "see docs/data-format.md", true);
  if (attr.has(d, "crc32c") && static_cast<uint32_t>(attr.i64(d, "crc32c")) != whole)
    return fmt::format("shard '{}', dataset '{}' fails its checksum (crc32c stored {:08x}, read {:08x}): the file is "
                       "corrupt",
                       path, kTokensDataset, static_cast<uint32_t>(attr.i64(d, "crc32c")), whole);
  return "";
}

}  // namespace

}  // namespace data

int verify_data_dir(const std::string& dir, std::ostream& out) {
  const data::DataIndex index = data::read_data_index(dir);
  int bad = 0, total = 0;
  for (const auto* split : {&index.train, &index.val}) {
    for (const auto& sh : *split) {
      const std::string path = (std::filesystem::path(dir) / sh.file).string();
      ++total;
      int64_t chunks = 0;
      std::string problem;
      try {
        problem = data::verify_shard(path, chunks);
      } catch (const Error& e) {
        problem = e.what();
      }
      if (!problem.empty()) {
        ++bad;
        out << fmt::format("BAD  {}: {}\n", path, problem);
      } else {
        out << fmt::format("ok   {}: {} tokens, {}\n", path, sh.tokens,
                           chunks ? fmt::format("{} chunk crc32c(s) and the shard's verified", chunks)
                                  : std::string("no chunk checksums (an older llmtrain-prepare): the shard's crc32c "
                                                "verified"));
      }
    }
  }
  out << fmt::format("{} of {} shard(s) sound\n", total - bad, total);
  return bad;
}

}  // namespace llmtrain
