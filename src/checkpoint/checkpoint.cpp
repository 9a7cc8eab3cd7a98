// HDF5 checkpoints: the layout is docs/checkpoint-format.md.
//   /                      attributes: format, format_version, iteration, world_size, strategy, created,
//                          llmtrain_version, torch_version, versions (JSON), config (JSON)  [the Checkpointer]
//                          param_names (JSON)                                              [StrategyCheckpoint]
//   /model/<name>          float32, the parameter's shape (the fp32 master copy where one exists)
//   /optimizer/exp_avg/<name>, /optimizer/exp_avg_sq/<name>   float32, the parameter's shape
//   /optimizer             attribute: steps                                                [StrategyCheckpoint]
//   /train_state           attributes: iteration, best_val_loss, bad_steps                 [TrainStateCheckpoint]
//                          loss_scale, loss_scale_growth_tracker, loss_scale_skipped       [LossScalerCheckpoint]
//                          global_batch_sequences, block_size, seed                        [DataPositionCheckpoint]
//   /schedule              attributes: learning_rate, min_lr, warmup_iters, lr_decay_iters,
//                          decay_lr                                                         [ScheduleCheckpoint]
//   /rng/cpu               uint8 (world_size, state bytes): every rank's CPU generator      [RngCheckpoint]
//   /rng/cuda              uint8 (world_size, state bytes): every rank's CUDA generator (CUDA runs)
// The Checkpointer writes the header and orchestrates; each part writes its own
// piece (train/checkpoint_parts.hpp) through CheckpointWriter (checkpoint_io.cpp).
#include "llmtrain/checkpoint/checkpoint.hpp"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <fmt/format.h>
#include <torch/torch.h>

#include "core/mpi_util.hpp"
#include "llmtrain/core/atomic_file.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/core/fault.hpp"
#include "llmtrain/core/log.hpp"
#include "llmtrain/core/hdf5_mutex.hpp"
#include "llmtrain/data/loader.hpp"  // defines: data_mix_blend (the blend a data_mix file held)
#include "llmtrain/distributed/runtime.hpp"
#include "llmtrain/record/run_log.hpp"
#include "checkpoint/checkpoint_ops.hpp"

namespace llmtrain {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kFormatVersion = 1;
constexpr const char* kFormat = "llmtrain-checkpoint";
const std::regex kCheckpointName(R"(ckpt_(\d{8,})\.h5)");

// Checkpoint file names in `dir`, newest first.
std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, kCheckpointName)) found.emplace_back(std::stoll(m[1].str()), name);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::string bcast_from_root(const std::string& s) { return mpi::bcast_string(MPI_COMM_WORLD, s, 0); }

// Collective: the first failing rank's failure ("" when none) and its errno,
// the same on every rank.
std::string agree_on_failure(const std::string& mine, int& err, MPI_Comm comm) {
  int rank = 0, size = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  int first = mine.empty() ? size : rank;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == size) return "";
  MPI_CHECK(MPI_Bcast(&err, 1, MPI_INT, first, comm));
  return fmt::format("rank {}: {}", first, mpi::bcast_string(comm, mine, first));
}

// The fault point disk_full_during_save: a ballast file fills the file system
// of `dir` (a real ENOSPC for the save's next writes); removed after the save.
std::string fill_disk(const std::string& dir) {
  const std::string path = (fs::path(dir) / ".disk_full_ballast.tmp").string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return "";
  std::vector<char> zeros(1 << 16, 0);
  while (::write(fd, zeros.data(), zeros.size()) > 0) {}
  ::fsync(fd);
  ::close(fd);
  return path;
}

}  // namespace

// The asynchronous save (save_async): what its writer thread works with.
struct Checkpointer::Async {
  MPI_Comm comm = MPI_COMM_NULL;  // the writer thread's own: never interleaves with the training's collectives
  std::thread writer;
  CheckpointOps snapshot;
  AsyncResult result;
  ~Async() {
    if (writer.joinable()) writer.join();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm);
  }
};

std::string checkpoint_file_name(int64_t iteration) { return fmt::format("ckpt_{:08d}.h5", iteration); }

Checkpointer::Checkpointer(const std::string& out_dir, int64_t keep_last, const Runtime& rt, CheckpointRun run)
    : dir_((fs::path(out_dir) / "checkpoints").string()), keep_last_(keep_last), rt_(rt), run_(std::move(run)) {
  LLMTRAIN_CHECK(keep_last >= 1, "keep_last must be >= 1, got {}", keep_last);
  std::string err;
  if (rt.is_root()) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) {
      err = fmt::format("cannot create the checkpoint directory '{}': {}", dir_, ec.message());
    } else if (::access(dir_.c_str(), W_OK) != 0) {
      err = fmt::format("the checkpoint directory '{}' is not writable: {}", dir_, std::strerror(errno));
    } else {
      // Leftovers of saves that were interrupted: never loaded, safe to remove.
      for (const auto& e : fs::directory_iterator(dir_, ec)) {
        const std::string name = e.path().filename().string();
        if (name.size() > 1 && name[0] == '.' && name.find(".tmp") != std::string::npos) fs::remove(e.path(), ec);
      }
    }
  }
  err = bcast_from_root(err);
  if (!err.empty()) throw Error(err);
}

// A save still in flight when the run ends by an error is finished (its
// writer's collectives need every rank, and every rank gets here).
Checkpointer::~Checkpointer() = default;

void Checkpointer::add(std::unique_ptr<Stateful> part) { parts_.push_back(std::move(part)); }

std::string Checkpointer::latest_path() const {
  std::ifstream in(fs::path(dir_) / "latest");
  std::string name;
  if (!(in >> name)) return "";
  return (fs::path(dir_) / name).string();
}

// The root attributes: what the file is and which run wrote it.
void Checkpointer::write_header(CheckpointWriter& w) const {
  const auto versions = library_versions();
  std::time_t now = std::time(nullptr);
  char created[32];
  std::strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  w.attr("", "format", std::string(kFormat));
  w.attr("", "format_version", kFormatVersion);
  w.attr("", "iteration", w.iteration());
  w.attr("", "world_size", static_cast<int64_t>(w.world_size()));
  w.attr("", "strategy", run_.strategy);
  w.attr("", "created", std::string(created));
  w.attr("", "llmtrain_version", versions.value("llmtrain", std::string("?")));
  w.attr("", "torch_version", versions.value("libtorch", std::string("?")));
  w.attr("", "versions", versions.dump());
  w.attr("", "config", run_.config.dump());
  w.attr("", "tokenizer", run_.tokenizer);
  // data_mix may name a file: the blend it held is kept, so that a resume sees a
  // change of the file's weights (ResumeConfigCheck, resume_changes).
  if (const std::string mix = run_.config.value("data_mix", std::string()); !mix.empty())
    w.attr("", "data_mix_blend", data_mix_blend(mix, run_.config.value("data_dir", std::string())));
}

// Keeps the newest keep_last; `latest` is the newest, so it survives.
void Checkpointer::prune() const {
  const auto all = list_checkpoints(dir_);
  for (size_t i = static_cast<size_t>(keep_last_); i < all.size(); ++i) {
    std::error_code ec;
    fs::remove(fs::path(dir_) / all[i], ec);
  }
}

// After a failed save: what stays loadable.
std::string Checkpointer::kept() const {
  const std::string latest = latest_path();
  return latest.empty() ? "there is no earlier checkpoint" : fmt::format("'{}' is kept", latest);
}

// Collective over `comm`: refuses a save that cannot fit before writing a byte.
void Checkpointer::check_free_space(const std::string& final_path, int64_t needed, MPI_Comm comm) const {
  std::string err;
  if (rt_.is_root()) {
    const int64_t free = free_bytes(dir_);
    if (free >= 0 && free < needed)
      err = fmt::format("checkpoint '{}' not written: no space left on device: {} bytes free on the file system of "
                        "'{}', {} needed; {}",
                        final_path, free, dir_, needed, kept());
  }
  err = mpi::bcast_string(comm, err, 0);
  if (!err.empty()) throw CheckpointSaveFailed(err);
}

// Collective over `comm` (the world's, or the asynchronous writer's own).
std::string Checkpointer::write_and_publish(int64_t iteration, MPI_Comm comm,
                                            const std::function<void(CheckpointWriter&)>& write) {
  const std::string name = checkpoint_file_name(iteration);
  const fs::path final_path = fs::path(dir_) / name;
  const fs::path tmp_path = fs::path(dir_) / ("." + name + ".tmp");  // the same name on every rank
  int64_t needed = 0;
  for (const auto& part : parts_) needed += part->size_bytes();
  check_free_space(final_path.string(), needed, comm);
  // Every rank makes every collective call even after a failed write (the
  // writer keeps the failure), then all learn of any rank's failure together.
  std::string failure;
  int err = 0;
  std::string ballast;
  std::unique_ptr<CheckpointWriter> writer;
  try {
    writer.reset(new CheckpointWriter(tmp_path.string(), rt_, iteration, comm));  // collective: fails on every rank
  } catch (const Error& e) {
    throw CheckpointSaveFailed(fmt::format("checkpoint '{}' not written: {}", final_path.string(), e.what()));
  }
  {
    CheckpointWriter& w = *writer;
    if (fault::hit(fault::Point::disk_full_during_save, rt_.rank(), iteration)) ballast = fill_disk(dir_);
    write(w);
    w.finish();
    // A failed write on any rank: the partial file is emptied before the close
    // (on a full disk the close's metadata write would fail too, and HDF5 would
    // keep a file it could not close until MPI_Finalize).
    int failed = w.failure_errno() != 0;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, comm));
    if (failed) {
      if (!ballast.empty()) fs::remove(ballast);
      if (rt_.is_root()) (void)::truncate(tmp_path.c_str(), 0);
      MPI_CHECK(MPI_Barrier(comm));
    }
    failure = w.close();  // this rank's first failure: its write's, else the close's
    err = w.failure_errno();
    writer.reset();
  }
  failure = agree_on_failure(failure, err, comm);
  if (!ballast.empty()) fs::remove(ballast);
  if (!failure.empty()) {
    std::error_code ec;
    if (rt_.is_root()) fs::remove(tmp_path, ec);  // the partial file goes; the older checkpoints and `latest` stay
    MPI_CHECK(MPI_Barrier(comm));
    const std::string space =
        err == ENOSPC ? fmt::format("no space left on device ({} bytes free on the file system of '{}', {} needed); ",
                                    free_bytes(dir_), dir_, needed)
                      : "";
    throw CheckpointSaveFailed(
        fmt::format("checkpoint '{}' not written: {}{}; {}", final_path.string(), space, failure, kept()));
  }
  // Every rank's data is in the file: rank 0 makes it the checkpoint.
  MPI_CHECK(MPI_Barrier(comm));
  std::string perr;
  if (rt_.is_root()) {
    try {
      publish_file(tmp_path, final_path);
      write_file_atomic(fs::path(dir_) / "latest", name + "\n");
      prune();
    } catch (const std::exception& e) {
      perr = fmt::format("checkpoint '{}' was written but not put in place: {}", final_path.string(), e.what());
      std::error_code ec;
      fs::remove(tmp_path, ec);
    }
  }
  perr = mpi::bcast_string(comm, perr, 0);
  if (!perr.empty()) throw CheckpointSaveFailed(perr);
  return final_path.string();
}

std::string Checkpointer::save(int64_t iteration) {
  wait();  // one save at a time; its outcome was the caller's to read
  torch::NoGradGuard no_grad;
  return write_and_publish(iteration, MPI_COMM_WORLD, [&](CheckpointWriter& w) {
    write_header(w);
    for (const auto& part : parts_) part->save(w);
  });
}

// ---- asynchronous saves --------------------------------------------------------------


void Checkpointer::save_async(int64_t iteration) {
  wait();
  if (!async_) {
    async_ = std::make_unique<Async>();
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &async_->comm));
  }
  Async& a = *async_;
  const auto t0 = std::chrono::steady_clock::now();
  {
    torch::NoGradGuard no_grad;
    a.snapshot.recycle();
    CheckpointWriter rec(a.snapshot, rt_, iteration);
    write_header(rec);
    for (const auto& part : parts_) part->save(rec);
    if (a.snapshot.any_cuda) torch::cuda::synchronize();  // the device -> pinned host copies are done
  }
  a.result = AsyncResult{};
  a.result.iteration = iteration;
  a.result.snapshot_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  a.writer = std::thread([this, &a, iteration] {
    const auto t1 = std::chrono::steady_clock::now();
    try {
      a.result.path = write_and_publish(iteration, a.comm, [&](CheckpointWriter& w) { w.replay(a.snapshot); });
    } catch (const std::exception& e) {
      a.result.error = e.what();
    }
    a.result.write_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  });
}

std::optional<Checkpointer::AsyncResult> Checkpointer::wait() {
  if (!async_ || !async_->writer.joinable()) return std::nullopt;
  async_->writer.join();
  return async_->result;
}


// Rank 0's verdict on a file before every rank reads it collectively: "" when
// every part can load it; "corrupt: ..." when it cannot be read; "mismatch: ..."
// when it is readable but written for another model.
std::string Checkpointer::inspect(const std::string& path) const {
  try {
    CheckpointReader r(path, rt_, /*collective=*/false);
    try {
      if (r.attr_str("", "format") != kFormat) return fmt::format("corrupt: '{}' is not an llmtrain checkpoint", path);
      const int64_t version = r.attr_i64("", "format_version");
      if (version != kFormatVersion)
        return fmt::format("mismatch: '{}' has checkpoint format version {}, this llmtrain reads {}", path, version,
                           kFormatVersion);
      r.check_metadata();
      for (const auto& part : parts_) part->check(r);
    } catch (const CheckpointMismatch& e) {
      return fmt::format("mismatch: {}", e.what());
    } catch (const CheckpointUnusable& e) {
      return fmt::format("corrupt: {}", e.what());
    } catch (const std::exception& e) {
      return fmt::format("corrupt: reading '{}': {}", path, e.what());
    }
    if (!r.close()) return fmt::format("corrupt: closing '{}' failed", path);
  } catch (const CheckpointUnusable& e) {  // missing, not HDF5, cannot be opened
    return fmt::format("corrupt: {}", e.what());
  }
  return "";
}

// Rank 0: the newest file every part can load, `latest` first, then the others
// newest first; "" with `verdict` "mismatch: ..." or "unreadable: ..." when none
// can be loaded, "" alone when there is none.
std::string Checkpointer::choose(std::string& verdict, const std::vector<std::string>& skip) const {
  std::vector<std::string> order;
  const std::string latest = latest_path();
  if (!latest.empty()) order.push_back(latest);
  for (const auto& name : list_checkpoints(dir_))
    if (const std::string p = (fs::path(dir_) / name).string(); p != latest) order.push_back(p);
  std::vector<std::string> skipped(skip);
  for (const auto& p : order) {
    if (std::find(skip.begin(), skip.end(), p) != skip.end()) continue;
    const std::string v = inspect(p);
    if (v.empty()) return p;
    if (v.rfind("mismatch: ", 0) == 0) {
      verdict = v;
      return "";
    }
    log::warn("checkpoint {} is unusable ({}); trying the previous one", p, v.substr(9));
    skipped.push_back(v.substr(9));
  }
  if (!order.empty())
    verdict = fmt::format("unreadable: no checkpoint in '{}' can be loaded: {}", dir_,
                          skipped.empty() ? std::string("?") : skipped.front());
  return "";
}

// Collective: every part reads `path`; the checksums of what every rank read
// are compared before any part installs it.
LoadedCheckpoint Checkpointer::load_file(const std::string& path) {
  CheckpointReader r(path, rt_, /*collective=*/true);
  LoadedCheckpoint out;
  out.path = path;
  out.iteration = r.iteration();
  out.world_size = r.written_world_size();
  out.strategy = r.attr_str("", "strategy");
  out.config = nlohmann::json::parse(r.attr_str("", "config"));
  if (r.has_attr("", "data_mix_blend")) out.config["data_mix_blend"] = r.attr_str("", "data_mix_blend");
  for (const auto& part : parts_) part->load(r);
  int64_t unchecked = 0;
  const auto bad = r.verify(unchecked);
  if (!r.close()) throw Error(fmt::format("closing checkpoint '{}' failed", path));
  if (!bad.empty()) throw CheckpointCorrupt(bad.front());
  if (unchecked)
    log::info("checkpoint {} was written without checksums (an older llmtrain): {} datasets loaded unverified", path,
              unchecked);
  return out;
}

std::optional<LoadedCheckpoint> Checkpointer::load_latest() {
  torch::NoGradGuard no_grad;
  std::vector<std::string> corrupt;  // failed their checksums: the previous one is tried
  for (;;) {
    // Rank 0 picks the file; every rank follows its verdict.
    std::string chosen, verdict;
    if (rt_.is_root()) chosen = choose(verdict, corrupt);
    chosen = bcast_from_root(chosen);
    verdict = bcast_from_root(verdict);
    if (verdict.rfind("mismatch: ", 0) == 0) throw ConfigError(verdict.substr(10));
    if (!verdict.empty()) throw Error(verdict.substr(std::strlen("unreadable: ")));
    if (chosen.empty()) return std::nullopt;
    try {
      LoadedCheckpoint out = load_file(chosen);
      for (const auto& part : parts_) part->finish_load();
      return out;
    } catch (const CheckpointCorrupt& e) {  // the same verdict on every rank (verify is collective)
      log::warn("checkpoint {} is unusable ({}); trying the previous one", chosen, e.what());
      corrupt.push_back(chosen);
    }
  }
}

}  // namespace llmtrain
