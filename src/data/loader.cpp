// TokenLoader: world-size-independent random windows from HDF5 token shards, with
// optional background prefetch threads.
#include "llmtrain/data/loader.hpp"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <tuple>
#include <condition_variable>
#include <deque>
#include <exception>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <torch/torch.h>

#include "data/data_index.hpp"
#include "data/shard_set.hpp"
#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/core/hash.hpp"
#include "llmtrain/core/log.hpp"
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

std::vector<DataSource> parse_data_mix(const std::string& data_mix, const std::string& data_dir) {
  if (data_mix.empty()) return {{data_dir, 1.0}};
  std::string text = data_mix;
  std::error_code ec;
  if (data_mix.find(' ') == std::string::npos && std::filesystem::is_regular_file(data_mix, ec)) {
    std::ifstream in(data_mix);
    std::ostringstream ss;
    for (std::string line; std::getline(in, line);) ss << line.substr(0, line.find('#')) << ' ';
    text = ss.str();
  }
  std::istringstream words(text);
  std::vector<std::string> w{std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
  auto bad = [&](const std::string& why) {
    return ConfigError(fmt::format("config key 'data_mix' ('{}'): {}; expected \"W1 DIR1 W2 DIR2 ...\" (weights > 0 "
                                   "and prepared data directories) or the path of a file holding that", data_mix, why));
  };
  if (w.empty() || w.size() % 2 != 0) throw bad(fmt::format("{} words, not weight/directory pairs", w.size()));
  std::vector<DataSource> out;
  double largest = 0.0;
  for (size_t i = 0; i < w.size(); i += 2) {
    size_t used = 0;
    double v = 0.0;
    try {
      v = std::stod(w[i], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != w[i].size() || !(v > 0.0) || !std::isfinite(v))
      throw bad(fmt::format("'{}' (before '{}') is not a positive weight", w[i], w[i + 1]));
    out.push_back({w[i + 1], v});
    largest = std::max(largest, v);
  }
  // Scaled by the largest first: the sum of weights near DBL_MAX (1e308 1e308)
  // would overflow to inf and every share to 0.
  double sum = 0.0;
  for (auto& d : out) sum += d.weight /= largest;
  for (auto& d : out) d.weight /= sum;
  return out;
}

std::string data_mix_blend(const std::string& data_mix, const std::string& data_dir) {
  if (data_mix.empty()) return "";
  std::string s;
  for (const auto& d : parse_data_mix(data_mix, data_dir))
    s += fmt::format("{}{:.9g} {}", s.empty() ? "" : " ", d.weight, d.dir);
  return s;
}

namespace {

// Salt of the per-sample hash that picks a blend's source (not the window).
constexpr uint64_t kMixStream = 0x6d69782d736f7572ULL;

// The source of sample k of iteration iter: a uniform draw against the
// cumulative weights (cum.back() == 1).
size_t pick_source(uint64_t seed, uint64_t stream, int64_t iter, int64_t k, const std::vector<double>& cum) {
  constexpr uint64_t kOne = uint64_t{1} << 53;
  const double u = static_cast<double>(sample_window_index(seed, stream ^ kMixStream, iter, k, kOne)) * 0x1.0p-53;
  const size_t s = static_cast<size_t>(std::upper_bound(cum.begin(), cum.end(), u) - cum.begin());
  return std::min(s, cum.size() - 1);
}

}  // namespace

struct TokenLoader::Impl {
  // ---- fixed at construction
  DataInfo info;
  std::string split;
  torch::Device device{torch::kCPU};
  uint64_t seed = 0, stream = 0;
  int rank = 0, world_size = 1;
  int64_t B = 0, T = 0, accum = 1;
  struct Source {
    DataSource spec;
    std::unique_ptr<data::ShardSet> shards;  // index order
    std::vector<int64_t> window_prefix;      // window_prefix[s] = windows in shards < s; back() = total
  };
  std::vector<Source> sources;  // one, or a blend's
  std::vector<double> cum_weight;  // cum_weight[i] = weights of sources <= i
  // Rank 0's warning when a blend's source is taken past its tokens: the samples
  // of all ranks counted up to `counted_iters`, the last epoch warned about.
  int64_t counted_iters = 0;
  std::vector<int64_t> counted;
  std::vector<int64_t> warned_epoch;

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

  // Sample k of iteration iter -> its source. One source: 0, and the data
  // order of a run without a blend is what it always was.
  size_t source_of(int64_t iter, int64_t k) const {
    return sources.size() == 1 ? 0 : pick_source(seed, stream, iter, k, cum_weight);
  }

  // Row b of the micro-batch at position p -> (source, shard, first token) of its window.
  std::tuple<size_t, size_t, int64_t> locate(int64_t p, int64_t b) const {
    const int64_t iter = p / accum, micro = p % accum;
    const int64_t k = (rank * accum + micro) * B + b;
    const size_t src = source_of(iter, k);
    const auto& prefix = sources[src].window_prefix;
    // Each source of a blend draws its windows from a stream of its own.
    const uint64_t st = sources.size() == 1 ? stream : splitmix64(stream ^ (kMixStream + src + 1));
    const uint64_t g = sample_window_index(seed, st, iter, k, static_cast<uint64_t>(prefix.back()));
    const auto [shard, off] = data::locate(prefix, static_cast<int64_t>(g));
    return {src, shard, off};
  }

  int64_t global_samples() const { return static_cast<int64_t>(world_size) * accum * B; }

  // Adds the samples of iterations [counted_iters, iters) of all ranks.
  void count_until(int64_t iters) {
    for (; counted_iters < iters; ++counted_iters)
      for (int64_t k = 0; k < global_samples(); ++k) ++counted[source_of(counted_iters, k)];
  }

  // A blend's source taken past its tokens repeats (new random windows over the
  // same tokens): said once per epoch.
  void warn_repeats(int64_t iter) {
    if (sources.size() == 1 || split != "train") return;
    count_until(iter + 1);
    for (size_t i = 0; i < sources.size(); ++i) {
      const int64_t epoch = counted[i] * T / std::max<int64_t>(1, sources[i].shards->total_tokens());
      if (epoch <= warned_epoch[i]) continue;
      warned_epoch[i] = epoch;
      log::warn("data_mix: source '{}' (weight {:.3g}) has run out at iteration {}: {} of its {} {} tokens taken; "
                "it repeats (epoch {})", sources[i].spec.dir, sources[i].spec.weight, iter, counted[i] * T,
                sources[i].shards->total_tokens(), split, epoch + 1);
    }
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
      const auto [src, s, off] = locate(p, b);
      sources[src].shards->read(s, off, T + 1, window.data());
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

namespace {

// Windows of T + 1 tokens start at 0 .. n - T - 1 of each shard.
std::vector<int64_t> window_prefix(const data::ShardSet& shards, int64_t T, const std::string& split,
                                   const std::string& dir) {
  std::vector<int64_t> prefix{0};
  int64_t largest = 0;
  for (size_t s = 0; s < shards.num_shards(); ++s) {
    prefix.push_back(prefix.back() + std::max<int64_t>(0, shards.tokens(s) - T));
    largest = std::max(largest, shards.tokens(s));
  }
  if (prefix.back() == 0)
    throw DataError(fmt::format("block_size={} is too large for split '{}' of '{}': a window needs {} tokens "
                                "inside one shard, the largest shard has {} ({} in the split); use a smaller "
                                "block_size or larger shards (llmtrain-prepare --shard_tokens)",
                                T, split, dir, T + 1, largest, shards.total_tokens()));
  return prefix;
}

// A blend's sources must hold ids of one tokenizer.
void check_same_vocabulary(const DataInfo& a, const DataInfo& b, const std::string& dir_a, const std::string& dir_b) {
  if (a.vocab_size != b.vocab_size || a.tokenizer != b.tokenizer || a.tokenizer_hash != b.tokenizer_hash)
    throw DataError(fmt::format("data_mix: '{}' was prepared with tokenizer '{}' ({} ids), '{}' with '{}' ({} ids); "
                                "a blend's directories must share one tokenizer", dir_a, a.tokenizer, a.vocab_size,
                                dir_b, b.tokenizer, b.vocab_size));
}

}  // namespace

LoaderOptions LoaderOptions::from_config(const Config& c) {
  LoaderOptions o;
  o.data_dir = c.data_dir;
  o.data_mix = c.data_mix;
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
  m.split = to_string(split);
  m.device = device;
  m.seed = config.seed;
  m.stream = stream;
  m.rank = rank;
  m.world_size = world_size;
  m.B = config.batch_size;
  m.T = config.block_size;
  m.accum = config.gradient_accumulation_steps;
  const bool use_mpio = m.num_workers == 0 || level >= MPI_THREAD_MULTIPLE;
  double cum = 0.0;
  for (const auto& spec : parse_data_mix(config.data_mix, config.data_dir)) {
    Impl::Source src{spec, std::make_unique<data::ShardSet>(spec.dir, split, data::ShardOrder::index, use_mpio), {}};
    src.window_prefix = window_prefix(*src.shards, m.T, m.split, spec.dir);
    m.sources.push_back(std::move(src));
    m.cum_weight.push_back(cum += spec.weight);
  }
  m.cum_weight.back() = 1.0;
  m.counted.assign(m.sources.size(), 0);
  m.warned_epoch.assign(m.sources.size(), 0);
  m.info = m.sources[0].shards->info();
  for (const auto& src : m.sources) check_same_vocabulary(m.info, src.shards->info(), m.sources[0].spec.dir,
                                                          src.spec.dir);
  if (config.vocab_size > 0 && config.vocab_size < m.info.vocab_size)
    throw ConfigError(fmt::format("vocab_size={} is smaller than the vocabulary of the data in '{}' ({} ids)",
                                  config.vocab_size, m.sources[0].spec.dir, m.info.vocab_size));
  if (m.num_workers > 0) m.start_workers();
}

TokenLoader::~TokenLoader() = default;

Batch TokenLoader::next() {
  auto& m = *impl_;
  if (m.pos % m.accum == 0) m.warn_repeats(m.pos / m.accum);
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
  m.counted_iters = 0;  // counted again up to the new position (warn_repeats)
  m.counted.assign(m.sources.size(), 0);
  m.count_until(position / m.accum);
  for (size_t i = 0; i < m.sources.size(); ++i)
    m.warned_epoch[i] = m.counted[i] * m.T / std::max<int64_t>(1, m.sources[i].shards->total_tokens());
  if (m.num_workers > 0) m.start_workers();
}

const DataInfo& TokenLoader::info() const { return impl_->info; }

std::vector<DataSourceUse> TokenLoader::source_use(int64_t iterations) const {
  const auto& m = *impl_;
  std::vector<int64_t> samples(m.sources.size(), 0);
  for (int64_t i = 0; i < iterations; ++i)
    for (int64_t k = 0; k < m.global_samples(); ++k) ++samples[m.source_of(i, k)];
  std::vector<DataSourceUse> out;
  for (size_t i = 0; i < m.sources.size(); ++i) {
    const int64_t tokens = samples[i] * m.T;
    out.push_back({m.sources[i].spec.dir, m.sources[i].spec.weight, tokens,
                   static_cast<double>(tokens) / static_cast<double>(m.sources[i].shards->total_tokens())});
  }
  return out;
}

}  // namespace llmtrain
