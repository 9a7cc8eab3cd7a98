// ShardSet: one split of a data directory as its readers see it (TokenLoader's
// windows, SplitTokens' stream for eval_full): the shards' paths and token
// counts, cumulative offsets, and reads through HDF5 handles opened on first
// use. Private to src/data.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "data/shard_io.hpp"
#include "llmtrain/core/options.hpp"
#include "llmtrain/data/loader.hpp"

namespace llmtrain::data {

// The order of a split's shards: the index's (the training loader numbers its
// windows so), or by file name (SplitTokens' stream).
enum class ShardOrder { index, file_name };

// Cumulative counts over shards: prefix[s] = the counts of shards < s, back() =
// the total. Position pos in [0, prefix.back()) -> (shard s, pos - prefix[s]).
std::pair<size_t, int64_t> locate(const std::vector<int64_t>& prefix, int64_t pos);

// Reads take hdf5_mutex() (safe from the loader's worker threads).
class ShardSet {
 public:
  // DataError naming the directory when the split is empty, or the index is
  // bad (read_data_index's checks).
  // use_mpio = false reads through the POSIX (sec2) driver: for threads that
  // must not call MPI (no MPI_THREAD_MULTIPLE).
  ShardSet(const std::string& data_dir, Split split, ShardOrder order, bool use_mpio = true);
  ~ShardSet();
  ShardSet(const ShardSet&) = delete;
  ShardSet& operator=(const ShardSet&) = delete;

  const DataInfo& info() const { return info_; }
  size_t num_shards() const { return paths_.size(); }
  const std::string& path(size_t s) const { return paths_[s]; }
  int64_t tokens(size_t s) const { return token_prefix_[s + 1] - token_prefix_[s]; }
  const std::vector<int64_t>& token_prefix() const { return token_prefix_; }
  int64_t total_tokens() const { return token_prefix_.back(); }

  // Tokens [offset, offset + n) of shard s, widened to int64, into out[0, n).
  // DataError naming the shard for an id outside the vocabulary.
  void read(size_t s, int64_t offset, int64_t n, int64_t* out);
  // Tokens [begin, begin + n) of the shards end to end (crossing shard boundaries).
  void read_stream(int64_t begin, int64_t n, int64_t* out);

 private:
  hid_t dataset(size_t s);
  std::pair<int64_t, int64_t> read_range(size_t s, int64_t offset, int64_t n);
  // Tokens [lo, hi) of shard s were read into `bytes`: the chunks among them not
  // yet verified are checked and marked (DataError naming the file and chunk).
  void verify_chunks(size_t s, int64_t lo, int64_t hi, const uint8_t* bytes, size_t esize);

  DataInfo info_;
  bool use_mpio_ = true;
  std::vector<std::string> paths_;
  std::vector<int64_t> token_prefix_;
  std::vector<H5Id> files_, dsets_;  // opened on first use (under hdf5_mutex())
  // Each shard's chunk checksums (read with the dataset) and which chunks this
  // process has verified (under verified_mutex_): every chunk is checked the
  // first time a read touches it.
  std::vector<ChunkCrcs> crcs_;
  std::vector<std::vector<uint8_t>> verified_;
  std::mutex verified_mutex_;
};

}  // namespace llmtrain::data
