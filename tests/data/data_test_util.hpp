// Helpers for the data tests: a small synthetic corpus, prepared directories,
// and direct HDF5 access to shards.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "llmtrain/data/prepare.hpp"

namespace llmtrain::testing {

// A fresh, empty directory (same path on every rank; made by rank 0, then a barrier).
std::filesystem::path fresh_dir(const std::string& name);
// Writes `n_docs` text documents (varied lengths, all 256 byte values except 0)
// as files under dir/docs/, plus dir/docs.jsonl with `n_docs` more. Rank 0 writes;
// barrier. Returns the inputs for PrepareOptions.
std::vector<std::string> write_corpus(const std::filesystem::path& dir, int n_docs);
// prepare_data_on(MPI_COMM_WORLD) with progress off.
PrepareResult prepare_world(PrepareOptions o);
// Whole `tokens` dataset of a shard (as uint32), read with HDF5 directly.
std::vector<uint32_t> read_shard_tokens(const std::string& path);
// Writes a shard file by hand (for broken-data tests): dataset of `type`
// (an hid_t of a predefined HDF5 type) with the llmtrain attributes.
void write_raw_shard(const std::string& path, int64_t type, const std::vector<uint32_t>& tokens,
                     const std::string& tokenizer, int64_t vocab_size, const std::string& split);
std::string read_file(const std::filesystem::path& p);

}  // namespace llmtrain::testing
