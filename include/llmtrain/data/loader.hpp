// TokenLoader: world-size-independent random windows from HDF5 token shards.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "llmtrain/core/options.hpp"  // defines: Split

namespace llmtrain {

struct Config;
class Runtime;

// What the loader reads of a run's configuration, and nothing else.
struct LoaderOptions {
  std::string data_dir;
  // A blend: "W1 DIR1 W2 DIR2 ..." (Megatron's --data-path) or the path of a file
  // holding that text; empty = data_dir alone (docs/data.md, "Blends").
  std::string data_mix;
  uint64_t seed = 1337;
  int64_t batch_size = 12;                // sequences per micro-batch of this rank
  int64_t block_size = 1024;              // tokens per sequence
  int64_t gradient_accumulation_steps = 1;
  int64_t vocab_size = 0;                 // the model's vocabulary (0 = the data's); must cover the data's
  int64_t num_workers = 0;                // prefetching threads (0 = read in next())
  int64_t prefetch_factor = 2;            // batches each worker keeps ready
  static LoaderOptions from_config(const Config& c);
};

struct Batch {
  torch::Tensor x;  // (B, T) int64, on the training device
  torch::Tensor y;  // (B, T) int64, x shifted by one token
};

// What the data directory's index says (docs/data-format.md).
struct DataInfo {
  std::string dir;
  int64_t vocab_size = 0;
  std::string tokenizer;       // e.g. "byte", "gpt2"
  std::string tokenizer_hash;  // "" for built-in tokenizers
  int64_t eos_id = -1;         // the document separator (-1: none recorded)
  int64_t train_tokens = 0, val_tokens = 0;
  int64_t train_shards = 0, val_shards = 0;
  std::string token_dtype;     // "uint16" | "uint32"
};

// Reads and checks data_dir's index and shard headers (DataError naming the file
// on anything missing or inconsistent).
DataInfo read_data_info(const std::string& data_dir);

// Global window index in [0, num_windows) of sample k of iteration iter: a
// counter-based hash (splitmix64) of (seed, stream, iter, k), so any rank can
// compute any sample without state. Windows are numbered shard by shard.
uint64_t sample_window_index(uint64_t seed, uint64_t stream, int64_t iter, int64_t k, uint64_t num_windows);

// One prepared data directory of a blend, with its share of the samples.
struct DataSource {
  std::string dir;
  double weight = 1.0;  // normalized: the weights of a mix sum to 1
};

// The sources of a blend: `data_mix` parsed (weights normalized), or data_dir
// alone with weight 1. ConfigError naming data_mix for a malformed mix.
std::vector<DataSource> parse_data_mix(const std::string& data_mix, const std::string& data_dir);
// The blend data_mix stands for, as text ("0.25 DIR1 0.75 DIR2", weights normalized;
// "" when data_mix is empty): two runs with the same text read the same blend even
// when data_mix names a file whose contents changed in between (resume checks it).
std::string data_mix_blend(const std::string& data_mix, const std::string& data_dir);

// What a run has taken from each source (the run log's summary.data_sources).
struct DataSourceUse {
  std::string path;
  double weight = 0.0;
  int64_t tokens = 0;   // tokens trained on from it (block_size per sample)
  double epochs = 0.0;  // tokens / the source's tokens in the split
};

class TokenLoader {
 public:
  // `stream` separates independent sample streams of the
  // same split (e.g. 0 = training, 1 = evaluation).
  TokenLoader(const LoaderOptions& options, const Runtime& rt, Split split, torch::Device device,
              uint64_t stream = 0);
  // Same, as rank `rank` of `world_size` ranks (tests and tools that emulate another
  // world size in one process).
  TokenLoader(const LoaderOptions& options, int rank, int world_size, Split split,
              torch::Device device, uint64_t stream = 0);
  ~TokenLoader();

  // The next micro-batch of this rank. Position p (micro-batches consumed so far)
  // maps to iteration i = p / accum and micro-step m = p % accum; row b of it is
  // global sample k = (rank * accum + m) * batch_size + b of iteration i, and
  // sample k of iteration i is a pure function of (seed, stream, i, k): the data
  // order is the same for every world size with the same global batch.
  Batch next();
  int64_t position() const;
  void seek(int64_t position);
  const DataInfo& info() const;
  // Samples of iterations [0, iterations) of all ranks, per source: a pure
  // function of the seed and the global batch like the samples themselves.
  std::vector<DataSourceUse> source_use(int64_t iterations) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain
