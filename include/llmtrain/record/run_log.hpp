// The run log: out_dir/run_<timestamp>.json, written by rank 0 and replaced
// atomically (temp file + rename) as the run goes, so it can be read mid-run.
// Schema: docs/run-log.md. Also the console start-up block, built from the same facts.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmtrain/distributed/run_observer.hpp"
#include "llmtrain/prediction/device_peaks.hpp"

namespace llmtrain {

struct Config;
struct ModelConfig;
struct MetricsSetup;

// Facts about this run that the Config does not hold.
struct RunEnvironment {
  int world_size = 1;
  int num_nodes = 1;
  std::string hostname;
  std::vector<std::string> hostnames;  // one per rank, in rank order
  std::vector<std::string> device_names;  // one per rank (or one, if all equal)
  std::string device_type = "cpu";        // "cpu" | "cuda"
  int threads_per_rank = 1;
  std::string attention_backend_used;     // after the fallback chain
  std::string attention_kernel;           // e.g. "sdpa (SDPA flash (CPU))", "flash_attn_3 (SDPA cuDNN)"
  std::string precision;                  // dtype, loss scaling, TF32
  std::string parallelism;                // e.g. "DDP (MPI allreduce)", "ZeRO-1 (NCCL)", "FSDP"
};

// Versions of the libraries this binary runs with: libtorch (TORCH_VERSION), the
// CUDA (torch_cuda) and cuDNN (cudnn) of that LibTorch (null in a CPU LibTorch),
// its CPU math (cpu_math: MKL/oneDNN and intra-op threads), mpi
// (MPI_Get_library_version), hdf5 (H5get_libversion), nccl (when built), llmtrain.
nlohmann::json library_versions();
// One line of them, as `llmtrain --version` and the start-up block print it.
std::string format_versions(const nlohmann::json& versions);

// startup_info of the run log: {"config": {every Config key, world_size,
// gradient_accumulation_steps_per_gpu, attention_backend_used, versions, devices ...},
// "model": {...}, "mfu": {...}, "start_time": ...}.
nlohmann::json make_startup_info(const Config& config, const ModelConfig& model,
                                 const RunEnvironment& env, const MetricsSetup& metrics);

// The console start-up block: hardware, devices, precision, parallelism, model,
// peak and FLOP convention, tokens/s expected at 50% MFU. Several lines.
std::string format_startup_block(const Config& config, const ModelConfig& model,
                                 const RunEnvironment& env, const MetricsSetup& metrics);

// Takes the run log's records as they are added, on rank 0, beside the file:
// the TensorBoard writer (record/tensorboard.hpp). Called under the RunLog's lock.
class RunLogFollower {
 public:
  virtual ~RunLogFollower() = default;
  virtual void on_startup(const nlohmann::json& startup_info) = 0;
  virtual void on_iteration(const nlohmann::json& record) = 0;
  virtual void on_eval(const nlohmann::json& result) = 0;
  virtual void on_summary(const nlohmann::json& summary) = 0;
  virtual void flush() = 0;  // with every write of the run log's file
};

// Thread-safe: the training thread adds records while a listener thread may
// record a failure on another rank or flush on a stop signal (the RunObserver
// the trainer gives the Runtime).
class RunLog : public RunObserver {
 public:
  // `enabled` = false (ranks other than 0) makes every call a no-op. Creates
  // out_dir; the file is out_dir/run_<YYYYmmdd_HHMMSS>.json (a suffix _2, _3 ...
  // if that name exists). `min_flush_seconds`: flush() calls closer together than
  // this are skipped unless forced (bounds the cost of rewriting a long log).
  RunLog(const std::string& out_dir, bool enabled, double min_flush_seconds = 10.0);

  // Every record from now on also goes to `follower` (no-op where not enabled).
  void add_follower(std::unique_ptr<RunLogFollower> follower);
  void set_startup_info(nlohmann::json startup_info);
  void add_iteration(const nlohmann::json& record);   // a training_iterations[] entry
  void add_eval(const nlohmann::json& result);        // an eval_results[] entry
  void add_error(const std::string& message);         // errors[]: failed self-checks ...
  void add_checkpoint(const nlohmann::json& record);  // checkpoints[]: {iter, path, reason, seconds}
  void add_event(const nlohmann::json& record);       // events[]: {iter, kind, message}: bad steps, signals
  void set_summary(nlohmann::json summary);
  // The run ended without completing: errors[] gets "[rank r] message" and the
  // summary says {"status": "failed", "error": ..., "error_rank": r}, keeping what
  // it held; then the file is written (forced).
  void record_failure(int rank, const std::string& message);

  // RunObserver: on_failure is record_failure; on_signal adds a "signal" event
  // and writes the file at once (forced).
  void on_failure(int rank, const std::string& message) override { record_failure(rank, message); }
  void on_signal(int signal) override;

  // Rewrites the file atomically; skipped when the last write was less than
  // min_flush_seconds ago unless `force`. Returns whether it wrote.
  bool flush(bool force = false);

  const std::string& path() const { return path_; }
  bool enabled() const { return enabled_; }
  size_t num_iterations() const;

 private:
  bool flush_locked(bool force);
  mutable std::mutex mu_;
  bool enabled_;
  double min_flush_seconds_;
  std::string path_;
  nlohmann::json startup_info_ = nlohmann::json::object();
  // Iteration records are serialized once, when added, and kept as text: a flush
  // costs one write of the file, not a re-serialization of every record.
  std::string iterations_text_;
  size_t num_iterations_ = 0;
  nlohmann::json eval_results_ = nlohmann::json::array();
  nlohmann::json errors_ = nlohmann::json::array();
  nlohmann::json checkpoints_ = nlohmann::json::array();
  nlohmann::json events_ = nlohmann::json::array();
  nlohmann::json summary_ = nlohmann::json::object();
  std::vector<std::unique_ptr<RunLogFollower>> followers_;
  std::chrono::steady_clock::time_point last_flush_{};
  bool flushed_once_ = false;
};

}  // namespace llmtrain
