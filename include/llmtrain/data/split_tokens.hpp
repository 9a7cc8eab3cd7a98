// SplitTokens: one split of a data directory as a single token stream, its
// shards in file-name order, concatenated (eval_full reads consecutive windows
// that may cross shard boundaries; the training loader samples windows inside
// one shard).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <torch/types.h>

#include "llmtrain/data/loader.hpp"

namespace llmtrain {

class SplitTokens {
 public:
  // DataError naming the directory when it has no such split or the index is
  // bad (read_data_info's checks).
  SplitTokens(const std::string& data_dir, Split split);
  ~SplitTokens();
  SplitTokens(const SplitTokens&) = delete;
  SplitTokens& operator=(const SplitTokens&) = delete;

  int64_t size() const;             // tokens in the split
  const DataInfo& info() const;
  // Tokens [begin, begin + n) of the stream as an (n) int64 CPU tensor. DataError
  // naming the shard for an id outside the vocabulary.
  torch::Tensor read(int64_t begin, int64_t n);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain
