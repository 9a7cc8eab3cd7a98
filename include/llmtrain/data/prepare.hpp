// prepare_data: text / JSONL / nanoGPT .bin -> a directory of HDF5 token shards
// plus index.json (docs/data-format.md). The library side of llmtrain-prepare.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace llmtrain {

class Runtime;

struct PrepareOptions {
  // Inputs: UTF-8 text files (one document each), JSONL files (*.jsonl, *.ndjson:
  // one document per line, its text_field), JSONL compressed with zstd, gzip or xz
  // (*.jsonl.zst, *.jsonl.gz, *.jsonl.xz), Parquet files (*.parquet) and Arrow IPC
  // files (*.arrow: a `datasets` cache) with a string column text_field, and
  // directories of them (recursive, sorted; hidden files skipped; a `datasets`
  // save_to_disk or cache folder gives its .arrow files only).
  std::vector<std::string> inputs;
  std::string text_field = "text";  // the JSONL field / Parquet or Arrow column of the text
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
  // An existing data directory at out_dir is replaced (once the new data is
  // complete and checked) only when this is set; a directory holding anything
  // but llmtrain-prepare's files never is.
  bool overwrite = false;
  // A document that is not text (a NUL byte; ill-formed UTF-8 for the text
  // tokenizers) or whose text holds the end-of-document token is refused with an
  // error instead of skipped with a warning.
  bool strict = false;
};

struct PrepareResult {
  int64_t train_tokens = 0, val_tokens = 0;
  int64_t train_documents = 0, val_documents = 0;
  int64_t train_shards = 0, val_shards = 0;
  int64_t skipped_documents = 0;    // not text, or holding the EOS token (warned)
  // Files found in input directories that cannot be read (a dangling or looping
  // symlink, a FIFO, a socket, a device, no read permission; a symlink to a
  // directory): each warned by name. An input named directly is never skipped:
  // it is an error.
  int64_t skipped_inputs = 0;
  double seconds = 0.0;
  int world_size = 1;
};

// Collective over all ranks of `rt`: ranks read and tokenize disjoint documents;
// the output bytes do not depend on the number of ranks. The output is written
// into a temporary directory beside out_dir and renamed into place only once it
// is complete and read back. Throws DataError naming the file (and line for
// JSONL) on bad input, and naming the path and the OS error on unwritable output.
PrepareResult prepare_data(const PrepareOptions& options, const Runtime& rt);

// llmtrain-prepare --verify DIR: every shard of a data directory read whole and
// checked against its checksums (each chunk's and the shard's crc32c), one line
// per shard ("ok   PATH: ..." or "BAD  PATH: the problem") and a count on `out`.
// Returns the number of bad shards; DataError when the directory is not one.
int verify_data_dir(const std::string& dir, std::ostream& out);

}  // namespace llmtrain
