#include "llmtrain/train/run_log.hpp"

#include <mpi.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
#include "llmtrain/core/error.hpp"
#include "llmtrain/model/transformer.hpp"
#include "llmtrain/train/metrics.hpp"

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
  std::string s = (backend_used.empty() ? c.attention_backend : backend_used) + "+" + c.dtype;
  if (c.compile) s += "+compile";
  if (c.use_dataloader) s += "+dataloader";
  if (c.use_cuda_graphs) s += "+cuda_graphs";
  if (c.use_zero1) s += "+zero1";
  if (c.use_fsdp) s += "+fsdp";
  return s;
}

int64_t tokens_per_iter(const Config& c, int world_size) {
  return c.batch_size * c.gradient_accumulation_steps * static_cast<int64_t>(world_size) * c.block_size;
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
  // without a GPU), and the cuDNN it loads at run time.
  v["torch_cuda"] = nullptr;
  v["cudnn"] = nullptr;
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
  H5get_libversion(&maj, &min, &rel);
  v["hdf5"] = fmt::format("{}.{}.{}", maj, min, rel);
#ifdef LLMTRAIN_WITH_CUDA
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
    v["nccl"] = fmt::format("{}.{}.{}", nccl / 10000, (nccl / 100) % 100, nccl % 100);
  } else {
    v["nccl"] = nullptr;
  }
#else
  v["nccl"] = nullptr;  // not built: CPU builds reduce gradients over MPI
#endif
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
  // Accumulation is per rank (DESIGN); the seeds' name for that figure.
  cfg["gradient_accumulation_steps_per_gpu"] = config.gradient_accumulation_steps;
  cfg["global_batch_size"] = config.batch_size * config.gradient_accumulation_steps * env.world_size;
  cfg["tokens_per_iter"] = tokens_per_iter(config, env.world_size);
  cfg["attention_backend_used"] = env.attention_backend_used;
  cfg["config_label"] = config_label(config, env.attention_backend_used);
  cfg["parallelism"] = env.parallelism;
  cfg["device_type"] = env.device_type;
  cfg["device_names"] = env.device_names;
  cfg["device_name"] = env.device_names.empty() ? std::string() : env.device_names.front();
  cfg["threads_per_rank"] = env.threads_per_rank;
  cfg["torch_version"] = versions["libtorch"];
  cfg["torch_cuda_version"] = versions["torch_cuda"];
  cfg["cudnn_version"] = versions["cudnn"];
  cfg["cpu_math"] = versions["cpu_math"];
  cfg["attention_kernel"] = env.attention_kernel;
  cfg["precision"] = env.precision;
  cfg["mpi_version"] = versions["mpi"];
  cfg["nccl_version"] = versions["nccl"];
  cfg["hdf5_version"] = versions["hdf5"];
  cfg["llmtrain_version"] = versions["llmtrain"];
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
  if (metrics.peak.tflops_per_device) {
    const double total = *metrics.peak.tflops_per_device * static_cast<double>(metrics.num_devices);
    mfu["peak_tflops_per_device"] = *metrics.peak.tflops_per_device;
    mfu["peak_tflops_total"] = total;
    mfu["tokens_per_sec_at_50pct_mfu"] =
        metrics.flops_per_token > 0 ? 0.5 * total * 1e12 / metrics.flops_per_token : 0.0;
  } else {
    mfu["peak_tflops_per_device"] = nullptr;
    mfu["peak_tflops_total"] = nullptr;
    mfu["tokens_per_sec_at_50pct_mfu"] = nullptr;
  }
  info["mfu"] = std::move(mfu);
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
  const int64_t tpi = tokens_per_iter(config, env.world_size);
  std::string s;
  s += "==================== llmtrain run ====================\n";
  s += fmt::format("hardware     : {} node(s), {} rank(s), host {}, {} thread(s)/rank\n", env.num_nodes,
                   env.world_size, env.hostname, env.threads_per_rank);
  s += fmt::format("devices      : {}\n", devices);
  s += fmt::format("versions     : {}\n", format_versions(v));
  s += fmt::format("precision    : {}{}\n", env.precision.empty() ? config.dtype : env.precision,
                   config.dtype == "float32" ? "" : " (autocast, fp32 master weights)");
  s += fmt::format("parallelism  : {}; batch {} x accum {} (per rank) x {} ranks x {} tokens = {} tokens/iter\n",
                   env.parallelism.empty() ? "data parallel" : env.parallelism, config.batch_size,
                   config.gradient_accumulation_steps, env.world_size, config.block_size, tpi);
  s += fmt::format("model        : {} | {} params ({} in matmuls) | vocab {} (padded {}) | attention {}\n",
                   model.arch_string(), human_count(static_cast<double>(model.num_params())),
                   human_count(static_cast<double>(model.num_matmul_params())), model.vocab_size, model.padded_vocab,
                   !env.attention_kernel.empty() ? env.attention_kernel
                   : env.attention_backend_used.empty() ? config.attention_backend
                                                        : env.attention_backend_used);
  s += fmt::format("FLOPs/token  : {:.4g} = 6N + 12LHQT (PaLM App. B, N = matmul params; 6 x all params = {:.4g})\n",
                   metrics.flops_per_token, metrics.flops_per_token_6n);
  if (metrics.peak.tflops_per_device) {
    const double total = *metrics.peak.tflops_per_device * static_cast<double>(metrics.num_devices);
    s += fmt::format("peak         : {:g} TFLOP/s per device x {} = {:g} TFLOP/s [{}]\n",
                     *metrics.peak.tflops_per_device, metrics.num_devices, total, metrics.peak.source);
    s += fmt::format("MFU          : tokens/s x FLOPs/token / peak, wall time between synchronized points; "
                     "50% MFU = {:.0f} tokens/s ({:.0f}/device)\n",
                     0.5 * total * 1e12 / metrics.flops_per_token,
                     0.5 * total * 1e12 / metrics.flops_per_token / static_cast<double>(metrics.num_devices));
  } else {
    s += fmt::format("peak         : {}\n", metrics.peak.source);
    s += "MFU          : unknown (no dense peak for this device); tokens/s and TFLOP/s are still measured\n";
  }
  s += "=======================================================";
  return s;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, static_cast<long>(::getpid()));
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error(fmt::format("cannot write '{}': {}", tmp, std::strerror(errno)));
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    f.flush();
    if (!f) throw Error(fmt::format("writing '{}' failed (disk full?)", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error(fmt::format("cannot rename '{}' to '{}': {}", tmp, path, why));
  }
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

void RunLog::set_startup_info(nlohmann::json startup_info) {
  if (enabled_) startup_info_ = std::move(startup_info);
}

void RunLog::add_iteration(const nlohmann::json& record) {
  if (!enabled_) return;
  iterations_text_ += num_iterations_ == 0 ? "\n    " : ",\n    ";
  iterations_text_ += record.dump();
  ++num_iterations_;
}

void RunLog::add_eval(const nlohmann::json& result) {
  if (enabled_) eval_results_.push_back(result);
}

void RunLog::add_error(const std::string& message) {
  if (enabled_) errors_.push_back(message);
}

void RunLog::set_summary(nlohmann::json summary) {
  if (enabled_) summary_ = std::move(summary);
}

bool RunLog::flush(bool force) {
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
  text += "  \"summary\": " + summary_.dump(2) + "\n}\n";
  write_file_atomic(path_, text);
  last_flush_ = now;
  flushed_once_ = true;
  return true;
}

}  // namespace llmtrain

// ---- reading run logs back ------------------------------------------------------
namespace llmtrain {
namespace {

const nlohmann::json& section(const nlohmann::json& j, const char* key, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end()) throw Error(fmt::format("run log '{}' has no '{}' section (not an llmtrain run log?)", path, key));
  return *it;
}
template <typename T>
T value_or(const nlohmann::json& j, const char* key, T def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return def;
  }
}
double sum_num(const nlohmann::json& s, const char* key) { return value_or<double>(s, key, 0.0); }
std::string fmt_opt(const nlohmann::json& s, const char* key, const char* spec_fmt) {
  auto it = s.find(key);
  if (it == s.end() || !it->is_number()) return "unknown";
  return fmt::format(fmt::runtime(spec_fmt), it->get<double>());
}

}  // namespace

RunSummary summarize_run_log(const nlohmann::json& log, const std::string& path, int64_t warmup_iters) {
  RunSummary r;
  r.path = path;
  const auto& startup = section(log, "startup_info", path);
  const auto& cfg = section(startup, "config", path);
  const auto& iters = section(log, "training_iterations", path);
  if (!iters.is_array()) throw Error(fmt::format("run log '{}': training_iterations is not an array", path));
  r.world_size = value_or<int>(cfg, "world_size", 1);
  r.batch_size = value_or<int64_t>(cfg, "batch_size", 0);
  r.grad_accum = value_or<int64_t>(cfg, "gradient_accumulation_steps_per_gpu",
                                   value_or<int64_t>(cfg, "gradient_accumulation_steps", 0));
  r.block_size = value_or<int64_t>(cfg, "block_size", 0);
  r.tokens_per_iter =
      value_or<int64_t>(cfg, "tokens_per_iter", r.batch_size * r.grad_accum * r.world_size * r.block_size);
  r.device = value_or<std::string>(cfg, "device_name", "");
  r.label = value_or<std::string>(cfg, "config_label", "");
  if (r.label.empty()) {
    r.label = value_or<std::string>(cfg, "attention_backend_used", value_or<std::string>(cfg, "attention_backend", "?")) +
              "+" + value_or<std::string>(cfg, "dtype", "?");
    if (value_or<bool>(cfg, "compile", false)) r.label += "+compile";
    if (value_or<bool>(cfg, "use_dataloader", false)) r.label += "+dataloader";
  }
  if (warmup_iters < 0) warmup_iters = value_or<int64_t>(cfg, "warmup_report_iters", 50);

  if (auto it = log.find("errors"); it != log.end() && it->is_array())
    for (const auto& e : *it) r.errors.push_back(e.is_string() ? e.get<std::string>() : e.dump());
  // Re-run the self-check: a log edited or produced by a buggy build is caught here.
  double fpt = 0.0, peak_total = 0.0;
  if (auto m = startup.find("mfu"); m != startup.end()) {
    fpt = value_or<double>(*m, "flops_per_token", 0.0);
    peak_total = value_or<double>(*m, "peak_tflops_total", 0.0);
  }
  for (const auto& rec : iters) {
    for (auto& e : check_iteration_record(rec, fpt, peak_total)) {
      if (std::find(r.errors.begin(), r.errors.end(), e) == r.errors.end()) r.errors.push_back(std::move(e));
    }
  }
  r.summary = summarize_records(iters, warmup_iters);
  r.summary["tokens_per_sec_per_device"] =
      sum_num(r.summary, "tokens_per_sec") / static_cast<double>(std::max(1, r.world_size));
  return r;
}

RunSummary read_run_log(const std::string& path, int64_t warmup_iters) {
  std::ifstream f(path);
  if (!f) throw Error(fmt::format("cannot open run log '{}': {}", path, std::strerror(errno)));
  nlohmann::json j;
  try {
    f >> j;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("run log '{}' is not valid JSON: {}", path, e.what()));
  }
  return summarize_run_log(j, path, warmup_iters);
}

std::string format_comparison_table(const std::vector<RunSummary>& runs) {
  std::string s = fmt::format("{:<44} {:>5} {:>6} {:>6} {:>10} {:>10} {:>12} {:>11} {:>9} {:>8} {:>9} {:>6}\n",
                              "config", "GPUs", "batch", "accum", "tok/iter", "ms/iter", "tokens/s", "tok/s/GPU",
                              "TFLOP/s", "MFU %", "mem GB", "iters");
  for (const auto& r : runs) {
    const auto& m = r.summary;
    // A run whose figures failed the self-check shows no MFU: it is not a result.
    const std::string mfu = r.errors.empty() ? fmt_opt(m, "mfu", "{:.2f}") : "ERROR";
    s += fmt::format("{:<44} {:>5} {:>6} {:>6} {:>10} {:>10.1f} {:>12.0f} {:>11.0f} {:>9.2f} {:>8} {:>9.2f} {:>6}\n",
                     r.label, r.world_size, r.batch_size, r.grad_accum, r.tokens_per_iter, sum_num(m, "mean_dt_ms"),
                     sum_num(m, "tokens_per_sec"), sum_num(m, "tokens_per_sec_per_device"),
                     sum_num(m, "achieved_tflops"), mfu, sum_num(m, "memory_peak_gb"),
                     fmt::format("{}/{}", value_or<int64_t>(m, "iterations_averaged", 0),
                                 value_or<int64_t>(m, "iterations", 0)));
  }
  return s;
}

std::string format_budget_table(const std::vector<RunSummary>& runs, double token_budget) {
  std::string s = fmt::format("time to train {:.4g}B tokens:\n{:<44} {:>5} {:>12} {:>10} {:>8}\n", token_budget / 1e9,
                              "config", "GPUs", "tokens/s", "hours", "days");
  for (const auto& r : runs) {
    const double tps = sum_num(r.summary, "tokens_per_sec");
    if (tps <= 0) {
      s += fmt::format("{:<44} {:>5} {:>12} {:>10} {:>8}\n", r.label, r.world_size, "-", "-", "-");
      continue;
    }
    const double hours = token_budget / tps / 3600.0;
    s += fmt::format("{:<44} {:>5} {:>12.0f} {:>10.1f} {:>8.2f}{}\n", r.label, r.world_size, tps, hours, hours / 24.0,
                     r.errors.empty() ? "" : "  (log failed the self-check)");
  }
  return s;
}

nlohmann::json scaling_efficiency(const std::vector<RunSummary>& runs) {
  nlohmann::json out = nlohmann::json::array();
  if (runs.empty()) return out;
  size_t b = 0;
  for (size_t i = 1; i < runs.size(); ++i)
    if (runs[i].world_size < runs[b].world_size) b = i;
  const auto& base = runs[b];
  const double base_dt = sum_num(base.summary, "mean_dt_ms");
  const double base_tpd = sum_num(base.summary, "tokens_per_sec_per_device");
  const double base_tpi_dev = static_cast<double>(base.tokens_per_iter) / base.world_size;
  for (const auto& r : runs) {
    nlohmann::json e;
    e["path"] = r.path;
    e["label"] = r.label;
    e["world_size"] = r.world_size;
    e["tokens_per_sec"] = sum_num(r.summary, "tokens_per_sec");
    e["speedup"] = base_dt > 0 && sum_num(base.summary, "tokens_per_sec") > 0
                       ? sum_num(r.summary, "tokens_per_sec") / sum_num(base.summary, "tokens_per_sec")
                       : 0.0;
    const double dt = sum_num(r.summary, "mean_dt_ms");
    // Strong scaling: the same global batch split over more devices.
    if (r.tokens_per_iter == base.tokens_per_iter && dt > 0)
      e["strong_efficiency"] = (base_dt * base.world_size) / (dt * r.world_size);
    else
      e["strong_efficiency"] = nullptr;
    // Weak scaling: the same work per device.
    if (static_cast<double>(r.tokens_per_iter) / r.world_size == base_tpi_dev && base_tpd > 0)
      e["weak_efficiency"] = sum_num(r.summary, "tokens_per_sec_per_device") / base_tpd;
    else
      e["weak_efficiency"] = nullptr;
    out.push_back(std::move(e));
  }
  return out;
}

std::string format_scaling_table(const std::vector<RunSummary>& runs) {
  const auto eff = scaling_efficiency(runs);
  std::vector<size_t> order(runs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return runs[a].world_size < runs[b].world_size; });
  std::string s = fmt::format(
      "scaling relative to the smallest run (strong: same global tokens/iter; weak: same tokens/iter per GPU)\n"
      "{:<44} {:>5} {:>10} {:>12} {:>8} {:>10} {:>8}\n",
      "config", "GPUs", "tok/iter", "tokens/s", "speedup", "strong %", "weak %");
  for (size_t i : order) {
    const auto& e = eff[i];
    auto pct = [](const nlohmann::json& v) {
      return v.is_number() ? fmt::format("{:.1f}", 100.0 * v.get<double>()) : std::string("n/a");
    };
    s += fmt::format("{:<44} {:>5} {:>10} {:>12.0f} {:>8.2f} {:>10} {:>8}\n", runs[i].label, runs[i].world_size,
                     runs[i].tokens_per_iter, e["tokens_per_sec"].get<double>(), e["speedup"].get<double>(),
                     pct(e["strong_efficiency"]), pct(e["weak_efficiency"]));
  }
  return s;
}

}  // namespace llmtrain
