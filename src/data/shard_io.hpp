// HDF5 token shards (docs/data-format.md): RAII handles, shard headers, and the
// collective writer used by llmtrain-prepare. Private to src/data.
#pragma once
#include <hdf5.h>
#include <mpi.h>

#include "core/hdf5_util.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "llmtrain/core/options.hpp"  // defines: Split

namespace llmtrain::data {

constexpr int64_t kFormatVersion = 1;
constexpr const char* kTokensDataset = "tokens";
// Per-chunk checksums: dataset "tokens_crc32c" (uint32, one per chunk of its
// attribute chunk_tokens tokens, the last chunk shorter), the CRC32C of each
// chunk's bytes as stored (docs/data-format.md). The loader checks a chunk the
// first time the process reads from it.
constexpr const char* kChunkCrcDataset = "tokens_crc32c";
constexpr int64_t kCrcChunkTokens = 65536;

using h5::H5Id;
using h5::make_mpio_fapl;

// What a shard's attributes and dataset say.
struct ShardHeader {
  std::string path;
  std::string split;
  int64_t shard_index = 0;
  int64_t num_tokens = 0;
  int64_t vocab_size = 0;
  int64_t eos_id = -1;
  int64_t format_version = 0;
  std::string tokenizer;
  std::string tokenizer_hash;
  std::string dtype;  // "uint16" | "uint32"
};

// The metadata written into every shard of one preparation.
struct ShardMeta {
  int64_t vocab_size = 0;
  int64_t eos_id = -1;
  std::string tokenizer;
  std::string tokenizer_hash;
  std::string dtype;  // "uint16" | "uint32"
};

// A shard's chunk checksums; chunk_tokens 0 (none) for shards prepared before them.
struct ChunkCrcs {
  int64_t chunk_tokens = 0;
  std::vector<uint32_t> crc;
  int64_t chunks_of(int64_t num_tokens) const { return (num_tokens + chunk_tokens - 1) / chunk_tokens; }
};
// Reads them from an open shard (DataError naming the file when malformed).
ChunkCrcs read_chunk_crcs(hid_t file, const std::string& path, int64_t num_tokens);
// The one-line error of a chunk that fails its checksum.
std::string chunk_crc_error(const std::string& path, const ChunkCrcs& c, int64_t chunk, int64_t num_tokens,
                            uint32_t got);

// "train_00003.h5": the split's word (to_string) and the index.
std::string shard_file_name(Split split, int64_t index);

// Opens a shard read-only through MPI-IO on MPI_COMM_SELF (see loader.cpp for why
// SELF) and checks its dataset (DataError naming the file otherwise).
H5Id open_shard_file(const std::string& path, MPI_Comm comm);
ShardHeader read_shard_header(const std::string& path);

// Writes one split as shards of `shard_tokens` tokens, collectively over `comm`.
// Rank r holds tokens [global_offset, global_offset + local.size()) of the split
// (ranks in order). Files are written as "<name>.tmp" and renamed by rank 0 once
// every shard is complete. Returns the token count of each shard (same on all ranks).
template <typename T>
std::vector<int64_t> write_split_shards(MPI_Comm comm, const std::string& out_dir, Split split,
                                        const std::vector<T>& local, int64_t global_offset,
                                        int64_t global_total, int64_t shard_tokens, const ShardMeta& meta);

}  // namespace llmtrain::data
