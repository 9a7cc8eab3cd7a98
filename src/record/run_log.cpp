#include "llmtrain/record/run_log.hpp"

#include <mpi.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/version.h>

#ifdef LLMTRAIN_WITH_CUDA
#include <nccl.h>
#endif

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/atomic_file.hpp"
#include "core/hdf5_util.hpp"           // defines: H5_LOCKED
#include "llmtrain/core/error.hpp"
#include "llmtrain/model/transformer.hpp"
#include "llmtrain/record/metrics.hpp"

namespace llmtrain {
namespace fs = std::filesystem;

namespace {

std::string local_time(const char* fmt_str) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, fmt_str, &tm);
  return buf;
}

std::string mpi_library_version() {
  char v[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(v, &len);
  std::string s(v, static_cast<size_t>(len));
  const auto cut = s.find_first_of("\n,");
  return cut == std::string::npos ? s : s.substr(0, cut);
}

// "flash_attn_2+bfloat16+compile+dataloader": the label users' tables use.
std::string config_label(const Config& c, const std::string& backend_used) {
  std::string s = (backend_used.empty() ? std::string(to_string(c.attention_backend)) : backend_used) + "+" +
                  to_string(c.dtype);
  if (c.compile) s += "+compile";
  if (c.use_dataloader) s += "+dataloader";
  if (c.use_cuda_graphs) s += "+cuda_graphs";
  if (c.activation_checkpointing == ActivationCheckpointing::full) s += "+ac_full";
  if (c.activation_checkpointing == ActivationCheckpointing::selective)
    s += fmt::format("+ac_every{}", c.activation_checkpointing_every);
  if (c.strategy() != StrategyKind::ddp) s += std::string("+") + to_string(c.strategy());
  return s;
}

// JSON has no NaN or infinity (nlohmann writes them as null): a non-finite
// number (NaN weights give a NaN loss) is left out of its object, whose
// "non_finite" lists the keys left out, as docs/run-log.md says.
void drop_non_finite(nlohmann::json& j) {
  if (j.is_array()) {
    for (auto& e : j) drop_non_finite(e);
    return;
  }
  if (!j.is_object()) return;
  std::vector<std::string> dropped;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it->is_number_float() && !std::isfinite(it->get<double>()))
      dropped.push_back(it.key());
    else
      drop_non_finite(*it);
  }
  if (dropped.empty()) return;
  for (const auto& k : dropped) j.erase(k);
  auto& list = j["non_finite"];
  for (auto& k : dropped) list.push_back(std::move(k));
}

bool has_non_finite(const nlohmann::json& j) {
  if (j.is_number_float()) return !std::isfinite(j.get<double>());
  if (!j.is_structured()) return false;
  for (const auto& e : j)
    if (has_non_finite(e)) return true;
  return false;
}

nlohmann::json finite_only(nlohmann::json j) {
  drop_non_finite(j);
  return j;
}

std::string human_count(double n) {
  if (n >= 1e9) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f}M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.1f}K", n / 1e3);
  return fmt::format("{:.0f}", n);
}

}  // namespace

nlohmann::json library_versions() {
  nlohmann::json v;
  v["llmtrain"] = LLMTRAIN_VERSION;
  v["libtorch"] = TORCH_VERSION;
  // The CUDA and cuDNN this LibTorch was built with (its CUDA hooks answer
  // without a GPU), and the cuDNN it loads at run time. Unknown -> absent.
  const auto& hooks = at::detail::getCUDAHooks();
  if (hooks.isBuilt()) {
    try {
      const long cudart = hooks.versionCUDART();  // e.g. 13000
      v["torch_cuda"] = fmt::format("{}.{}", cudart / 1000, (cudart % 1000) / 10);
    } catch (const c10::Error&) {
    }
    try {
      const long cudnn = hooks.versionRuntimeCuDNN();  // e.g. 91900
      v["cudnn"] = fmt::format("{}.{}.{}", cudnn / 10000, (cudnn % 10000) / 100, cudnn % 100);
    } catch (const c10::Error&) {
    }
  }
  v["cpu_math"] = fmt::format("{}{}, {} intra-op thread(s)", at::hasMKL() ? "MKL" : "BLAS",
                              at::hasMKLDNN() ? " + oneDNN" : "", at::get_num_threads());
  v["mpi"] = mpi_library_version();
  unsigned maj = 0, min = 0, rel = 0;
  H5_LOCKED(H5get_libversion(&maj, &min, &rel));
  v["hdf5"] = fmt::format("{}.{}.{}", maj, min, rel);
#ifdef LLMTRAIN_WITH_CUDA
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
    v["nccl"] = fmt::format("{}.{}.{}", nccl / 10000, (nccl / 100) % 100, nccl % 100);
  }
#endif
  // Not built (CPU builds reduce gradients over MPI) or unreadable: absent.
  return v;
}

std::string format_versions(const nlohmann::json& v) {
  auto str = [&](const char* k, const char* none) {
    return v.contains(k) && v[k].is_string() ? v[k].get<std::string>() : std::string(none);
  };
  return fmt::format("llmtrain {}, LibTorch {} (CUDA {}, cuDNN {}; CPU: {}), {}, HDF5 {}, NCCL {}",
                     str("llmtrain", "?"), str("libtorch", "?"), str("torch_cuda", "none"), str("cudnn", "none"),
                     str("cpu_math", "?"), str("mpi", "?"), str("hdf5", "?"), str("nccl", "not built"));
}

nlohmann::json make_startup_info(const Config& config, const ModelConfig& model, const RunEnvironment& env,
                                 const MetricsSetup& metrics) {
  nlohmann::json info;
  nlohmann::json cfg = config.to_json();
  const auto versions = library_versions();
  cfg["world_size"] = env.world_size;
  cfg["num_nodes"] = env.num_nodes;
  cfg["hostname"] = env.hostname;
  cfg["hostnames"] = env.hostnames;
  // Accumulation is per rank (docs/architecture.md); the name the Python system's run logs give that figure.
  cfg["gradient_accumulation_steps_per_gpu"] = config.gradient_accumulation_steps;
  cfg["global_batch_size"] = config.global_batch_sequences(env.world_size);
  cfg["tokens_per_iter"] = config.tokens_per_iter(env.world_size);
  cfg["attention_backend_used"] = env.attention_backend_used;
  cfg["config_label"] = config_label(config, env.attention_backend_used);
  cfg["parallelism"] = env.parallelism;
  cfg["device_type"] = env.device_type;
  cfg["device_names"] = env.device_names;
  cfg["device_name"] = env.device_names.empty() ? std::string() : env.device_names.front();
  cfg["threads_per_rank"] = env.threads_per_rank;
  // Unknown values are left out, never null (scripts read .get(key, default) and
  // format numbers); absent_keys says once why each one is missing.
  nlohmann::json absent = nlohmann::json::object();
  auto version = [&](const char* run_log_key, const char* versions_key, const char* why) {
    if (versions.contains(versions_key))
      cfg[run_log_key] = versions[versions_key];
    else
      absent[fmt::format("startup_info.config.{}", run_log_key)] = why;
  };
  version("torch_version", "libtorch", "unknown");
  version("torch_cuda_version", "torch_cuda", "this LibTorch was built without CUDA");
  version("cudnn_version", "cudnn", "this LibTorch has no cuDNN");
  cfg["cpu_math"] = versions["cpu_math"];
  cfg["attention_kernel"] = env.attention_kernel;
  cfg["precision"] = env.precision;
  version("mpi_version", "mpi", "unknown");
  version("nccl_version", "nccl", "this llmtrain was built without NCCL (gradients are reduced over MPI)");
  version("hdf5_version", "hdf5", "unknown");
  version("llmtrain_version", "llmtrain", "unknown");
  info["config"] = std::move(cfg);

  nlohmann::json m;
  m["arch"] = model.arch_string();
  m["num_params"] = model.num_params();
  m["num_matmul_params"] = model.num_matmul_params();
  m["vocab_size"] = model.vocab_size;
  m["padded_vocab"] = model.padded_vocab;
  m["flops_per_token"] = model.flops_per_token();
  m["flops_per_token_6n"] = model.flops_per_token_6n();
  info["model"] = std::move(m);

  nlohmann::json mfu;
  mfu["convention"] = "FLOPs/token = 6*N + 12*L*H*Q*T (PaLM App. B; N = matmul parameters); "
                      "MFU = tokens/s * FLOPs/token / (dense peak per device * devices); "
                      "time = wall clock between device-synchronized points";
  mfu["flops_per_token"] = metrics.flops_per_token;
  mfu["num_devices"] = metrics.num_devices;
  mfu["peak_source"] = metrics.peak.source;
  if (!metrics.peak.basis.empty()) mfu["peak_basis"] = metrics.peak.basis;
  if (metrics.peak.tflops_per_device) {
    const double total = *metrics.peak.tflops_per_device * static_cast<double>(metrics.num_devices);
    mfu["peak_tflops_per_device"] = *metrics.peak.tflops_per_device;
    mfu["peak_tflops_total"] = total;
    mfu["tokens_per_sec_at_50pct_mfu"] =
        metrics.flops_per_token > 0 ? 0.5 * total * 1e12 / metrics.flops_per_token : 0.0;
  } else {
    const std::string why = fmt::format("MFU needs the device's dense peak, which is {}", metrics.peak.source);
    for (const char* k : {"startup_info.mfu.peak_tflops_per_device", "startup_info.mfu.peak_tflops_total",
                          "startup_info.mfu.tokens_per_sec_at_50pct_mfu", "training_iterations[].mfu",
                          "summary.mfu"})
      absent[k] = why;
  }
  info["mfu"] = std::move(mfu);
  info["absent_keys"] = std::move(absent);
  info["start_time"] = local_time("%Y-%m-%dT%H:%M:%S%z");
  return info;
}

std::string format_startup_block(const Config& config, const ModelConfig& model, const RunEnvironment& env,
                                 const MetricsSetup& metrics) {
  const auto v = library_versions();
  std::string devices;
  if (env.device_names.empty()) {
    devices = "?";
  } else {
    // Collapse identical names: "8 x NVIDIA B200".
    bool same = std::all_of(env.device_names.begin(), env.device_names.end(),
                            [&](const std::string& n) { return n == env.device_names.front(); });
    devices = same ? fmt::format("{} x {}", env.world_size, env.device_names.front())
                   : fmt::format("{}", fmt::join(env.device_names, ", "));
  }
  const int64_t tpi = config.tokens_per_iter(env.world_size);
  std::string s;
  s += "==================== llmtrain run ====================\n";
  s += fmt::format("hardware     : {} node(s), {} rank(s), host {}, {} thread(s)/rank\n", env.num_nodes,
                   env.world_size, env.hostname, env.threads_per_rank);
  s += fmt::format("devices      : {}\n", devices);
  s += fmt::format("versions     : {}\n", format_versions(v));
  s += fmt::format("precision    : {}{}\n", env.precision.empty() ? to_string(config.dtype) : env.precision,
                   config.dtype == ComputeDtype::float32 ? "" : " (autocast, fp32 master weights)");
  s += fmt::format("parallelism  : {}; batch {} x accum {} (per rank) x {} ranks x {} tokens = {} tokens/iter\n",
                   env.parallelism.empty() ? "data parallel" : env.parallelism, config.batch_size,
                   config.gradient_accumulation_steps, env.world_size, config.block_size, tpi);
  s += fmt::format("model        : {} | {} params ({} in matmuls) | vocab {} (padded {}) | attention {}\n",
                   model.arch_string(), human_count(static_cast<double>(model.num_params())),
                   human_count(static_cast<double>(model.num_matmul_params())), model.vocab_size, model.padded_vocab,
                   !env.attention_kernel.empty() ? env.attention_kernel
                   : env.attention_backend_used.empty() ? to_string(config.attention_backend)
                                                        : env.attention_backend_used);
  s += fmt::format("FLOPs/token  : {:.4g} = 6N + 12LHQT (PaLM App. B, N = matmul params; 6 x all params = {:.4g})\n",
                   metrics.flops_per_token, metrics.flops_per_token_6n);
  // Which peak applies and why: the table's source names its basis; an override
  // or an unknown peak says it after.
  const std::string peak_source =
      metrics.peak.basis.empty() || metrics.peak.source.find(metrics.peak.basis) != std::string::npos
          ? metrics.peak.source
          : fmt::format("{}; matmuls: {}", metrics.peak.source, metrics.peak.basis);
  if (metrics.peak.tflops_per_device) {
    const double total = *metrics.peak.tflops_per_device * static_cast<double>(metrics.num_devices);
    s += fmt::format("peak         : {:g} TFLOP/s per device x {} = {:g} TFLOP/s [{}]\n",
                     *metrics.peak.tflops_per_device, metrics.num_devices, total, peak_source);
    s += fmt::format("MFU          : tokens/s x FLOPs/token / peak, wall time between synchronized points; "
                     "50% MFU = {:.0f} tokens/s ({:.0f}/device)\n",
                     0.5 * total * 1e12 / metrics.flops_per_token,
                     0.5 * total * 1e12 / metrics.flops_per_token / static_cast<double>(metrics.num_devices));
  } else {
    s += fmt::format("peak         : {}\n", peak_source);
    s += "MFU          : unknown (no dense peak for this device); tokens/s and TFLOP/s are still measured\n";
  }
  s += "=======================================================";
  return s;
}

RunLog::RunLog(const std::string& out_dir, bool enabled, double min_flush_seconds)
    : enabled_(enabled), min_flush_seconds_(min_flush_seconds) {
  if (!enabled_) return;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw Error(fmt::format("cannot create out_dir '{}': {}", out_dir, ec.message()));
  const std::string stem = (fs::path(out_dir) / ("run_" + local_time("%Y%m%d_%H%M%S"))).string();
  path_ = stem + ".json";
  for (int k = 2; fs::exists(path_); ++k) path_ = fmt::format("{}_{}.json", stem, k);
}

size_t RunLog::num_iterations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_iterations_;
}

void RunLog::add_follower(std::unique_ptr<RunLogFollower> follower) {
  std::lock_guard<std::mutex> lock(mu_);
  if (enabled_) followers_.push_back(std::move(follower));
}

void RunLog::set_startup_info(nlohmann::json startup_info) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  startup_info_ = std::move(startup_info);
  for (auto& f : followers_) f->on_startup(startup_info_);
}

void RunLog::add_iteration(const nlohmann::json& record) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  iterations_text_ += num_iterations_ == 0 ? "\n    " : ",\n    ";
  iterations_text_ += has_non_finite(record) ? finite_only(record).dump() : record.dump();
  ++num_iterations_;
  for (auto& f : followers_) f->on_iteration(record);
}

void RunLog::add_eval(const nlohmann::json& result) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  eval_results_.push_back(finite_only(result));
  for (auto& f : followers_) f->on_eval(eval_results_.back());
}

void RunLog::add_error(const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (enabled_) errors_.push_back(message);
}

void RunLog::add_checkpoint(const nlohmann::json& record) {
  std::lock_guard<std::mutex> lock(mu_);
  if (enabled_) checkpoints_.push_back(finite_only(record));
}

void RunLog::add_event(const nlohmann::json& record) {
  std::lock_guard<std::mutex> lock(mu_);
  if (enabled_) events_.push_back(finite_only(record));
}

void RunLog::set_summary(nlohmann::json summary) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  summary_ = finite_only(std::move(summary));
  for (auto& f : followers_) f->on_summary(summary_);
}

void RunLog::record_failure(int rank, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  errors_.push_back(fmt::format("[rank {}] {}", rank, message));
  if (!summary_.is_object()) summary_ = nlohmann::json::object();
  summary_["status"] = "failed";
  summary_["error"] = message;
  summary_["error_rank"] = rank;
  summary_["iterations_logged"] = num_iterations_;
  flush_locked(/*force=*/true);
}

void RunLog::on_signal(int signal) {
  add_event({{"kind", "signal"},
             {"signal", signal},
             {"message", fmt::format("signal {} received; stopping after the current iteration with a checkpoint",
                                     signal)}});
  // A summary now, before the launcher may kill the ranks (mpirun: about a
  // second after SIGTERM): the run's end replaces it when it gets there.
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  if (!summary_.is_object() || summary_.empty())
    summary_ = {{"status", "stopped"}, {"stop_signal", signal}, {"iterations_logged", num_iterations_}};
  flush_locked(/*force=*/true);
}

bool RunLog::flush(bool force) {
  std::lock_guard<std::mutex> lock(mu_);
  return flush_locked(force);
}

bool RunLog::flush_locked(bool force) {
  if (!enabled_) return false;
  const auto now = std::chrono::steady_clock::now();
  if (!force && flushed_once_ &&
      std::chrono::duration<double>(now - last_flush_).count() < min_flush_seconds_)
    return false;
  std::string text;
  text.reserve(iterations_text_.size() + 4096);
  text += "{\n  \"startup_info\": ";
  text += startup_info_.dump(2);
  text += ",\n  \"training_iterations\": [";
  text += iterations_text_;
  text += num_iterations_ ? "\n  ],\n" : "],\n";
  text += "  \"eval_results\": " + eval_results_.dump() + ",\n";
  text += "  \"errors\": " + errors_.dump() + ",\n";
  text += "  \"checkpoints\": " + checkpoints_.dump() + ",\n";
  text += "  \"events\": " + events_.dump() + ",\n";
  text += "  \"summary\": " + summary_.dump(2) + "\n}\n";
  write_file_atomic(path_, text);
  for (auto& f : followers_) f->flush();
  last_flush_ = now;
  flushed_once_ = true;
  return true;
}

}  // namespace llmtrain
