// The parts of the training state in checkpoints (checkpoint_parts.hpp).
#include "llmtrain/train/checkpoint_parts.hpp"

#include <algorithm>
#include <set>
#include <sstream>

#include <ATen/core/Generator.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "llmtrain/core/error.hpp"
#include "llmtrain/core/log.hpp"
#include "llmtrain/data/loader.hpp"
#include "llmtrain/distributed/strategy.hpp"
#include "llmtrain/train/precision.hpp"
#include "llmtrain/train/schedule.hpp"

namespace llmtrain {

namespace {

constexpr StateTensor kTensors[] = {StateTensor::weights, StateTensor::exp_avg, StateTensor::exp_avg_sq};

const char* group_of(StateTensor t) {
  switch (t) {
    case StateTensor::weights: return "model";
    case StateTensor::exp_avg: return "optimizer/exp_avg";
    case StateTensor::exp_avg_sq: return "optimizer/exp_avg_sq";
  }
  return "?";
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

// At most one slice per parameter (the strategies guarantee it): by parameter.
std::vector<const StateSlice*> by_param(const std::vector<StateSlice>& slices, size_t num_params,
                                        const char* what) {
  std::vector<const StateSlice*> out(num_params, nullptr);
  for (const auto& s : slices) {
    LLMTRAIN_CHECK(s.param >= 0 && static_cast<size_t>(s.param) < num_params, "checkpoint: {} slice of parameter {} "
                   "outside the {} parameters", what, s.param, num_params);
    LLMTRAIN_CHECK(out[s.param] == nullptr, "checkpoint: two {} slices of parameter {} on one rank", what, s.param);
    out[s.param] = &s;
  }
  return out;
}

// Every key with its section, from the one declaration list.
struct KeySection {
  const char* section;
  const char* name;
};
constexpr KeySection kKeySections[] = {
#define LLMTRAIN_KEY(section, type, name, def, check, help) {#section, #name},
#include "llmtrain/core/config_keys.def"
#undef LLMTRAIN_KEY
};

// Model keys that do not shape a tensor: they may change on resume.
bool shapes_model(const KeySection& k) {
  const std::string n = k.name;
  return std::string(k.section) == "model" && n != "dropout" && n != "attention_backend";
}
// Keys whose change a resume applies and lists.
bool listed_on_resume(const KeySection& k) {
  static const std::set<std::string> also = {"batch_size", "gradient_accumulation_steps", "block_size", "dropout",
                                             "dtype", "max_iters"};
  return std::string(k.section) == "optim" || also.count(k.name) > 0;
}

// The default CPU generator and, on CUDA, the device's, by dataset name.
std::vector<std::pair<const char*, at::Generator>> generators(torch::Device device) {
  std::vector<std::pair<const char*, at::Generator>> gens = {{"cpu", at::detail::getDefaultCPUGenerator()}};
  if (device.is_cuda()) gens.emplace_back("cuda", at::detail::getCUDAHooks().getDefaultGenerator(device.index()));
  return gens;
}

}  // namespace

// ---- weights and AdamW state ----------------------------------------------------------

StrategyCheckpoint::StrategyCheckpoint(std::vector<ParamSpec> params, Strategy& strategy)
    : params_(std::move(params)), strategy_(strategy) {}

void StrategyCheckpoint::save(CheckpointWriter& w) {
  nlohmann::json names = nlohmann::json::array();
  for (const auto& p : params_) names.push_back(p.name);
  w.attr("", "param_names", names.dump());
  // Every rank writes the slices it owns (sharded: its shards; DDP: rank 0 all).
  // (The test fault point kill_during_save strikes in CheckpointWriter::finish, half-way
  // through this rank's writes.)
  const auto write = [&](StateTensor t) {
    const auto slices = strategy_.save_slices(t);
    const auto mine = by_param(slices, params_.size(), to_string(t));
    for (size_t i = 0; i < params_.size(); ++i) {
      const StateSlice* s = mine[i];
      w.tensor(group_of(t), params_[i].name, params_[i].shape, s ? s->offset : 0, s ? s->values : torch::Tensor());
    }
  };
  write(StateTensor::weights);
  w.attr("optimizer", "steps", strategy_.optimizer_steps());
  write(StateTensor::exp_avg);
  write(StateTensor::exp_avg_sq);
}

void StrategyCheckpoint::check(const CheckpointReader& r) const {
  const std::string& path = r.path();
  for (const auto& n : nlohmann::json::parse(r.attr_str("", "param_names"))) {
    const std::string name = n.get<std::string>();
    if (std::none_of(params_.begin(), params_.end(), [&](const ParamSpec& p) { return p.name == name; }))
      throw CheckpointMismatch(fmt::format("checkpoint '{}' holds tensor '{}', which this model does not have (the "
                                           "config describes another model)",
                                           path, name));
  }
  for (const auto t : kTensors) {
    for (const auto& p : params_) {
      const std::string ds = fmt::format("{}/{}", group_of(t), p.name);
      if (!r.exists(ds)) {
        if (t == StateTensor::weights)
          throw CheckpointMismatch(
              fmt::format("checkpoint '{}' has no tensor '{}' (the config describes another model)", path, ds));
        throw CheckpointUnusable(fmt::format("checkpoint '{}' has no dataset '{}'", path, ds));
      }
      const CheckpointReader::Dataset d = r.dataset(ds);
      if (d.shape != p.shape)
        throw CheckpointMismatch(fmt::format("checkpoint '{}': tensor '{}' has shape {}, the model {}", path, ds,
                                             shape_str(d.shape), shape_str(p.shape)));
      if (!d.float32) throw CheckpointUnusable(fmt::format("checkpoint '{}': tensor '{}' is not float32", path, ds));
    }
  }
  r.require_group("optimizer");
}

void StrategyCheckpoint::load(CheckpointReader& r) {
  // Every rank reads its own slices (it may read what other ranks read too).
  for (const auto t : kTensors) {
    const auto slices = strategy_.load_slices(t);
    const auto mine = by_param(slices, params_.size(), to_string(t));
    for (size_t i = 0; i < params_.size(); ++i) {
      const StateSlice* s = mine[i];
      r.read_tensor(fmt::format("{}/{}", group_of(t), params_[i].name), s ? s->offset : 0,
                    s ? s->values : torch::Tensor());
    }
  }
  loaded_steps_ = r.attr_i64("optimizer", "steps");
}

void StrategyCheckpoint::finish_load() { strategy_.finish_load(loaded_steps_); }

int64_t StrategyCheckpoint::size_bytes() const {
  int64_t n = 0;
  for (const auto& p : params_) {
    int64_t e = 1;
    for (int64_t d : p.shape) e *= d;
    n += e;
  }
  return n * static_cast<int64_t>(sizeof(float)) * static_cast<int64_t>(std::size(kTensors));
}

// ---- the run's counters ---------------------------------------------------------------

void TrainStateCheckpoint::save(CheckpointWriter& w) {
  w.attr("train_state", "iteration", state_.iteration);
  w.attr("train_state", "best_val_loss", state_.best_val_loss);
  w.attr("train_state", "bad_steps", state_.bad_steps);
}

void TrainStateCheckpoint::check(const CheckpointReader& r) const { r.require_group("train_state"); }

void TrainStateCheckpoint::load(CheckpointReader& r) {
  state_.iteration = r.attr_i64("train_state", "iteration");
  state_.best_val_loss = r.attr_f64("train_state", "best_val_loss");
  state_.bad_steps = r.attr_i64("train_state", "bad_steps");
}

// ---- the loss scaler ------------------------------------------------------------------

void LossScalerCheckpoint::save(CheckpointWriter& w) {
  const LossScaler::State s = scaler_.state();
  w.attr("train_state", "loss_scale", s.scale);
  w.attr("train_state", "loss_scale_growth_tracker", s.growth_tracker);
  w.attr("train_state", "loss_scale_skipped", s.skipped);
}

void LossScalerCheckpoint::load(CheckpointReader& r) {
  const LossScaler::State s{r.attr_f64("train_state", "loss_scale"),
                            r.attr_i64("train_state", "loss_scale_growth_tracker"),
                            r.attr_i64("train_state", "loss_scale_skipped")};
  if (scaler_.enabled()) scaler_.load_state(s);
}

// ---- the data position ----------------------------------------------------------------

void DataPositionCheckpoint::save(CheckpointWriter& w) {
  w.attr("train_state", "global_batch_sequences", here_.global_batch_sequences);
  w.attr("train_state", "block_size", here_.block_size);
  w.attr("train_state", "seed", here_.seed);
}

void DataPositionCheckpoint::load(CheckpointReader& r) {
  const int64_t iteration = r.iteration();
  const int64_t batch = r.attr_i64("train_state", "global_batch_sequences");
  const int64_t block_size = r.attr_i64("train_state", "block_size"), seed = r.attr_i64("train_state", "seed");
  loader_.seek(iteration * here_.micro_steps);
  if (batch != here_.global_batch_sequences)
    log::warn("resuming at iteration {} with a global batch of {} sequences, the checkpoint's run used {}: the "
              "samples from here on are not the ones that run would have seen",
              iteration, here_.global_batch_sequences, batch);
  if (block_size != here_.block_size || seed != here_.seed)
    log::warn("resuming with block_size {} and seed {}, the checkpoint's run used {} and {}: the data order "
              "differs from that run's",
              here_.block_size, here_.seed, block_size, seed);
}

// ---- the LR schedule (for the record) -------------------------------------------------

void ScheduleCheckpoint::save(CheckpointWriter& w) {
  w.attr("schedule", "learning_rate", schedule_.learning_rate);
  w.attr("schedule", "min_lr", schedule_.min_lr);
  w.attr("schedule", "warmup_iters", schedule_.warmup_iters);
  w.attr("schedule", "lr_decay_iters", schedule_.lr_decay_iters);
  w.attr("schedule", "decay_lr", static_cast<int64_t>(schedule_.decay));
}

// ---- the config, on resume ---------------------------------------------------------

ResumeConfigCheck::ResumeConfigCheck(nlohmann::json now, const std::string& allow, std::string tokenizer)
    : now_(std::move(now)), tokenizer_(std::move(tokenizer)) {
  std::stringstream in(allow);
  for (std::string word; std::getline(in, word, ',');) {
    if (word == "data_dir" || word == "data_mix")
      allowed_.insert(word);
    else if (!word.empty())
      throw ConfigError(
          fmt::format("config key 'resume_allow': '{}' is not allowed (allowed: data_dir, data_mix)", word));
  }
}

void ResumeConfigCheck::check(const CheckpointReader& r) const {
  const auto then = nlohmann::json::parse(r.attr_str("", "config"));
  const auto differs = [&](const char* key) { return then.contains(key) && now_.contains(key) && then[key] != now_[key]; };
  for (const auto& k : kKeySections)
    if (shapes_model(k) && differs(k.name))
      throw CheckpointMismatch(fmt::format("resuming '{}': config key '{}' is {} in the checkpoint's run and {} now; "
                                           "the model's shape cannot change on resume (set it back, or start a new "
                                           "out_dir)",
                                           r.path(), k.name, then[k.name].dump(), now_[k.name].dump()));
  if (r.has_attr("", "tokenizer") && r.attr_str("", "tokenizer") != tokenizer_)
    throw CheckpointMismatch(fmt::format("resuming '{}': the checkpoint's run used tokenizer '{}', this run's data "
                                         "(config key 'data_dir' = {}) uses '{}': the model cannot continue on other "
                                         "token ids",
                                         r.path(), r.attr_str("", "tokenizer"), now_.value("data_dir", ""),
                                         tokenizer_));
  for (const char* key : {"data_dir", "data_mix"})  // the data: refused unless resume_allow names the key
    if (differs(key) && allowed_.count(key) == 0)
      throw CheckpointMismatch(fmt::format("resuming '{}': config key '{}' is {} in the checkpoint's run and {} "
                                           "now; add resume_allow={} to continue the run on other data",
                                           r.path(), key, then[key].dump(), now_[key].dump(), key));
  // The same data_mix file with other contents is another blend.
  if (!differs("data_mix") && allowed_.count("data_mix") == 0 && r.has_attr("", "data_mix_blend")) {
    const std::string was = r.attr_str("", "data_mix_blend");
    const std::string is = data_mix_blend(now_.value("data_mix", std::string()), now_.value("data_dir", std::string()));
    if (was != is)
      throw CheckpointMismatch(fmt::format("resuming '{}': config key 'data_mix' ({}) held the blend '{}' in the "
                                           "checkpoint's run and holds '{}' now; add resume_allow=data_mix to "
                                           "continue the run on another blend",
                                           r.path(), now_["data_mix"].dump(), was, is));
  }
}

std::vector<ResumeChange> resume_changes(const nlohmann::json& checkpoint_config, const nlohmann::json& now) {
  std::vector<ResumeChange> out;
  for (const auto& k : kKeySections)
    if (listed_on_resume(k) && checkpoint_config.contains(k.name) && now.contains(k.name) &&
        checkpoint_config[k.name] != now[k.name])
      out.push_back({k.name, checkpoint_config[k.name], now[k.name]});
  for (const char* key : {"data_dir", "data_mix"})
    if (checkpoint_config.contains(key) && checkpoint_config[key] != now.value(key, nlohmann::json()))
      out.push_back({key, checkpoint_config[key], now[key]});
  // The same data_mix (a file) whose blend changed: listed with the blends
  // (data_mix_blend: the checkpoint's, set by Checkpointer::load_file).
  if (checkpoint_config.contains("data_mix_blend") && checkpoint_config.contains("data_mix") &&
      checkpoint_config["data_mix"] == now.value("data_mix", nlohmann::json())) {
    std::string is;
    try {
      is = data_mix_blend(now.value("data_mix", std::string()), now.value("data_dir", std::string()));
    } catch (const ConfigError&) {
      is = "(unreadable)";
    }
    if (checkpoint_config["data_mix_blend"] != is) out.push_back({"data_mix", checkpoint_config["data_mix_blend"], is});
  }
  return out;
}

// ---- RNG ------------------------------------------------------------------------------

void RngCheckpoint::save(CheckpointWriter& w) {
  for (auto& [name, gen] : generators(device_)) {
    const torch::Tensor state = gen.get_state().to(torch::kCPU).contiguous();
    const auto* p = state.data_ptr<uint8_t>();
    w.rank_row("rng", name, std::vector<uint8_t>(p, p + state.numel()));
  }
}

void RngCheckpoint::check(const CheckpointReader& r) const { r.require_group("rng"); }

void RngCheckpoint::load(CheckpointReader& r) {
  bool restored = r.written_world_size() == r.world_size();
  for (auto& [name, gen] : generators(device_)) {
    auto row = r.rank_row(fmt::format("rng/{}", name));
    if (!row) {
      restored = false;
      continue;
    }
    gen.set_state(torch::from_blob(row->data(), {static_cast<int64_t>(row->size())}, torch::kUInt8).clone());
  }
  if (!restored)
    log::info("the checkpoint was written by {} rank(s), this run has {}: random streams (dropout) start anew",
              r.written_world_size(), r.world_size());
}

}  // namespace llmtrain
