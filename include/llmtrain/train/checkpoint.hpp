// HDF5 checkpoints (docs/checkpoint-format.md): one file per checkpoint holding
// the whole training state — every parameter and both AdamW moments stored
// whole (sharded strategies write their shards in parallel, through MPI-IO,
// into the one file), the iteration, the LR-schedule settings, the best val
// loss, the data position, every rank's RNG state, the loss scaler, the whole
// config and the program and library versions.
//
// Nothing is lost: a checkpoint is written under a temporary name, closed (its
// error checked), synced and renamed; `latest` moves only after that; the
// `keep_last` newest are kept. A rank killed at any moment of a save leaves the
// previous checkpoint intact and loadable. Loading takes the newest loadable
// checkpoint; a corrupt or missing newest one falls back to the previous with a
// warning. Because tensors are stored whole, any strategy and world size loads
// what any other wrote.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmtrain/train/precision.hpp"

namespace llmtrain {

class Runtime;
class Strategy;

// Scalars of the training state besides the tensors.
struct TrainState {
  int64_t iteration = 0;                   // iterations completed (the next to run)
  double best_val_loss = 0;                // +inf until the first evaluation
  int64_t bad_steps = 0;                   // non-finite updates skipped so far (run log: bad_steps)
  LossScaler::State loss_scaler{65536.0, 0, 0};
  // The data position: the loader is a pure function of (seed, iteration,
  // sample), so the iteration and the global batch that produced it suffice.
  int64_t global_batch_sequences = 0;
  int64_t block_size = 0;
  int64_t seed = 0;
};

// One parameter as checkpoints name it (ParamGroups order = named_parameters()).
struct CheckpointParam {
  std::string name;                        // "h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;
};

struct LoadedCheckpoint {
  std::string path;
  TrainState state;
  nlohmann::json config;                   // the config of the run that wrote it
  int64_t world_size = 0;                  // of the run that wrote it
  std::string strategy;                    // "ddp" | "zero1" | "fsdp" of the run that wrote it
  bool rng_restored = false;               // this rank's RNG state came from the file
};

class Checkpointer {
 public:
  // `out_dir`/checkpoints holds the files. Rank 0 creates it and removes
  // leftovers of interrupted saves (hidden temporary files).
  Checkpointer(const std::string& out_dir, int64_t keep_last, const Runtime& rt);

  // Collective. Writes checkpoints/ckpt_<iteration>.h5 (every rank its slices
  // and RNG row), renames it into place, moves `latest`, prunes to keep_last.
  // Returns the path. Throws Error naming the file on any failure; the
  // previous checkpoints are untouched then.
  std::string save(const std::vector<CheckpointParam>& params, Strategy& strategy, const TrainState& state,
                   const nlohmann::json& config);

  // Collective. Loads the newest loadable checkpoint into `strategy` (and this
  // rank's RNG where the world size matches) and returns what it said; nullopt
  // when the directory holds no checkpoint at all. Throws ConfigError when a
  // tensor's shape or name does not match the model (the file is fine, the
  // config is not), Error when every checkpoint present is unreadable.
  std::optional<LoadedCheckpoint> load_latest(const std::vector<CheckpointParam>& params, Strategy& strategy);

  const std::string& dir() const { return dir_; }
  // Path `latest` points to, or "" (rank-local read; for messages).
  std::string latest_path() const;

 private:
  std::string dir_;
  int64_t keep_last_;
  const Runtime& rt_;
};

// "ckpt_00000120.h5"
std::string checkpoint_file_name(int64_t iteration);

}  // namespace llmtrain
