// HDF5 checkpoints (docs/checkpoint-format.md): one file per checkpoint holding
// the whole training state — every parameter and both AdamW moments stored
// whole (sharded strategies write their shards in parallel, through MPI-IO,
// into the one file), the iteration, the LR-schedule settings, the best val
// loss, the data position, every rank's RNG state, the loss scaler, the whole
// config and the program and library versions.
//
// Each part of the state that has state saves and loads its own piece through
// one small interface, Stateful (torchtitan's checkpoint manager; the parts are
// in train/checkpoint_parts.hpp). The Checkpointer only orchestrates: a
// temporary file, every registered part writes, close, publish; on load the
// newest file every part accepts, every part reads, finish.
//
// Nothing is lost: a checkpoint is written under a temporary name, closed (its
// error checked), synced and renamed; `latest` moves only after that; the
// `keep_last` newest are kept. A rank killed at any moment of a save leaves the
// previous checkpoint intact and loadable. Loading takes the newest loadable
// checkpoint; a corrupt or missing newest one falls back to the previous with a
// warning. Because tensors are stored whole, any strategy and world size loads
// what any other wrote.
//
// Every dataset carries the CRC32C of its bytes (attribute crc32c), computed by
// the writing ranks on the slices they write and combined (core/crc32c.hpp);
// loading recomputes it on the slices each rank reads and a mismatch makes the
// file unusable (the previous one is loaded, with a warning). A save that
// fails on any rank (a full disk) fails on every rank together, after the same
// collective calls, and leaves nothing behind (CheckpointSaveFailed).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "llmtrain/core/error.hpp"

namespace llmtrain {

class Runtime;
// The communicator a save writes over, opaque here (src/checkpoint/checkpoint_comm.hpp).
struct CheckpointComm;
struct CheckpointOps;

// What a part writes through. Every call is collective: every rank makes the
// same calls with the same names, shapes and attribute values (parallel HDF5
// wants metadata calls collective). Groups are paths ("train_state",
// "optimizer/exp_avg"; "" = the root), created on first use.
class CheckpointWriter {
 public:
  ~CheckpointWriter();
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int64_t iteration() const { return iteration_; }  // the iteration being saved
  bool recording() const { return record_ != nullptr; }  // an asynchronous save's snapshot, not the file
  // Scalar attributes (strings fixed-length, NUL-padded).
  void attr(const std::string& group, const char* name, int64_t v);
  void attr(const std::string& group, const char* name, double v);
  void attr(const std::string& group, const char* name, const std::string& v);
  // A float32 dataset `group`/`name` of `shape` (rank 1 or 2), the whole tensor:
  // this rank writes elements [offset, offset + part.numel()) in row-major order
  // (`part` 1-D, any device and dtype; undefined or empty: this rank writes nothing).
  void tensor(const std::string& group, const std::string& name, const std::vector<int64_t>& shape, int64_t offset,
              const torch::Tensor& part);
  // A uint8 dataset (world_size, bytes) `group`/`name`: every rank writes its
  // row; rows must have the same length on every rank.
  void rank_row(const std::string& group, const std::string& name, const std::vector<uint8_t>& row);

 private:
  friend class Checkpointer;
  struct File;
  // Writes the file `path` through MPI-IO over `comm` (every rank of the run).
  CheckpointWriter(const std::string& path, const Runtime& rt, int64_t iteration, const CheckpointComm& over);
  // Records every call into `ops` instead, tensors copied off the device (an
  // asynchronous save's snapshot; nothing is collective then).
  CheckpointWriter(CheckpointOps& ops, const Runtime& rt, int64_t iteration);
  void replay(const CheckpointOps& ops);  // makes the recorded calls on this file
  // Collective: writes this rank's tensor slices (tensor() only creates the
  // datasets), all in file order; where the file system locks a whole file per
  // write the ranks of a node take turns (checkpoint/checkpoint_turns.hpp). Then
  // combines every rank's slice checksums and writes each dataset's crc32c.
  void finish();
  // Collective: closes the file. Returns this rank's first failure ("" = none):
  // a failed write does not throw, so every rank makes the same collective calls.
  std::string close();
  int failure_errno() const;
  std::unique_ptr<File> f_;
  CheckpointOps* record_ = nullptr;
  int rank_, world_size_;
  int64_t iteration_;
};

// What a part reads through: a file opened by rank 0 alone for check(), or
// by every rank for load(). Attribute readers name the file and the attribute
// when it is missing.
class CheckpointReader {
 public:
  ~CheckpointReader();
  const std::string& path() const { return path_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }            // of this run
  int64_t written_world_size() const;                        // of the run that wrote the file
  int64_t iteration() const;                                 // iterations the file's run had completed
  bool exists(const std::string& object) const;              // a group or dataset: "rng", "model/wte.weight"
  bool has_attr(const std::string& group, const char* name) const;
  // CheckpointUnusable naming the file and the attribute when a counter or
  // size (iteration, world_size, bad_steps, ...) is out of range.
  void check_metadata() const;
  // CheckpointUnusable "checkpoint '<path>' has no group '<group>'" when it is missing.
  void require_group(const std::string& group) const;
  int64_t attr_i64(const std::string& group, const char* name) const;
  double attr_f64(const std::string& group, const char* name) const;
  std::string attr_str(const std::string& group, const char* name) const;
  struct Dataset {
    std::vector<int64_t> shape;
    bool float32 = false;
  };
  // CheckpointUnusable naming the file and dataset when it cannot be opened.
  Dataset dataset(const std::string& path) const;
  // Reads elements [offset, offset + dst.numel()) of the float32 dataset `path`
  // (row-major) into `dst` (any device and dtype; undefined or empty: nothing).
  // Every rank calls it for every dataset, each with its own slice.
  void read_tensor(const std::string& path, int64_t offset, const torch::Tensor& dst);
  // Collective: this rank's row of the (world_size, bytes) uint8 dataset
  // `path`; nullopt when it is missing or another world size wrote it.
  std::optional<std::vector<uint8_t>> rank_row(const std::string& path);

 private:
  friend class Checkpointer;
  struct File;
  // Collective, after every part has read: combines every rank's checksums of
  // what it read and compares them with the datasets' crc32c. Returns the
  // mismatches (the same on every rank), each naming the file and the dataset;
  // `unchecked` counts datasets written without a checksum (older files).
  std::vector<std::string> verify(int64_t& unchecked);
  // collective: every rank opens through MPI-IO; otherwise this rank alone
  // (CheckpointUnusable when the file is missing, not HDF5 or cannot be opened).
  CheckpointReader(const std::string& path, const Runtime& rt, bool collective);
  bool close();  // false when closing fails
  std::unique_ptr<File> f_;
  std::string path_;
  int rank_, world_size_;
};

// Stateful::check's verdicts: the file cannot be loaded (truncated, a part
// missing: the previous checkpoint is tried) ...
class CheckpointUnusable : public Error {
 public:
  using Error::Error;
};
// A checksum mismatch found while every rank reads (the previous checkpoint is tried).
class CheckpointCorrupt : public CheckpointUnusable {
 public:
  using CheckpointUnusable::CheckpointUnusable;
};
// A save that failed on some rank, thrown on every rank together; the partial
// file is removed and the previous checkpoints are untouched.
class CheckpointSaveFailed : public Error {
 public:
  using Error::Error;
};
// ... or it is a sound checkpoint of another model (the config is wrong, not
// the file: loading stops with this error).
class CheckpointMismatch : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// A part of the training state that saves and loads its own piece of a checkpoint.
class Stateful {
 public:
  virtual ~Stateful() = default;
  // Collective: writes this part.
  virtual void save(CheckpointWriter& w) = 0;
  // Rank 0 alone, before any rank reads: throws CheckpointUnusable or
  // CheckpointMismatch when this part cannot be loaded from the file.
  virtual void check(const CheckpointReader& r) const { (void)r; }
  // Collective: reads this part from a file every part's check() accepted.
  virtual void load(CheckpointReader& r) = 0;
  // Collective, once every part is read and the file is closed.
  virtual void finish_load() {}
  // Bytes this part's datasets take (at least); the free-space check before a save.
  virtual int64_t size_bytes() const { return 0; }
};

// Scalars of the run besides the tensors (the trainer's counters).
struct TrainState {
  int64_t iteration = 0;                   // iterations completed (the next to run)
  double best_val_loss = 0;                // +inf until the first evaluation
  int64_t bad_steps = 0;                   // non-finite updates skipped so far (run log: bad_steps)
};

// The run that writes: root attributes of every checkpoint besides the parts'.
struct CheckpointRun {
  std::string strategy;                    // "ddp" | "zero1" | "fsdp"
  nlohmann::json config;                   // every configuration key
  std::string tokenizer;                   // the data's tokenizer: "byte", "gpt2 <sha256 of its files>"
};

struct LoadedCheckpoint {
  std::string path;
  int64_t iteration = 0;                   // iterations the writing run had completed
  int64_t world_size = 0;                  // of the run that wrote it
  std::string strategy;                    // "ddp" | "zero1" | "fsdp" of the run that wrote it
  nlohmann::json config;                   // the config of the run that wrote it
  TrainState state;                        // the counters it held (set by the trainer's TrainState part)
};

class Checkpointer {
 public:
  // `out_dir`/checkpoints holds the files. Rank 0 creates it and removes
  // leftovers of interrupted saves (hidden temporary files).
  Checkpointer(const std::string& out_dir, int64_t keep_last, const Runtime& rt, CheckpointRun run);
  ~Checkpointer();

  // Parts save and load in the order they are added.
  void add(std::unique_ptr<Stateful> part);

  // Collective. Writes checkpoints/ckpt_<iteration>.h5 (every part its piece),
  // renames it into place, moves `latest`, prunes to keep_last. Returns the
  // path. Throws Error naming the file on any failure; the previous
  // checkpoints are untouched then. Waits for an asynchronous save in flight first.
  std::string save(int64_t iteration);

  // An asynchronous save (checkpoint_async=true; torchtitan's and Megatron's
  // async checkpointing). Collective. Waits for the save in flight, then copies
  // every part's state (device -> pinned host memory on CUDA, a host copy on
  // CPU: the blocking part) and returns; a thread of its own writes the copy
  // and publishes it as save() does, over a communicator of its own, while
  // training goes on. The outcome is read by wait() (or the next save).
  void save_async(int64_t iteration);
  struct AsyncResult {
    int64_t iteration = -1;
    std::string path;       // the published checkpoint ("" when it failed)
    std::string error;      // why it failed, naming the file (the same on every rank)
    double snapshot_seconds = 0;  // the blocking copy
    double write_seconds = 0;     // the background write and publish
  };
  // Collective. Joins the save in flight; nullopt when none was.
  std::optional<AsyncResult> wait();

  // Collective. Loads the newest loadable checkpoint into every part and
  // returns what it said; nullopt when the directory holds no checkpoint at
  // all. Throws ConfigError when a part does not match the file (the file is
  // fine, the config is not), Error when every checkpoint present is unreadable.
  std::optional<LoadedCheckpoint> load_latest();

  const std::string& dir() const { return dir_; }
  // Path `latest` points to, or "" (rank-local read; for messages).
  std::string latest_path() const;

 private:
  void write_header(CheckpointWriter& w) const;
  void check_free_space(const std::string& final_path, int64_t needed, const CheckpointComm& over) const;  // collective
  std::string kept() const;                                                    // "'<latest>' is kept"
  std::string inspect(const std::string& path) const;  // rank 0's verdict on one file
  // rank 0: the newest loadable file not in `skip`
  std::string choose(std::string& verdict, const std::vector<std::string>& skip) const;
  LoadedCheckpoint load_file(const std::string& path);  // collective; CheckpointCorrupt on a checksum mismatch
  void prune() const;
  // Writes `tmp` (through `write`), then publishes it; every rank returns the same error text.
  std::string write_and_publish(int64_t iteration, const CheckpointComm& over,
                                const std::function<void(CheckpointWriter&)>& write);

  std::string dir_;
  int64_t keep_last_;
  const Runtime& rt_;
  CheckpointRun run_;
  std::vector<std::unique_ptr<Stateful>> parts_;
  // The asynchronous save: its own communicator (a duplicate of the world), the
  // thread writing, the snapshot it writes, and the host buffers reused by the next.
  struct Async;
  std::unique_ptr<Async> async_;
};

// "ckpt_00000120.h5"
std::string checkpoint_file_name(int64_t iteration);

// One process, no MPI collectives: checks a checkpoint file on its own (the
// llmtrain-checkpoint app): the header, the root and train_state metadata in
// range, and every dataset read whole against its crc32c. Returns the problems
// ("" entries never); `notes` gets what is fine but worth saying (no checksums).
std::vector<std::string> verify_checkpoint_file(const std::string& path, std::vector<std::string>& notes);

}  // namespace llmtrain
