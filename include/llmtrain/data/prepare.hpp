// prepare_data: text / JSONL / nanoGPT .bin -> a directory of HDF5 token shards
// plus index.json (docs/data-format.md). The library side of llmtrain-prepare.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace llmtrain {

class Runtime;

struct PrepareOptions {
  // Text inputs: UTF-8 files (one document each), directories of them (recursive,
  // sorted; hidden files skipped), or JSONL files (*.jsonl, *.ndjson: one document
  // per line, taken from its "text" field).
  std::vector<std::string> inputs;
  // Only files with these extensions (".txt") are taken from directories; empty = all.
  std::vector<std::string> extensions;
  std::string out_dir;
  std::string tokenizer = "byte";   // make_tokenizer() spec
  double val_fraction = 0.1;        // share of documents that go to val (by hash)
  uint64_t split_seed = 0;          // seed of the per-document train/val hash
  int64_t shard_tokens = 100'000'000;
  // nanoGPT import: a directory with train.bin / val.bin (raw little-endian uint16)
  // taken as-is; vocab_size is then required and checked, tokenizer_name recorded.
  std::string from_nanogpt;
  int64_t vocab_size = 0;
  std::string tokenizer_name = "nanogpt";
  bool progress = true;             // progress line on rank 0
};

struct PrepareResult {
  int64_t train_tokens = 0, val_tokens = 0;
  int64_t train_documents = 0, val_documents = 0;
  int64_t train_shards = 0, val_shards = 0;
  double seconds = 0.0;
  int world_size = 1;
};

// Collective over all ranks of `rt`: ranks read and tokenize disjoint documents;
// the output bytes do not depend on the number of ranks. Throws DataError naming
// the file (and line for JSONL) on bad input.
PrepareResult prepare_data(const PrepareOptions& options, const Runtime& rt);

}  // namespace llmtrain
