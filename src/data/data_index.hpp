// index.json of a data directory (docs/data-format.md): reading with every
// consistency check against the shards, and writing. Private to src/data.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llmtrain/data/loader.hpp"

namespace llmtrain::data {

struct ShardEntry {
  std::string file;  // relative to the directory
  int64_t tokens = 0;
};

struct DataIndex {
  DataInfo info;
  int64_t eos_id = -1;
  int64_t train_documents = 0, val_documents = 0;
  std::vector<ShardEntry> train, val;
};

// Reads dir/index.json and every shard header it lists; DataError naming the
// directory or file on anything missing or inconsistent.
DataIndex read_data_index(const std::string& dir);

// index.json's text for `index` (deterministic: sorted keys, no timestamps).
std::string data_index_json(const DataIndex& index, const std::vector<std::string>& sources);

}  // namespace llmtrain::data
