#include "llmtrain/data/split_tokens.hpp"

#include <mpi.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <torch/torch.h>

#include "data/data_index.hpp"
#include "data/shard_io.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/data/hdf5_mutex.hpp"

namespace llmtrain {

namespace fs = std::filesystem;

struct SplitTokens::Impl {
  DataInfo info;
  std::vector<std::string> paths;      // file-name order
  std::vector<int64_t> prefix;         // prefix[s] = tokens in shards < s; back() = total
  std::vector<data::H5Id> files, dsets;
  bool is_u16 = true;

  ~Impl() {
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    dsets.clear();
    files.clear();
  }

  hid_t dataset(size_t s) {
    if (dsets[s].get() < 0) {
      files[s] = data::open_shard_file(paths[s], MPI_COMM_SELF);
      dsets[s] = data::H5Id(H5_CHECK(H5Dopen2(files[s], data::kTokensDataset, H5P_DEFAULT)), H5Dclose);
    }
    return dsets[s];
  }
};

SplitTokens::SplitTokens(const std::string& data_dir, Split split) : impl_(std::make_unique<Impl>()) {
  const data::DataIndex index = data::read_data_index(data_dir);
  auto& m = *impl_;
  m.info = index.info;
  m.is_u16 = m.info.token_dtype == "uint16";
  std::vector<data::ShardEntry> shards = split == Split::train ? index.train : index.val;
  if (shards.empty())
    throw DataError(fmt::format("split '{}' of data directory '{}' is empty (0 tokens)", to_string(split), data_dir));
  std::sort(shards.begin(), shards.end(),
            [](const data::ShardEntry& a, const data::ShardEntry& b) { return a.file < b.file; });
  m.prefix.push_back(0);
  for (const auto& sh : shards) {
    m.paths.push_back((fs::path(data_dir) / sh.file).string());
    m.prefix.push_back(m.prefix.back() + sh.tokens);
  }
  m.files.resize(shards.size());
  m.dsets.resize(shards.size());
}

SplitTokens::~SplitTokens() = default;

int64_t SplitTokens::size() const { return impl_->prefix.back(); }
const DataInfo& SplitTokens::info() const { return impl_->info; }

torch::Tensor SplitTokens::read(int64_t begin, int64_t n) {
  auto& m = *impl_;
  LLMTRAIN_CHECK(begin >= 0 && n >= 0 && begin + n <= size(), "SplitTokens::read: tokens [{}, {}) outside [0, {})",
                 begin, begin + n, size());
  auto out = torch::empty({n}, torch::TensorOptions().dtype(torch::kInt64));
  int64_t* dst = out.data_ptr<int64_t>();
  std::vector<uint16_t> buf16;
  std::vector<uint32_t> buf32;
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  for (int64_t pos = begin; pos < begin + n;) {
    const size_t s = static_cast<size_t>(std::upper_bound(m.prefix.begin(), m.prefix.end(), pos) - m.prefix.begin()) - 1;
    const int64_t off = pos - m.prefix[s];
    const int64_t take = std::min(begin + n - pos, m.prefix[s + 1] - pos);
    const hid_t d = m.dataset(s);
    data::H5Id fspace(H5_CHECK(H5Dget_space(d)), H5Sclose);
    const hsize_t start = static_cast<hsize_t>(off), count = static_cast<hsize_t>(take);
    H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, nullptr, &count, nullptr));
    data::H5Id mspace(H5_CHECK(H5Screate_simple(1, &count, nullptr)), H5Sclose);
    int64_t mx = 0;
    if (m.is_u16) {
      buf16.resize(static_cast<size_t>(take));
      H5_CHECK(H5Dread(d, H5T_NATIVE_UINT16, mspace, fspace, H5P_DEFAULT, buf16.data()));
      for (int64_t i = 0; i < take; ++i) mx = std::max<int64_t>(mx, dst[pos - begin + i] = buf16[i]);
    } else {
      buf32.resize(static_cast<size_t>(take));
      H5_CHECK(H5Dread(d, H5T_NATIVE_UINT32, mspace, fspace, H5P_DEFAULT, buf32.data()));
      for (int64_t i = 0; i < take; ++i) mx = std::max<int64_t>(mx, dst[pos - begin + i] = buf32[i]);
    }
    if (mx >= m.info.vocab_size)
      throw DataError(fmt::format("shard '{}' holds token id {} in tokens [{}, {}) but the vocabulary has {} ids",
                                  m.paths[s], mx, off, off + take, m.info.vocab_size));
    pos += take;
  }
  return out;
}

}  // namespace llmtrain
