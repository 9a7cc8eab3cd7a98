// CheckpointWriter's turns (issue 31, point 3; src/checkpoint/checkpoint_turns.hpp):
// on a file system that locks a whole file for each write, the ranks of a node
// write their shares of a checkpoint one after the other, each holding an flock
// on the node's lock file for all its writes. Checked from outside: a save
// waits while someone else holds that lock, lets go of it when done, and the
// file it writes loads back bit for bit.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "llmtrain/distributed/runtime.hpp"
#include "llmtrain/checkpoint/checkpoint.hpp"
#include "test_util.hpp"
#include "checkpoint/checkpoint_turns.hpp"

namespace fs = std::filesystem;
using namespace llmtrain;
using namespace llmtrain::testing;

namespace {

// One float32 tensor of 3 MiB per rank (three 1 MiB pieces each), every rank
// writing its own contiguous share of the whole.
struct Shares : Stateful {
  static constexpr int64_t kPerRank = 3 * (1 << 18);
  torch::Tensor mine, loaded;
  explicit Shares(int rank) : mine(torch::arange(kPerRank, torch::kFloat) + 1e6f * static_cast<float>(rank)) {}
  void save(CheckpointWriter& w) override { w.tensor("shares", "t", {kPerRank * w.world_size()}, kPerRank * w.rank(), mine); }
  void load(CheckpointReader& r) override {
    loaded = torch::empty({kPerRank});
    r.read_tensor("shares/t", kPerRank * r.rank(), loaded);
  }
  int64_t size_bytes() const override { return kPerRank * 4; }
};

// Descriptors of this process open on `path` (its lock file: none once a save is over).
int open_descriptors_on(const std::string& path) {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (fs::read_symlink(e.path(), ec).string() == path) ++n;
  }
  return n;
}

// A directory on tmpfs (/dev/shm): a file system that locks whole files, on every Linux node.
std::string shm_dir(const std::string& name) {
  int tag = static_cast<int>(::getpid());
  MPI_Bcast(&tag, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const std::string d = "/dev/shm/llmtrain-test-" + name + "-" + std::to_string(tag);
  if (runtime().rank() == 0) fs::create_directories(d);
  MPI_Barrier(MPI_COMM_WORLD);
  return d;
}

}  // namespace

TEST(CheckpointTurns, FileSystemsThatLockWholeFiles) {
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  EXPECT_TRUE(file_system_serializes_writes("/dev/shm"));  // tmpfs
  EXPECT_FALSE(file_system_serializes_writes("/proc"));    // procfs: not a file system to write checkpoints on
  EXPECT_FALSE(file_system_serializes_writes("/no/such/directory"));
  // One lock file per directory, the same however the directory is spelt.
  EXPECT_EQ(checkpoint_turn_lock_path("/a/b"), checkpoint_turn_lock_path("/a/b/"));
  EXPECT_EQ(checkpoint_turn_lock_path("/a/b"), checkpoint_turn_lock_path("/a/./c/../b"));
  EXPECT_NE(checkpoint_turn_lock_path("/a/b"), checkpoint_turn_lock_path("/a/c"));
  EXPECT_EQ(checkpoint_turn_lock_path("/a/b").rfind("/dev/shm/", 0), 0u);
}

TEST(CheckpointTurns, EverySaveWaitsForTheNodesTurnAndLetsItGo) {
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  auto& rt = runtime();
  const std::string out = shm_dir("turns");
  Checkpointer ckpt(out, /*keep_last=*/1, rt, {"ddp", nlohmann::json::object()});
  auto part = std::make_unique<Shares>(rt.rank());
  Shares* shares = part.get();
  ckpt.add(std::move(part));
  const std::string lock = checkpoint_turn_lock_path(ckpt.dir());

  // Without anyone else holding the turn, a save takes it and gives it back.
  ckpt.save(1);
  EXPECT_EQ(open_descriptors_on(lock), 0) << "the save did not let go of " << lock;

  // Rank 0 holds the node's turn for a while: no rank of the node may write
  // before it lets go, so every save ends after that moment (CLOCK_MONOTONIC,
  // steady_clock on Linux, is one clock for every process of the node).
  using Clock = std::chrono::steady_clock;
  std::atomic<int64_t> let_go_ns{0};
  std::thread holder;
  if (rt.rank() == 0) {
    const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << lock;
    ASSERT_EQ(::flock(fd, LOCK_EX), 0);
    holder = std::thread([fd, &let_go_ns] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      let_go_ns = Clock::now().time_since_epoch().count();
      ::close(fd);
    });
  }
  MPI_Barrier(MPI_COMM_WORLD);
  ckpt.save(2);
  const int64_t saved_ns = Clock::now().time_since_epoch().count();
  if (holder.joinable()) holder.join();
  int64_t let_go = let_go_ns;
  MPI_Bcast(&let_go, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  EXPECT_GT(let_go, 0);
  EXPECT_GT(saved_ns, let_go) << "rank " << rt.rank() << "'s save ended " << (let_go - saved_ns) / 1e6
                              << " ms before the node's turn was let go: it wrote out of turn";
  EXPECT_EQ(open_descriptors_on(lock), 0) << "the save did not let go of " << lock;
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_FALSE(fs::exists(lock)) << "the lock file outlived the save";

  // What was written in turns reads back bit for bit.
  const auto loaded = ckpt.load_latest();
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->iteration, 2);
  EXPECT_TRUE(torch::equal(shares->loaded, shares->mine));
  MPI_Barrier(MPI_COMM_WORLD);
  if (rt.rank() == 0) fs::remove_all(out);
}

namespace {

// Two tensors whose ranks' shares start and end inside pages: "big" (about
// 1.2 MB per rank, of different sizes) and "small" (37 elements per rank, a
// dataset that HDF5 places without alignment), so a direct write has a
// partial page at each end of a share and an aligned inside.
struct OddShares : Stateful {
  int rank, world;
  torch::Tensor big, small, big_loaded, small_loaded;
  static int64_t big_size(int r) { return 300007 + 1000 * r; }
  static int64_t big_offset(int r) {
    int64_t o = 0;
    for (int i = 0; i < r; ++i) o += big_size(i);
    return o;
  }
  OddShares(int r, int w, uint64_t seed) : rank(r), world(w) {
    torch::manual_seed(seed + static_cast<uint64_t>(r));
    big = torch::randn({big_size(r)});
    small = torch::randn({37});
  }
  void save(CheckpointWriter& w) override {
    w.tensor("odd", "big", {big_offset(world)}, big_offset(rank), big);
    w.tensor("odd", "small", {37 * world}, 37 * rank, small);
  }
  void load(CheckpointReader& r) override {
    big_loaded = torch::empty({big_size(rank)});
    small_loaded = torch::empty({37});
    r.read_tensor("odd/big", big_offset(rank), big_loaded);
    r.read_tensor("odd/small", 37 * rank, small_loaded);
  }
  int64_t size_bytes() const override { return (big_size(rank) + 37) * 4; }
};

}  // namespace

// Direct I/O (CheckpointWriter::finish): the whole pages inside each share go
// through O_DIRECT, the partial pages at the ends through HDF5. Saved with
// direct I/O on and off, both files load back bit for bit (their checksums
// verified on load) and hold the same bytes.
TEST(CheckpointDirectIO, SharesAtOddOffsetsReadBackBitForBit) {
  auto& rt = runtime();
  int tag = static_cast<int>(::getpid());
  MPI_Bcast(&tag, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const std::string base = (fs::current_path() / ("direct-io-" + std::to_string(tag))).string();
  if (rt.rank() == 0) fs::create_directories(base);
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string probe = base + "/probe";
  if (rt.rank() == 0) std::ofstream(probe) << "x";
  MPI_Barrier(MPI_COMM_WORLD);
  const size_t align = checkpoint_direct_io_alignment(probe);
  ::setenv("LLMTRAIN_CHECKPOINT_DIRECT_IO", "0", 1);
  EXPECT_EQ(checkpoint_direct_io_alignment(probe), 0u) << "LLMTRAIN_CHECKPOINT_DIRECT_IO=0 must turn it off";
  ::unsetenv("LLMTRAIN_CHECKPOINT_DIRECT_IO");
  EXPECT_EQ(checkpoint_direct_io_alignment("/dev/shm/x"), 0u) << "tmpfs has no O_DIRECT";
  if (align == 0) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rt.rank() == 0) fs::remove_all(base);
    GTEST_SKIP() << "the build directory's file system (" << base
                 << ") has no direct I/O for checkpoints (not ext4/XFS/btrfs/f2fs, or a kernel before 6.1)";
  }
  EXPECT_EQ(align % 512, 0u);

  std::vector<std::string> files;
  for (const char* direct : {"1", "0"}) {
    ::setenv("LLMTRAIN_CHECKPOINT_DIRECT_IO", direct, 1);
    const std::string out = base + "/direct_" + direct;
    Checkpointer ckpt(out, /*keep_last=*/1, rt, {"zero1", nlohmann::json::object()});
    auto part = std::make_unique<OddShares>(rt.rank(), rt.world_size(), 7);
    OddShares* odd = part.get();
    ckpt.add(std::move(part));
    // The two saves a second apart at least: their bytes must not depend on when they were written.
    if (!files.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    files.push_back(ckpt.save(1));
    const auto loaded = ckpt.load_latest();
    ASSERT_TRUE(loaded.has_value()) << "direct=" << direct;
    EXPECT_TRUE(torch::equal(odd->big_loaded, odd->big)) << "direct=" << direct;
    EXPECT_TRUE(torch::equal(odd->small_loaded, odd->small)) << "direct=" << direct;
  }
  ::unsetenv("LLMTRAIN_CHECKPOINT_DIRECT_IO");
  MPI_Barrier(MPI_COMM_WORLD);
  if (rt.rank() == 0) {
    // Same layout, same bytes: the files are identical but for the root's `created` attribute (the
    // second each save began; HDF5's own object times are off), blanked here in both.
    std::ifstream a(files[0], std::ios::binary), b(files[1], std::ios::binary);
    std::string da((std::istreambuf_iterator<char>(a)), {}), db((std::istreambuf_iterator<char>(b)), {});
    auto blank_stamps = [](std::string& bytes) {  // every YYYY-MM-DDTHH:MM:SSZ
      const std::string form = "dddd-dd-ddTdd:dd:ddZ";
      for (size_t i = 0; i + form.size() <= bytes.size(); ++i) {
        size_t j = 0;
        for (; j < form.size(); ++j) {
          const char c = bytes[i + j];
          if (form[j] == 'd' ? !std::isdigit(static_cast<unsigned char>(c)) : c != form[j]) break;
        }
        if (j == form.size()) std::fill_n(bytes.begin() + static_cast<std::ptrdiff_t>(i), form.size(), '#');
      }
    };
    blank_stamps(da);
    blank_stamps(db);
    EXPECT_EQ(da.size(), db.size());
    EXPECT_TRUE(da == db) << files[0] << " (direct) and " << files[1] << " (buffered) differ";
    fs::remove_all(base);
  }
}
