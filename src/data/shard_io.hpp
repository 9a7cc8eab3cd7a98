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
