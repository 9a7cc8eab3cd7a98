// The parts of the training state, each saving and loading its own piece of a
// checkpoint through checkpoint/checkpoint.hpp's Stateful (docs/checkpoint-format.md
// has the layout). The trainer adds them to its Checkpointer in this order.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <torch/types.h>

#include "llmtrain/model/params.hpp"
#include "llmtrain/checkpoint/checkpoint.hpp"

namespace llmtrain {

class Strategy;
class TokenLoader;
class LossScaler;
struct LrSchedule;

// Weights and AdamW state, through the strategy's checkpoint slices (any
// strategy and world size loads what any other wrote): /model/<name>,
// /optimizer (steps), /optimizer/exp_avg/<name>, /optimizer/exp_avg_sq/<name>
// and the root's param_names. Names and shapes come from the parameter table,
// in the strategy's parameter order (registration order).
class StrategyCheckpoint : public Stateful {
 public:
  StrategyCheckpoint(std::vector<ParamSpec> params, Strategy& strategy);
  void save(CheckpointWriter& w) override;
  // Every tensor the model has with its shape, float32; no tensor it lacks.
  void check(const CheckpointReader& r) const override;
  void load(CheckpointReader& r) override;
  // The strategy installs what was read (fp32 masters, AdamW state, ZeRO-1's all-gather).
  void finish_load() override;
  // Weights and both moments, float32.
  int64_t size_bytes() const override;

 private:
  std::vector<ParamSpec> params_;
  Strategy& strategy_;
  int64_t loaded_steps_ = 0;
};

// The run's counters (/train_state: iteration, best_val_loss, bad_steps).
class TrainStateCheckpoint : public Stateful {
 public:
  explicit TrainStateCheckpoint(TrainState& state) : state_(state) {}
  void save(CheckpointWriter& w) override;
  void check(const CheckpointReader& r) const override;
  void load(CheckpointReader& r) override;

 private:
  TrainState& state_;
};

// float16's dynamic loss scaler (/train_state: loss_scale,
// loss_scale_growth_tracker, loss_scale_skipped); loaded when it is enabled.
class LossScalerCheckpoint : public Stateful {
 public:
  explicit LossScalerCheckpoint(LossScaler& scaler) : scaler_(scaler) {}
  void save(CheckpointWriter& w) override;
  void load(CheckpointReader& r) override;

 private:
  LossScaler& scaler_;
};

// The data position. The loader is a pure function of (seed, iteration,
// sample), so the iteration and the global batch that produced it suffice
// (/train_state: global_batch_sequences, block_size, seed). Loading seeks the
// loader to iteration x micro-steps and warns where this run's data order
// differs from the writer's.
struct DataPosition {
  int64_t global_batch_sequences = 0;  // sequences per iteration over all ranks
  int64_t block_size = 0;
  int64_t seed = 0;
  int64_t micro_steps = 1;             // loader batches per iteration (gradient accumulation)
};
class DataPositionCheckpoint : public Stateful {
 public:
  DataPositionCheckpoint(TokenLoader& loader, DataPosition here) : loader_(loader), here_(here) {}
  void save(CheckpointWriter& w) override;
  void load(CheckpointReader& r) override;

 private:
  TokenLoader& loader_;
  DataPosition here_;
};

// The LR schedule's settings, for the record (/schedule). The schedule is a
// function of the iteration, so loading restores nothing.
class ScheduleCheckpoint : public Stateful {
 public:
  explicit ScheduleCheckpoint(const LrSchedule& schedule) : schedule_(schedule) {}
  void save(CheckpointWriter& w) override;
  void load(CheckpointReader&) override {}

 private:
  const LrSchedule& schedule_;
};

// The config the checkpoint's run had (the root's config attribute, written by
// the Checkpointer), against this run's, before anything is read: a key that
// shapes the model (the model section: sizes, vocab_size, norm, ...) differs
// -> CheckpointMismatch naming the key; another tokenizer (the root's
// tokenizer attribute) -> the same; data_dir differs -> the same unless
// `resume_allow` names data_dir.
class ResumeConfigCheck : public Stateful {
 public:
  // `allow`: the resume_allow key's text; ConfigError on a word other than data_dir
  // or data_mix (each allows a change of that key).
  // `tokenizer`: this run's data's (CheckpointRun::tokenizer); another one is refused
  // whatever resume_allow says (the token ids would mean other things).
  ResumeConfigCheck(nlohmann::json now, const std::string& allow, std::string tokenizer);
  void save(CheckpointWriter&) override {}
  void check(const CheckpointReader& r) const override;
  void load(CheckpointReader&) override {}

 private:
  nlohmann::json now_;
  std::set<std::string> allowed_;  // keys resume_allow names
  std::string tokenizer_;
};

// One key whose value differs from the checkpoint's run and is applied from
// the resumed iteration on (the optimizer, the schedule, the batch, clipping,
// block_size, dropout, dtype, max_iters): the run log's resume_changes.
struct ResumeChange {
  std::string key;
  nlohmann::json checkpoint, now;
};
std::vector<ResumeChange> resume_changes(const nlohmann::json& checkpoint_config, const nlohmann::json& now);

// Every rank's generator states (/rng/cpu; /rng/cuda on CUDA runs), restored
// when the world size is the same (bit-exact resume); otherwise random
// streams (dropout) start anew, with a message.
class RngCheckpoint : public Stateful {
 public:
  explicit RngCheckpoint(torch::Device device) : device_(device) {}
  void save(CheckpointWriter& w) override;
  void check(const CheckpointReader& r) const override;
  void load(CheckpointReader& r) override;

 private:
  torch::Device device_;
};

}  // namespace llmtrain
