#include "data/shard_set.hpp"

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <tuple>

#include <fmt/format.h>

#include "data/data_index.hpp"
#include "llmtrain/core/activity_note.hpp"  // defines: ActivityNote (what the watchdog names if a file open hangs)
#include "llmtrain/core/crc32c.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/core/log.hpp"
#include "llmtrain/core/hdf5_mutex.hpp"

namespace llmtrain::data {

namespace fs = std::filesystem;

std::pair<size_t, int64_t> locate(const std::vector<int64_t>& prefix, int64_t pos) {
  const auto it = std::upper_bound(prefix.begin(), prefix.end(), pos);
  const size_t s = static_cast<size_t>(it - prefix.begin()) - 1;
  return {s, pos - prefix[s]};
}

ShardSet::ShardSet(const std::string& data_dir, Split split, ShardOrder order, bool use_mpio) : use_mpio_(use_mpio) {
  const DataIndex index = read_data_index(data_dir);
  info_ = index.info;
  std::vector<ShardEntry> shards = split == Split::train ? index.train : index.val;
  if (shards.empty())
    throw DataError(fmt::format("split '{}' of data directory '{}' is empty (0 tokens); prepare it with "
                                "llmtrain-prepare --val_fraction > 0",
                                to_string(split), data_dir));
  if (order == ShardOrder::file_name)
    std::sort(shards.begin(), shards.end(), [](const ShardEntry& a, const ShardEntry& b) { return a.file < b.file; });
  token_prefix_.push_back(0);
  for (const auto& sh : shards) {
    paths_.push_back((fs::path(data_dir) / sh.file).string());
    token_prefix_.push_back(token_prefix_.back() + sh.tokens);
  }
  files_.resize(shards.size());
  dsets_.resize(shards.size());
  crcs_.resize(shards.size());
  verified_.resize(shards.size());
}

ShardSet::~ShardSet() {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  dsets_.clear();
  files_.clear();
}

hid_t ShardSet::dataset(size_t s) {
  if (dsets_[s].get() < 0) {
    // Each rank opens its own read-only handle on MPI_COMM_SELF and reads with
    // independent transfers. Ranks read different random windows, and a
    // collective open/read on MPI_COMM_WORLD would make every read a
    // synchronisation point across ranks (and would have to be issued from the
    // loader's worker threads at the same time as the trainer's collectives on
    // the same communicator); two-phase collective buffering also gains nothing
    // for a few KiB at scattered offsets. Without MPI_THREAD_MULTIPLE, worker
    // threads must not call MPI at all, so then the POSIX (sec2) driver reads
    // the same bytes.
    if (use_mpio_) {
      files_[s] = open_shard_file(paths_[s], MPI_COMM_SELF);
    } else {
      H5Id fapl(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
      H5_CHECK(H5Pset_fapl_sec2(fapl));
      const ActivityNote note("opening " + paths_[s]);
      files_[s] = H5Id(H5_CHECK(H5Fopen(paths_[s].c_str(), H5F_ACC_RDONLY, fapl)), H5Fclose);
    }
    dsets_[s] = H5Id(H5_CHECK(H5Dopen2(files_[s], kTokensDataset, H5P_DEFAULT)), H5Dclose);
    crcs_[s] = read_chunk_crcs(files_[s], paths_[s], tokens(s));
    std::lock_guard<std::mutex> v(verified_mutex_);
    verified_[s].assign(crcs_[s].crc.size(), 0);
    static std::once_flag noted;  // once per process
    if (crcs_[s].chunk_tokens == 0)
      std::call_once(noted, [&] {
        log::info("shard {} has no chunk checksums (prepared by an older llmtrain-prepare): its tokens are read "
                  "unverified; preparing the data again adds them (docs/data-format.md)",
                  paths_[s]);
      });
  }
  return dsets_[s];
}

void ShardSet::verify_chunks(size_t s, int64_t lo, int64_t hi, const uint8_t* bytes, size_t esize) {
  const ChunkCrcs& c = crcs_[s];
  for (int64_t k = lo / c.chunk_tokens; k * c.chunk_tokens < hi; ++k) {
    const int64_t a = k * c.chunk_tokens, b = std::min(tokens(s), a + c.chunk_tokens);
    if (a < lo || b > hi) continue;  // only in part here: checked by a read that holds all of it
    {
      std::lock_guard<std::mutex> v(verified_mutex_);
      if (verified_[s][static_cast<size_t>(k)]) continue;
    }
    const uint32_t got = crc32c(bytes + static_cast<size_t>(a - lo) * esize, static_cast<size_t>(b - a) * esize);
    if (got != c.crc[static_cast<size_t>(k)]) throw DataError(chunk_crc_error(paths_[s], c, k, tokens(s), got));
    std::lock_guard<std::mutex> v(verified_mutex_);
    verified_[s][static_cast<size_t>(k)] = 1;
  }
}

// Tokens [lo, hi) widened to whole chunks where one of them is not verified yet.
std::pair<int64_t, int64_t> ShardSet::read_range(size_t s, int64_t offset, int64_t n) {
  const ChunkCrcs& c = crcs_[s];
  if (c.chunk_tokens == 0 || n <= 0) return {offset, offset + n};
  const int64_t k0 = offset / c.chunk_tokens, k1 = (offset + n - 1) / c.chunk_tokens;
  std::lock_guard<std::mutex> v(verified_mutex_);
  for (int64_t k = k0; k <= k1; ++k)
    if (!verified_[s][static_cast<size_t>(k)])
      return {k0 * c.chunk_tokens, std::min(tokens(s), (k1 + 1) * c.chunk_tokens)};
  return {offset, offset + n};
}

void ShardSet::read(size_t s, int64_t offset, int64_t n, int64_t* out) {
  const bool u16 = info_.token_dtype == "uint16";
  const size_t esize = u16 ? 2 : 4;
  std::vector<uint8_t> buf;
  int64_t lo = offset, hi = offset + n;
  {
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    const hid_t d = dataset(s);
    std::tie(lo, hi) = read_range(s, offset, n);
    buf.resize(static_cast<size_t>(hi - lo) * esize);
    H5Id fspace(H5_CHECK(H5Dget_space(d)), H5Sclose);
    const hsize_t start = static_cast<hsize_t>(lo), count = static_cast<hsize_t>(hi - lo);
    H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, nullptr, &count, nullptr));
    H5Id mspace(H5_CHECK(H5Screate_simple(1, &count, nullptr)), H5Sclose);
    H5_CHECK(H5Dread(d, u16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32, mspace, fspace, H5P_DEFAULT, buf.data()));
  }
  if (crcs_[s].chunk_tokens > 0) verify_chunks(s, lo, hi, buf.data(), esize);
  const auto* b16 = reinterpret_cast<const uint16_t*>(buf.data()) + (offset - lo);
  const auto* b32 = reinterpret_cast<const uint32_t*>(buf.data()) + (offset - lo);
  int64_t mx = 0;
  for (int64_t i = 0; i < n; ++i) mx = std::max<int64_t>(mx, out[i] = u16 ? b16[i] : b32[i]);
  // Cheap load-time guard (one max per read): an id >= vocab would index past
  // the embedding table and crash or silently corrupt training.
  if (mx >= info_.vocab_size)
    throw DataError(fmt::format("shard '{}' holds token id {} in tokens [{}, {}) but the vocabulary has {} ids "
                                "(corrupt shard, or data prepared with another tokenizer)",
                                paths_[s], mx, offset, offset + n, info_.vocab_size));
}

void ShardSet::read_stream(int64_t begin, int64_t n, int64_t* out) {
  LLMTRAIN_CHECK(begin >= 0 && n >= 0 && begin + n <= total_tokens(),
                 "ShardSet::read_stream: tokens [{}, {}) outside [0, {})", begin, begin + n, total_tokens());
  for (int64_t pos = begin; pos < begin + n;) {
    const auto [s, off] = locate(token_prefix_, pos);
    const int64_t take = std::min(begin + n - pos, token_prefix_[s + 1] - pos);
    read(s, off, take, out + (pos - begin));
    pos += take;
  }
}

}  // namespace llmtrain::data
