// TokenLoader: world-size-independent random windows from HDF5 token shards, with
// optional background prefetch threads.
#include "llmtrain/data/loader.hpp"

#include <mpi.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "data/data_index.hpp"
#include "data/shard_io.hpp"
#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/core/hash.hpp"
#include "llmtrain/data/hdf5_mutex.hpp"
#include "llmtrain/distributed/runtime.hpp"

namespace llmtrain {

namespace fs = std::filesystem;
using data::H5Id;

DataInfo read_data_info(const std::string& data_dir) { return data::read_data_index(data_dir).info; }

uint64_t sample_window_index(uint64_t seed, uint64_t stream, int64_t iter, int64_t k, uint64_t num_windows) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ stream);
  h = splitmix64(h ^ static_cast<uint64_t>(iter));
  h = splitmix64(h ^ static_cast<uint64_t>(k));
  // Multiply-shift instead of modulo: unbiased enough and no division.
  return static_cast<uint64_t>((static_cast<unsigned __int128>(h) * num_windows) >> 64);
}

struct TokenLoader::Impl {
  // ---- fixed at construction
  DataInfo info;
  std::string split;
  torch::Device device{torch::kCPU};
  uint64_t seed = 0, stream = 0;
  int rank = 0, world_size = 1;
  int64_t B = 0, T = 0, accum = 1;
  int64_t vocab_limit = 0;   // token ids must be < this
  bool is_u16 = true;
  bool use_mpio = true;
  std::vector<std::string> paths;
  std::vector<int64_t> window_prefix;  // window_prefix[s] = windows in shards < s; back() = total
  // Open shards, opened on first use (guarded by hdf5_mutex()).
  std::vector<H5Id> files, dsets;

  // ---- position and prefetch state
  int64_t pos = 0;
  int64_t num_workers = 0, prefetch = 0;
  struct Slot {
    int64_t position;
    torch::Tensor x, y;
    std::exception_ptr error;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::deque<Slot>> queues;  // one per worker, in position order
  std::vector<std::thread> workers;
  bool stopping = false;
  int64_t base = 0;  // position the workers started from

  ~Impl() {
    stop_workers();
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    dsets.clear();
    files.clear();
  }

  // Row b of the micro-batch at position p -> (shard, first token) of its window.
  std::pair<size_t, int64_t> locate(int64_t p, int64_t b) const {
    const int64_t iter = p / accum, micro = p % accum;
    const int64_t k = (rank * accum + micro) * B + b;
    const uint64_t g = sample_window_index(seed, stream, iter, k, static_cast<uint64_t>(window_prefix.back()));
    const auto it = std::upper_bound(window_prefix.begin(), window_prefix.end(), static_cast<int64_t>(g));
    const size_t s = static_cast<size_t>(it - window_prefix.begin()) - 1;
    return {s, static_cast<int64_t>(g) - window_prefix[s]};
  }

  hid_t dataset(size_t s) {
    if (dsets[s].get() < 0) {
      // Each rank opens its own read-only handle on MPI_COMM_SELF and reads with
      // independent transfers. Ranks read different random windows, and a
      // collective open/read on MPI_COMM_WORLD would make every read a
      // synchronisation point across ranks (and would have to be issued from the
      // worker threads at the same time as the trainer's collectives on the same
      // communicator); two-phase collective buffering also gains nothing for a few
      // KiB at scattered offsets. Without MPI_THREAD_MULTIPLE, worker threads must
      // not call MPI at all, so then the POSIX (sec2) driver reads the same bytes.
      if (use_mpio) {
        files[s] = data::open_shard_file(paths[s], MPI_COMM_SELF);
      } else {
        H5Id fapl(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
        H5_CHECK(H5Pset_fapl_sec2(fapl));
        files[s] = H5Id(H5_CHECK(H5Fopen(paths[s].c_str(), H5F_ACC_RDONLY, fapl)), H5Fclose);
      }
      dsets[s] = H5Id(H5_CHECK(H5Dopen2(files[s], data::kTokensDataset, H5P_DEFAULT)), H5Dclose);
    }
    return dsets[s];
  }

  // Reads tokens [offset, offset + n) of shard s into buf (uint16 or uint32 elements).
  void read_window(size_t s, int64_t offset, int64_t n, void* buf) {
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    const hid_t d = dataset(s);
    H5Id fspace(H5_CHECK(H5Dget_space(d)), H5Sclose);
    const hsize_t start = static_cast<hsize_t>(offset), count = static_cast<hsize_t>(n);
    H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, nullptr, &count, nullptr));
    H5Id mspace(H5_CHECK(H5Screate_simple(1, &count, nullptr)), H5Sclose);
    H5_CHECK(H5Dread(d, is_u16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32, mspace, fspace, H5P_DEFAULT, buf));
  }

  // The micro-batch at position p, on the host (pinned when the device is CUDA).
  Slot make_batch(int64_t p) {
    auto opts = torch::TensorOptions().dtype(torch::kInt64);
    if (device.is_cuda()) opts = opts.pinned_memory(true);
    Slot out{p, torch::empty({B, T}, opts), torch::empty({B, T}, opts), nullptr};  // x, y: (B, T)
    int64_t* x = out.x.data_ptr<int64_t>();
    int64_t* y = out.y.data_ptr<int64_t>();
    std::vector<uint32_t> buf32(is_u16 ? 0 : T + 1);
    std::vector<uint16_t> buf16(is_u16 ? T + 1 : 0);
    for (int64_t b = 0; b < B; ++b) {
      const auto [s, off] = locate(p, b);
      read_window(s, off, T + 1, is_u16 ? static_cast<void*>(buf16.data()) : static_cast<void*>(buf32.data()));
      int64_t mx = 0;
      for (int64_t t = 0; t <= T; ++t) {
        const int64_t v = is_u16 ? buf16[t] : buf32[t];
        mx = std::max(mx, v);
        if (t < T) x[b * T + t] = v;
        if (t > 0) y[b * T + t - 1] = v;
      }
      // Cheap load-time guard (one max per window): an id >= vocab would index
      // past the embedding table and crash or silently corrupt training.
      if (mx >= vocab_limit)
        throw DataError(fmt::format("shard '{}' holds token id {} in tokens [{}, {}) but the vocabulary has "
                                    "{} ids (corrupt shard, or data prepared with another tokenizer)",
                                    paths[s], mx, off, off + T + 1, vocab_limit));
    }
    return out;
  }

  void start_workers() {
    stopping = false;
    base = pos;
    queues.assign(static_cast<size_t>(num_workers), {});
    for (int64_t w = 0; w < num_workers; ++w)
      workers.emplace_back([this, w] { worker_loop(w); });
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    cv.notify_all();
    for (auto& t : workers) t.join();
    workers.clear();
    queues.clear();
  }

  // Worker w makes positions base + w, base + w + W, ... and keeps at most
  // `prefetch` of them ready, so next() pops them in exactly the order it would
  // have made them itself.
  void worker_loop(int64_t w) {
    for (int64_t p = base + w;; p += num_workers) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || static_cast<int64_t>(queues[w].size()) < prefetch; });
        if (stopping) return;
      }
      Slot slot;
      try {
        slot = make_batch(p);
      } catch (...) {
        slot = Slot{p, {}, {}, std::current_exception()};
      }
      const bool failed = static_cast<bool>(slot.error);
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stopping) return;
        queues[w].push_back(std::move(slot));
      }
      cv.notify_all();
      if (failed) return;
    }
  }

  Slot take(int64_t p) {
    if (num_workers == 0) return make_batch(p);
    const size_t w = static_cast<size_t>((p - base) % num_workers);
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return !queues[w].empty(); });
    Slot slot = std::move(queues[w].front());
    queues[w].pop_front();
    lock.unlock();
    cv.notify_all();
    LLMTRAIN_CHECK(slot.position == p, "TokenLoader: prefetch worker produced position {} where {} was expected",
                   slot.position, p);
    if (slot.error) std::rethrow_exception(slot.error);
    return slot;
  }
};

LoaderOptions LoaderOptions::from_config(const Config& c) {
  LoaderOptions o;
  o.data_dir = c.data_dir;
  o.seed = static_cast<uint64_t>(c.seed);
  o.batch_size = c.batch_size;
  o.block_size = c.block_size;
  o.gradient_accumulation_steps = c.gradient_accumulation_steps;
  o.vocab_size = c.vocab_size;
  o.num_workers = c.use_dataloader ? c.dataloader_num_workers : 0;
  o.prefetch_factor = c.dataloader_prefetch_factor;
  return o;
}

TokenLoader::TokenLoader(const LoaderOptions& config, const Runtime& rt, Split split,
                         torch::Device device, uint64_t stream)
    : TokenLoader(config, rt.rank(), rt.world_size(), split, device, stream) {}

TokenLoader::TokenLoader(const LoaderOptions& config, int rank, int world_size, Split split,
                         torch::Device device, uint64_t stream)
    : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  const data::DataIndex index = data::read_data_index(config.data_dir);
  m.info = index.info;
  m.split = to_string(split);
  m.device = device;
  m.seed = config.seed;
  m.stream = stream;
  m.rank = rank;
  m.world_size = world_size;
  m.B = config.batch_size;
  m.T = config.block_size;
  m.accum = config.gradient_accumulation_steps;
  m.is_u16 = m.info.token_dtype == "uint16";
  m.vocab_limit = m.info.vocab_size;
  if (config.vocab_size > 0 && config.vocab_size < m.info.vocab_size)
    throw ConfigError(fmt::format("vocab_size={} is smaller than the vocabulary of the data in '{}' ({} ids)",
                                  config.vocab_size, config.data_dir, m.info.vocab_size));
  const auto& shards = split == Split::train ? index.train : index.val;
  if (shards.empty())
    throw DataError(fmt::format("split '{}' of data directory '{}' is empty (0 tokens); prepare it with "
                                "llmtrain-prepare --val_fraction > 0",
                                m.split, config.data_dir));
  int64_t largest = 0, total = 0;
  m.window_prefix.push_back(0);
  for (const auto& sh : shards) {
    m.paths.push_back((fs::path(config.data_dir) / sh.file).string());
    // Windows of T + 1 tokens start at 0 .. n - T - 1.
    m.window_prefix.push_back(m.window_prefix.back() + std::max<int64_t>(0, sh.tokens - m.T));
    largest = std::max(largest, sh.tokens);
    total += sh.tokens;
  }
  if (m.window_prefix.back() == 0)
    throw DataError(fmt::format("block_size={} is too large for split '{}' of '{}': a window needs {} tokens "
                                "inside one shard, the largest shard has {} ({} in the split); use a smaller "
                                "block_size or larger shards (llmtrain-prepare --shard_tokens)",
                                m.T, m.split, config.data_dir, m.T + 1, largest, total));
  m.files.resize(shards.size());
  m.dsets.resize(shards.size());

  int level = MPI_THREAD_SINGLE;
  MPI_CHECK(MPI_Query_thread(&level));
  m.num_workers = config.num_workers;
  m.prefetch = config.prefetch_factor;
  m.use_mpio = m.num_workers == 0 || level >= MPI_THREAD_MULTIPLE;
  if (m.num_workers > 0) m.start_workers();
}

TokenLoader::~TokenLoader() = default;

Batch TokenLoader::next() {
  auto& m = *impl_;
  auto slot = m.take(m.pos);
  ++m.pos;
  if (m.device.is_cuda()) {
    // Pinned source: the copy is asynchronous on the current stream and ordered
    // before the forward pass that reads it.
    return Batch{slot.x.to(m.device, /*non_blocking=*/true), slot.y.to(m.device, /*non_blocking=*/true)};
  }
  return Batch{std::move(slot.x), std::move(slot.y)};
}

int64_t TokenLoader::position() const { return impl_->pos; }

void TokenLoader::seek(int64_t position) {
  auto& m = *impl_;
  LLMTRAIN_CHECK(position >= 0, "TokenLoader::seek: negative position {}", position);
  if (m.num_workers > 0) m.stop_workers();
  m.pos = position;
  if (m.num_workers > 0) m.start_workers();
}

const DataInfo& TokenLoader::info() const { return impl_->info; }

}  // namespace llmtrain
