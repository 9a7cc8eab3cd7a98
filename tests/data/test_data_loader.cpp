// TokenLoader: windows match the shards, data order independent of world size,
// prefetch workers change nothing, position/seek resumes exactly, workers read
// safely while checkpoints are written (one HDF5 lock); blends (data_mix) draw
// by weight, the same on every world size, and resume.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data_test_util.hpp"
#include "llmtrain/core/config.hpp"
#include "llmtrain/data/loader.hpp"
#include "llmtrain/checkpoint/checkpoint.hpp"
#include "test_util.hpp"

using llmtrain::Split;

namespace fs = std::filesystem;
using namespace llmtrain;
using namespace llmtrain::testing;

namespace {

// One prepared directory shared by the tests of this binary.
const std::string& data_dir() {
  static const std::string dir = [] {
    const auto d = fresh_dir("loader_data");
    PrepareOptions o;
    o.inputs = write_corpus(d, 40);
    o.out_dir = (d / "out").string();
    o.val_fraction = 0.2;
    o.shard_tokens = 9000;
    prepare_world(o);
    return o.out_dir;
  }();
  return dir;
}

Config small_config() {
  Config c;
  c.data_dir = data_dir();
  c.batch_size = 3;
  c.block_size = 64;
  c.gradient_accumulation_steps = 2;
  c.seed = 7;
  c.use_dataloader = false;
  return c;
}

bool same(const Batch& a, const Batch& b) { return torch::equal(a.x, b.x) && torch::equal(a.y, b.y); }

}  // namespace

TEST(DataLoader, WindowsAreTheSampledShardTokens) {
  const Config c = small_config();
  const auto j = nlohmann::json::parse(read_file(fs::path(c.data_dir) / "index.json"));
  std::vector<std::vector<uint32_t>> shards;
  std::vector<int64_t> prefix{0};
  for (const auto& s : j["splits"]["train"]["shards"]) {
    shards.push_back(read_shard_tokens((fs::path(c.data_dir) / s["file"].get<std::string>()).string()));
    prefix.push_back(prefix.back() + std::max<int64_t>(0, static_cast<int64_t>(shards.back().size()) - c.block_size));
  }
  ASSERT_GE(shards.size(), 3u);
  TokenLoader loader(llmtrain::LoaderOptions::from_config(c), 0, 1, Split::train, torch::kCPU);
  const int64_t B = c.batch_size, T = c.block_size;
  for (int64_t p = 0; p < 6; ++p) {
    const Batch batch = loader.next();
    ASSERT_EQ(batch.x.sizes(), (std::vector<int64_t>{B, T}));
    ASSERT_EQ(batch.x.dtype(), torch::kInt64);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t k = (p % 2) * B + b;
      const auto g = static_cast<int64_t>(sample_window_index(7, 0, p / 2, k, prefix.back()));
      const size_t s = std::upper_bound(prefix.begin(), prefix.end(), g) - prefix.begin() - 1;
      const int64_t off = g - prefix[s];
      for (int64_t t = 0; t < T; ++t) {
        ASSERT_EQ(batch.x[b][t].item<int64_t>(), shards[s][off + t]) << "p=" << p << " b=" << b << " t=" << t;
        ASSERT_EQ(batch.y[b][t].item<int64_t>(), shards[s][off + t + 1]);
      }
    }
  }
  EXPECT_EQ(loader.position(), 6);
  EXPECT_EQ(loader.info().tokenizer, "byte");
}

TEST(DataLoader, SameGlobalBatchesOnEveryWorldSize) {
  auto& rt = runtime();
  const Config c = small_config();
  const int64_t B = c.batch_size, T = c.block_size, A = c.gradient_accumulation_steps, W = rt.world_size();
  TokenLoader loader(llmtrain::LoaderOptions::from_config(c), rt, Split::train, torch::kCPU);
  // The same global batch on one rank: accumulate W*A micro-batches.
  Config one = c;
  one.gradient_accumulation_steps = A * W;
  std::unique_ptr<TokenLoader> ref;
  if (rt.rank() == 0) ref = std::make_unique<TokenLoader>(llmtrain::LoaderOptions::from_config(one), 0, 1, Split::train, torch::kCPU);
  for (int iter = 0; iter < 4; ++iter) {
    for (int64_t m = 0; m < A; ++m) {
      const Batch mine = loader.next();  // (B, T)
      auto gathered = torch::empty({W, B, T}, torch::kInt64);
      MPI_Gather(mine.x.data_ptr<int64_t>(), B * T, MPI_INT64_T, gathered.data_ptr<int64_t>(), B * T,
                 MPI_INT64_T, 0, MPI_COMM_WORLD);
      if (rt.rank() != 0) continue;
      // Rank r's micro-step m is micro-step r*A + m of the one-rank run.
      std::vector<torch::Tensor> expected(W);
      for (int64_t r = 0; r < W; ++r) {
        ref->seek(iter * A * W + r * A + m);
        expected[r] = ref->next().x;
      }
      for (int64_t r = 0; r < W; ++r)
        EXPECT_TRUE(torch::equal(gathered[r], expected[r])) << "iter " << iter << " rank " << r << " micro " << m;
    }
  }
  // Another stream is another sequence.
  TokenLoader other(llmtrain::LoaderOptions::from_config(c), rt, Split::train, torch::kCPU, /*stream=*/1);
  TokenLoader again(llmtrain::LoaderOptions::from_config(c), rt, Split::train, torch::kCPU, /*stream=*/0);
  EXPECT_FALSE(torch::equal(other.next().x, again.next().x));
}

TEST(DataLoader, WorkersGiveExactlyTheSameBatches) {
  auto& rt = runtime();
  Config c = small_config();
  TokenLoader plain(llmtrain::LoaderOptions::from_config(c), rt, Split::val, torch::kCPU);
  c.use_dataloader = true;
  c.dataloader_num_workers = 3;
  c.dataloader_prefetch_factor = 2;
  TokenLoader fast(llmtrain::LoaderOptions::from_config(c), rt, Split::val, torch::kCPU);
  for (int i = 0; i < 25; ++i) ASSERT_TRUE(same(plain.next(), fast.next())) << "batch " << i;
  // Seek while workers are running, backwards and forwards.
  fast.seek(4);
  plain.seek(4);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(same(plain.next(), fast.next())) << "after seek, batch " << i;
  fast.seek(100);
  plain.seek(100);
  EXPECT_TRUE(same(plain.next(), fast.next()));
  EXPECT_EQ(fast.position(), 101);
}

TEST(DataLoader, ResumeFromSavedPosition) {
  auto& rt = runtime();
  for (bool workers : {false, true}) {
    Config c = small_config();
    c.use_dataloader = workers;
    TokenLoader first(llmtrain::LoaderOptions::from_config(c), rt, Split::train, torch::kCPU);
    for (int i = 0; i < 7; ++i) first.next();
    const int64_t saved = first.position();  // what a checkpoint stores
    EXPECT_EQ(saved, 7);
    std::vector<Batch> rest;
    for (int i = 0; i < 5; ++i) rest.push_back(first.next());
    TokenLoader resumed(llmtrain::LoaderOptions::from_config(c), rt, Split::train, torch::kCPU);
    resumed.seek(saved);
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(same(rest[i], resumed.next())) << "workers=" << workers << " " << i;
    // A different seed is a different order.
    c.seed = 8;
    TokenLoader other(llmtrain::LoaderOptions::from_config(c), rt, Split::train, torch::kCPU);
    other.seek(saved);
    EXPECT_FALSE(same(rest[0], other.next()));
  }
}

namespace {

// A checkpoint part with many small HDF5 objects (attributes, datasets, rows):
// each save and load is a long run of HDF5 calls on the training thread.
struct ManyObjects : Stateful {
  int64_t value = 0;
  int64_t loaded = -1;
  void save(CheckpointWriter& w) override {
    for (int g = 0; g < 4; ++g) {
      const std::string group = "stress/g" + std::to_string(g);
      w.attr(group, "value", value + g);
      const int64_t n = 64 * w.world_size();
      w.tensor(group, "t", {n}, 64 * w.rank(), torch::full({64}, static_cast<float>(value + g)));
    }
    w.rank_row("stress", "row", std::vector<uint8_t>(16, static_cast<uint8_t>(value)));
  }
  void load(CheckpointReader& r) override {
    loaded = r.attr_i64("stress/g3", "value") - 3;
    auto t = torch::empty({64});
    r.read_tensor("stress/g2/t", 64 * r.rank(), t);
    EXPECT_EQ(t[17].item<float>(), static_cast<float>(loaded + 2));
  }
};

}  // namespace

// Issue 30, point 7: prefetching workers read shards while the training thread
// writes a checkpoint every iteration (and loads one now and then). Debian's
// HDF5 is not thread-safe; every HDF5 call holds the one lock, so every batch
// is the batch a loader without workers gives, and every checkpoint round-trips.
TEST(DataLoader, WorkersReadWhileCheckpointsAreWrittenEveryIteration) {
  auto& rt = runtime();
  Config c = small_config();
  c.block_size = 32;
  TokenLoader plain(llmtrain::LoaderOptions::from_config(c), rt, Split::train, torch::kCPU);
  c.use_dataloader = true;
  c.dataloader_num_workers = 4;
  c.dataloader_prefetch_factor = 4;
  TokenLoader fast(llmtrain::LoaderOptions::from_config(c), rt, Split::train, torch::kCPU);
  const auto dir = fresh_dir("loader_stress");
  Checkpointer ckpt(dir.string(), /*keep_last=*/2, rt, {"ddp", nlohmann::json::object()});
  auto part = std::make_unique<ManyObjects>();
  ManyObjects* state = part.get();
  ckpt.add(std::move(part));
  constexpr int kIters = 200;
  for (int i = 0; i < kIters; ++i) {
    // Two micro-batches per iteration, read while the workers race ahead.
    for (int m = 0; m < 2; ++m) ASSERT_TRUE(same(plain.next(), fast.next())) << "iteration " << i << " micro " << m;
    state->value = i;
    ckpt.save(i + 1);
    if (i % 40 == 39) {
      const auto loaded = ckpt.load_latest();
      ASSERT_TRUE(loaded.has_value());
      EXPECT_EQ(loaded->iteration, i + 1);
      EXPECT_EQ(state->loaded, i);
    }
  }
  EXPECT_EQ(fast.position(), 2 * kIters);
}

// ---- blends (data_mix) -------------------------------------------------------------

namespace {

// A prepared directory whose documents hold only `letter` (byte tokenizer): every
// window of it is recognisable. Small on purpose: a blend source runs out.
std::string letter_dir(char letter, int docs) {
  const auto d = fresh_dir(std::string("loader_mix_") + letter);
  if (runtime().rank() == 0) {
    fs::create_directories(d / "docs");
    for (int i = 0; i < docs; ++i) {
      std::ofstream f(d / "docs" / fmt::format("{:03d}.txt", i));
      f << std::string(static_cast<size_t>(200 + 37 * i), letter);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  PrepareOptions o;
  o.inputs = {(d / "docs").string()};
  o.out_dir = (d / "out").string();
  o.val_fraction = 0.0;
  o.shard_tokens = 1500;
  prepare_world(o);
  return o.out_dir;
}

// The letter of a window (its first non-EOS token).
char letter_of(const torch::Tensor& row) {
  for (int64_t t = 0; t < row.size(0); ++t)
    if (row[t].item<int64_t>() != 0) return static_cast<char>(row[t].item<int64_t>());
  return 0;
}

}  // namespace

TEST(DataLoader, DataMixParsing) {
  auto s = parse_data_mix("0.3 A 0.7 B", "ignored");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].dir, "A");
  EXPECT_NEAR(s[0].weight, 0.3, 1e-12);
  EXPECT_NEAR(s[1].weight, 0.7, 1e-12);
  s = parse_data_mix("", "data/x");  // no mix: data_dir alone
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].dir, "data/x");
  EXPECT_EQ(s[0].weight, 1.0);
  s = parse_data_mix("2 A 6 B", "");  // normalized
  EXPECT_NEAR(s[0].weight, 0.25, 1e-12);
  s = parse_data_mix("1e308 A 1e308 B", "");  // their sum overflows: still half and half (issue 49)
  EXPECT_EQ(s[0].weight, 0.5);
  EXPECT_EQ(s[1].weight, 0.5);
  EXPECT_EQ(llmtrain::data_mix_blend("1e308 A 1.5e308 B", ""), "0.4 A 0.6 B");
  // A file holding the same, with comments and newlines.
  const auto dir = fresh_dir("loader_mix_file");
  if (runtime().rank() == 0) std::ofstream(dir / "mix.txt") << "# pretraining mix\n0.5 A  # web\n0.5\tB\n";
  MPI_Barrier(MPI_COMM_WORLD);
  s = parse_data_mix((dir / "mix.txt").string(), "");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].dir, "B");
  for (const char* bad : {"0.3 A 0.7", "A 0.3", "-1 A 2 B", "0 A", "x A", "nan A"}) {
    try {
      parse_data_mix(bad, "");
      ADD_FAILURE() << "accepted data_mix '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("data_mix"), std::string::npos) << e.what();
    }
  }
}

TEST(DataLoader, DataMixDrawsByWeightSameOnEveryWorldSizeAndResumes) {
  auto& rt = runtime();
  const std::string a = letter_dir('a', 6), b = letter_dir('b', 30);
  Config c = small_config();
  c.data_mix = fmt::format("0.25 {} 0.75 {}", a, b);
  const int64_t B = c.batch_size, A = c.gradient_accumulation_steps, W = rt.world_size();
  // The global batch on one rank (as SameGlobalBatchesOnEveryWorldSize): letters per sample.
  Config one = c;
  one.gradient_accumulation_steps = A * W;
  TokenLoader ref(LoaderOptions::from_config(one), 0, 1, Split::train, torch::kCPU);
  TokenLoader loader(LoaderOptions::from_config(c), rt, Split::train, torch::kCPU);
  const int iters = 40;
  int64_t count_a = 0, count_b = 0;
  for (int iter = 0; iter < iters; ++iter) {
    std::vector<char> global;
    for (int64_t m = 0; m < A * W; ++m) {
      const Batch batch = ref.next();
      for (int64_t r = 0; r < B; ++r) global.push_back(letter_of(batch.x[r]));
    }
    for (char l : global) (l == 'a' ? count_a : count_b) += 1;
    ASSERT_TRUE(std::all_of(global.begin(), global.end(), [](char l) { return l == 'a' || l == 'b'; }));
    for (int64_t m = 0; m < A; ++m) {  // this rank's rows are its slice of the global batch
      const Batch mine = loader.next();
      for (int64_t r = 0; r < B; ++r)
        ASSERT_EQ(letter_of(mine.x[r]), global[static_cast<size_t>((rt.rank() * A + m) * B + r)])
            << "iter " << iter << " micro " << m << " row " << r;
    }
  }
  // The draw follows the weights (960 samples: 0.25 +- 0.05), and source_use
  // counts exactly the samples taken, on every rank.
  const double share = static_cast<double>(count_a) / static_cast<double>(count_a + count_b);
  EXPECT_NEAR(share, 0.25, 0.05);
  const auto use = loader.source_use(iters);
  ASSERT_EQ(use.size(), 2u);
  EXPECT_EQ(use[0].path, a);
  EXPECT_NEAR(use[0].weight, 0.25, 1e-12);
  EXPECT_EQ(use[0].tokens, count_a * c.block_size);
  EXPECT_EQ(use[1].tokens, count_b * c.block_size);
  EXPECT_GT(use[0].epochs, 1.0);  // the small source repeats
  EXPECT_NEAR(use[0].epochs, static_cast<double>(use[0].tokens) / read_data_info(a).train_tokens, 1e-12);
  // Resume: a fresh loader sought to a position continues exactly.
  TokenLoader resumed(LoaderOptions::from_config(c), rt, Split::train, torch::kCPU);
  TokenLoader straight(LoaderOptions::from_config(c), rt, Split::train, torch::kCPU);
  for (int i = 0; i < 11; ++i) straight.next();
  resumed.seek(11);
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(same(straight.next(), resumed.next())) << i;
}
