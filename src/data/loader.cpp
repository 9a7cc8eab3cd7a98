// TokenLoader: world-size-independent random windows from HDF5 token shards, with
// optional background prefetch threads.
#include "llmtrain/data/loader.hpp"

#include <mpi.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <thread>

#include <fmt/format.h>
#include <torch/torch.h>

#include "data/data_index.hpp"
#include "data/shard_set.hpp"
#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/core/hash.hpp"
#include "llmtrain/distributed/runtime.hpp"

namespace llmtrain {

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
  std::unique_ptr<data::ShardSet> shards;  // index order
  std::vector<int64_t> window_prefix;  // window_prefix[s] = windows in shards < s; back() = total

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

  ~Impl() { stop_workers(); }

  // Row b of the micro-batch at position p -> (shard, first token) of its window.
  std::pair<size_t, int64_t> locate(int64_t p, int64_t b) const {
    const int64_t iter = p / accum, micro = p % accum;
    const int64_t k = (rank * accum + micro) * B + b;
    const uint64_t g = sample_window_index(seed, stream, iter, k, static_cast<uint64_t>(window_prefix.back()));
    return data::locate(window_prefix, static_cast<int64_t>(g));
  }

  // The micro-batch at position p, on the host (pinned when the device is CUDA).
  Slot make_batch(int64_t p) {
    auto opts = torch::TensorOptions().dtype(torch::kInt64);
    if (device.is_cuda()) opts = opts.pinned_memory(true);
    Slot out{p, torch::empty({B, T}, opts), torch::empty({B, T}, opts), nullptr};  // x, y: (B, T)
    int64_t* x = out.x.data_ptr<int64_t>();
    int64_t* y = out.y.data_ptr<int64_t>();
    std::vector<int64_t> window(static_cast<size_t>(T + 1));
    for (int64_t b = 0; b < B; ++b) {
      const auto [s, off] = locate(p, b);
      shards->read(s, off, T + 1, window.data());
      std::copy(window.begin(), window.end() - 1, x + b * T);
      std::copy(window.begin() + 1, window.end(), y + b * T);
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
  int level = MPI_THREAD_SINGLE;
  MPI_CHECK(MPI_Query_thread(&level));
  m.num_workers = config.num_workers;
  m.prefetch = config.prefetch_factor;
  m.shards = std::make_unique<data::ShardSet>(config.data_dir, split, data::ShardOrder::index,
                                              /*use_mpio=*/m.num_workers == 0 || level >= MPI_THREAD_MULTIPLE);
  const data::ShardSet& shards = *m.shards;
  m.info = shards.info();
  m.split = to_string(split);
  m.device = device;
  m.seed = config.seed;
  m.stream = stream;
  m.rank = rank;
  m.world_size = world_size;
  m.B = config.batch_size;
  m.T = config.block_size;
  m.accum = config.gradient_accumulation_steps;
  if (config.vocab_size > 0 && config.vocab_size < m.info.vocab_size)
    throw ConfigError(fmt::format("vocab_size={} is smaller than the vocabulary of the data in '{}' ({} ids)",
                                  config.vocab_size, config.data_dir, m.info.vocab_size));
  int64_t largest = 0;
  m.window_prefix.push_back(0);
  for (size_t s = 0; s < shards.num_shards(); ++s) {
    // Windows of T + 1 tokens start at 0 .. n - T - 1.
    m.window_prefix.push_back(m.window_prefix.back() + std::max<int64_t>(0, shards.tokens(s) - m.T));
    largest = std::max(largest, shards.tokens(s));
  }
  if (m.window_prefix.back() == 0)
    throw DataError(fmt::format("block_size={} is too large for split '{}' of '{}': a window needs {} tokens "
                                "inside one shard, the largest shard has {} ({} in the split); use a smaller "
                                "block_size or larger shards (llmtrain-prepare --shard_tokens)",
                                m.T, m.split, config.data_dir, m.T + 1, largest, shards.total_tokens()));
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
