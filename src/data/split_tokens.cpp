#include "llmtrain/data/split_tokens.hpp"

#include <algorithm>

#include <torch/torch.h>

#include "data/shard_set.hpp"

namespace llmtrain {

struct SplitTokens::Impl {
  Impl(const std::string& data_dir, Split split)
      : shards(data_dir, split, data::ShardOrder::file_name) {}
  data::ShardSet shards;
};

SplitTokens::SplitTokens(const std::string& data_dir, Split split)
    : impl_(std::make_unique<Impl>(data_dir, split)) {}

SplitTokens::~SplitTokens() = default;

int64_t SplitTokens::size() const { return impl_->shards.total_tokens(); }
const DataInfo& SplitTokens::info() const { return impl_->shards.info(); }

torch::Tensor SplitTokens::read(int64_t begin, int64_t n) {
  auto out = torch::empty({std::max<int64_t>(n, 0)}, torch::TensorOptions().dtype(torch::kInt64));  // (n)
  impl_->shards.read_stream(begin, n, out.data_ptr<int64_t>());
  return out;
}

}  // namespace llmtrain
