#include "llmtrain/record/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <queue>
#include <sstream>

#include <fmt/format.h>
#include <torch/torch.h>

#ifdef LLMTRAIN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "llmtrain/core/error.hpp"
#include "llmtrain/core/progress.hpp"
#include "llmtrain/distributed/collectives.hpp"
#include "llmtrain/distributed/watchdog.hpp"  // defines: Watchdog::activity
#include "llmtrain/record/device_memory.hpp"

namespace llmtrain {
namespace {

constexpr double kGB = 1e9;
// Relative tolerance of the self-check: the figures are derived in double from
// the same inputs, so anything beyond rounding means a bug or an edited log.
constexpr double kRelTol = 1e-3;

bool close(double a, double b, double abs_tol = 1e-9) {
  return std::fabs(a - b) <= abs_tol + kRelTol * std::max(std::fabs(a), std::fabs(b));
}

// kB value of a "Name:   1234 kB" line of /proc/self/status, or -1.
double proc_status_kb(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.compare(0, key.size(), key) == 0 && line.size() > key.size() && line[key.size()] == ':') {
      std::istringstream is(line.substr(key.size() + 1));
      double v = -1;
      is >> v;
      return v;
    }
  }
  return -1;
}

double num_or(const nlohmann::json& j, const char* key, double def) {
  auto it = j.find(key);
  return (it != j.end() && it->is_number()) ? it->get<double>() : def;
}

}  // namespace

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::data: return "data_ms";
    case Phase::forward_backward: return "forward_backward_ms";
    case Phase::communication: return "communication_ms";
    case Phase::optimizer: return "optimizer_ms";
  }
  return "?";
}

MemoryStats memory_stats(const torch::Device& device) {
  MemoryStats m;
#ifdef LLMTRAIN_WITH_CUDA
  if (device.is_cuda()) {
    // Index 0 of the stat arrays is StatType::AGGREGATE in every LibTorch version;
    // the enum itself moved namespaces in 2.x, the layout did not.
    const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    m.allocated_gb = static_cast<double>(s.allocated_bytes[0].current) / kGB;
    m.peak_gb = static_cast<double>(s.allocated_bytes[0].peak) / kGB;
    m.reserved_gb = static_cast<double>(s.reserved_bytes[0].current) / kGB;
    m.from_cuda = true;
    return m;
  }
#endif
  (void)device;
  const double rss_kb = proc_status_kb("VmRSS");
  const double hwm_kb = proc_status_kb("VmHWM");
  m.allocated_gb = rss_kb > 0 ? rss_kb * 1024.0 / kGB : 0.0;
  m.reserved_gb = m.allocated_gb;
  m.peak_gb = hwm_kb > 0 ? hwm_kb * 1024.0 / kGB : m.allocated_gb;
  return m;
}

void reset_peak_memory(const torch::Device& device) {
#ifdef LLMTRAIN_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
  (void)device;
}

std::vector<std::pair<std::string, double>> parameter_grad_norms(
    const std::vector<std::pair<std::string, torch::Tensor>>& named_parameters, double loss_scale) {
  std::vector<std::pair<std::string, double>> out;
  out.reserve(named_parameters.size());
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : named_parameters) {
    const auto& g = p.grad();
    if (!g.defined()) continue;
    out.emplace_back(name, g.detach().to(torch::kFloat64).norm().item<double>() / loss_scale);
  }
  return out;
}

GradNormStats summarize_grad_norms(const std::vector<std::pair<std::string, double>>& norms,
                                   double global_norm, double grad_clip) {
  GradNormStats s;
  s.global_norm = global_norm;
  s.clipped = grad_clip > 0.0 && global_norm > grad_clip;
  if (norms.empty()) return s;
  auto [mn, mx] = std::minmax_element(norms.begin(), norms.end(),
                                      [](const auto& a, const auto& b) { return a.second < b.second; });
  s.min_norm = mn->second;
  s.min_name = mn->first;
  s.max_norm = mx->second;
  s.max_name = mx->first;
  return s;
}

nlohmann::json IterationMetrics::to_json() const {
  nlohmann::json j;
  j["iter"] = iter;
  if (std::isfinite(loss)) j["loss"] = loss;  // a bad step's NaN is absent (JSON has no NaN); bad_step says why
  j["lr"] = lr;
  j["dt_ms"] = dt_ms;
  // Unknown figures are left out, never null (docs/run-log.md): a missing peak
  // leaves out mfu (startup_info.absent_keys says why), and a failed self-check
  // withholds it (it is in errors[], not a result).
  if (mfu && errors.empty()) j["mfu"] = *mfu;
  j["tokens_per_sec"] = tokens_per_sec;
  j["achieved_tflops"] = achieved_tflops;
  j["memory_allocated_gb"] = memory.allocated_gb;
  j["memory_peak_gb"] = memory.peak_gb;
  j["memory_reserved_gb"] = memory.reserved_gb;
  if (allocated_peak_bytes) j["allocated_peak_bytes"] = *allocated_peak_bytes;
  if (grad_norm && std::isfinite(*grad_norm)) j["grad_norm"] = *grad_norm;  // absent when unknown or non-finite
  j["tokens"] = tokens;
  j["tokens_per_sec_per_device"] = tokens_per_sec_per_device;
  for (int i = 0; i < kNumPhases; ++i) j[phase_name(static_cast<Phase>(i))] = phase_ms[i];
  j["other_ms"] = other_ms;
  if (grad_stats) {
    j["grad_norm_min"] = grad_stats->min_norm;
    j["grad_norm_min_param"] = grad_stats->min_name;
    j["grad_norm_max"] = grad_stats->max_norm;
    j["grad_norm_max_param"] = grad_stats->max_name;
    j["grad_clipped"] = grad_stats->clipped;
  }
  if (loss_scale) j["loss_scale"] = *loss_scale;
  if (skipped_step) j["skipped_step"] = true;
  if (!bad_step.empty()) j["bad_step"] = bad_step;
  if (!errors.empty()) j["errors"] = errors;
  return j;
}

IterationMetrics compute_iteration_metrics(const MetricsSetup& setup, int64_t iter, double dt_s,
                                           int64_t tokens) {
  IterationMetrics m;
  m.iter = iter;
  m.tokens = tokens;
  m.dt_ms = dt_s * 1e3;
  if (!(dt_s > 0.0)) {
    m.errors.push_back(fmt::format("iteration {}: non-positive iteration time {} s", iter, dt_s));
    return m;
  }
  m.tokens_per_sec = static_cast<double>(tokens) / dt_s;
  m.tokens_per_sec_per_device = m.tokens_per_sec / static_cast<double>(std::max<int64_t>(1, setup.num_devices));
  m.achieved_tflops = m.tokens_per_sec * setup.flops_per_token / 1e12;
  if (setup.peak.tflops_per_device) {
    const double peak_total = *setup.peak.tflops_per_device * static_cast<double>(setup.num_devices);
    m.mfu = 100.0 * m.achieved_tflops / peak_total;
  }
  return m;
}

std::vector<std::string> check_iteration_record(const nlohmann::json& r, double flops_per_token,
                                                double peak_total_tflops) {
  std::vector<std::string> errs;
  const std::string where = fmt::format("iteration {}", r.contains("iter") ? r["iter"].dump() : "?");
  const double dt_ms = num_or(r, "dt_ms", 0.0);
  const double tps = num_or(r, "tokens_per_sec", 0.0);
  const double tflops = num_or(r, "achieved_tflops", 0.0);
  const double tokens = num_or(r, "tokens", -1.0);
  if (!(dt_ms > 0.0)) errs.push_back(fmt::format("{}: dt_ms = {} is not a positive time", where, dt_ms));
  if (r.contains("mfu") && r["mfu"].is_number()) {
    const double mfu = r["mfu"].get<double>();
    if (mfu > 100.0)
      errs.push_back(fmt::format("{}: MFU {:.1f}% exceeds 100% - the peak or the FLOP count is wrong "
                                 "(not a result)", where, mfu));
    if (peak_total_tflops > 0.0 && !close(mfu, 100.0 * tflops / peak_total_tflops, 1e-6))
      errs.push_back(fmt::format("{}: mfu {:.4g}% disagrees with achieved_tflops / peak = {:.4g}%", where, mfu,
                                 100.0 * tflops / peak_total_tflops));
  }
  if (dt_ms > 0.0 && tokens >= 0.0 && !close(tps, tokens / (dt_ms / 1e3), 1e-6))
    errs.push_back(fmt::format("{}: tokens_per_sec {:.6g} disagrees with tokens / time = {:.0f} / {:.6g} s = {:.6g}",
                               where, tps, tokens, dt_ms / 1e3, tokens / (dt_ms / 1e3)));
  if (flops_per_token > 0.0 && !close(tflops, tps * flops_per_token / 1e12, 1e-9))
    errs.push_back(fmt::format("{}: achieved_tflops {:.6g} disagrees with tokens/s x FLOPs/token = {:.6g}", where,
                               tflops, tps * flops_per_token / 1e12));
  if (dt_ms > 0.0 && r.contains("other_ms")) {
    double sum = num_or(r, "other_ms", 0.0);
    for (int i = 0; i < kNumPhases; ++i) sum += num_or(r, phase_name(static_cast<Phase>(i)), 0.0);
    if (!close(sum, dt_ms, 1e-3))
      errs.push_back(fmt::format("{}: phase times sum to {:.4g} ms, iteration took {:.4g} ms", where, sum, dt_ms));
    // "other" is what is left; clearly negative means timers overlapped.
    if (num_or(r, "other_ms", 0.0) < -std::max(1e-3, kRelTol * dt_ms))
      errs.push_back(fmt::format("{}: phase timers overlap (other_ms = {:.4g} ms < 0)", where,
                                 num_or(r, "other_ms", 0.0)));
  }
  return errs;
}

Metrics::Metrics(MetricsSetup setup, Collectives* comm)
    : setup_(std::move(setup)), comm_(comm), timeline_(make_device_timeline(setup_.device)) {}

Metrics::~Metrics() = default;

void Metrics::PhaseScope::close() {
  if (!m_) return;
  m_->charge(p_, open_, m_->mark());
  m_ = nullptr;
}

Metrics::Mark Metrics::mark() const {
  Mark m{Clock::now(), comm_ ? comm_->waited_seconds() : 0.0};
  if (timeline_ && in_iter_) {
    m.event = timeline_->record();
    m.device_waits = comm_ ? comm_->device_waits() : 0;
  }
  return m;
}

void Metrics::charge(Phase p, const Mark& open, const Mark& close) {
  if (open.event >= 0 && close.event >= 0) {  // CUDA: resolved in end_iter
    spans_.push_back({p, open, close});
    return;
  }
  add_phase(p, std::chrono::duration<double>(close.time - open.time).count());
  move_seconds(p, Phase::communication, close.comm_waited_s - open.comm_waited_s);
}

namespace {
// Moves up to `seconds` from phase `from` to `to` of `phase_s` (never more
// than `from` holds, so the phases still sum to the window).
double move_between(std::array<double, kNumPhases>& phase_s, Phase from, Phase to, double seconds) {
  auto& src = phase_s[static_cast<int>(from)];
  const double moved = std::clamp(seconds, 0.0, src);
  src -= moved;
  phase_s[static_cast<int>(to)] += moved;
  return moved;
}
}  // namespace

// After a device synchronization: each span's GPU time to its phase, the
// compute stream's stalls on collectives inside it (and any host waits, during
// which the stream ran dry) to communication.
void Metrics::charge_device_spans(Pending& p) {
  for (const Span& s : p.spans) {
    p.phase_s[static_cast<int>(s.phase)] += timeline_->seconds(s.open.event, s.close.event);
    const double device_wait = comm_ ? comm_->device_wait_seconds(s.open.device_waits, s.close.device_waits) : 0.0;
    move_between(p.phase_s, s.phase, Phase::communication,
                 device_wait + (s.close.comm_waited_s - s.open.comm_waited_s));
  }
  p.spans.clear();
}

Metrics::PhaseScope Metrics::phase(Phase p, const std::string& activity) {
  if (watchdog_) watchdog_->activity(activity);
  return PhaseScope(this, p);
}

void Metrics::start_iter() {
  reset_allocated_peak(setup_.device);  // each record's allocated_peak_bytes is its own iteration's
  phase_s_.fill(0.0);
  spans_.clear();
  if (timeline_) {
    if (pending_.empty()) {  // the events and device waits of finished iterations are spent
      timeline_->reset();
      if (comm_) comm_->reset_device_waits();
      open_event_ = timeline_->record();
    } else {
      open_event_ = pending_.back().close_event;  // no device work between: the windows tile the stream's time
    }
  }
  in_iter_ = true;
  iter_t0_ = Clock::now();
}

double Metrics::move_seconds(Phase from, Phase to, double seconds) {
  return move_between(phase_s_, from, to, seconds);
}

void Metrics::close_iter(int64_t iter, double lr) {
  Pending p;
  p.iter = iter;
  p.lr = lr;
  p.host_s = in_iter_ ? std::chrono::duration<double>(Clock::now() - iter_t0_).count() : 0.0;
  if (timeline_ && in_iter_) {
    p.open_event = open_event_;
    p.close_event = timeline_->record();
  }
  in_iter_ = false;
  p.phase_s = phase_s_;
  p.spans = std::move(spans_);
  spans_.clear();
  // The allocator's counters live on the host: read now, each iteration its own.
  p.memory = memory_stats(setup_.device);
  if (const auto a = allocated_bytes(setup_.device)) p.allocated_peak_bytes = a->peak;
  pending_.push_back(std::move(p));
}

IterationMetrics Metrics::finish_iter(int64_t iter, double loss, std::optional<double> grad_norm,
                                      std::optional<GradNormStats> grad_stats) {
  LLMTRAIN_CHECK(!pending_.empty() && pending_.front().iter == iter,
                 "Metrics::finish_iter({}): the oldest pending iteration is {}", iter,
                 pending_.empty() ? std::string("none") : std::to_string(pending_.front().iter));
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  double dt_s = p.host_s;
  if (timeline_ && p.close_event >= 0) {
    dt_s = timeline_->seconds(p.open_event, p.close_event);
    charge_device_spans(p);
  }
  IterationMetrics m = compute_iteration_metrics(setup_, iter, dt_s, setup_.tokens_per_iter);
  m.loss = loss;
  m.lr = p.lr;
  m.grad_norm = grad_norm;
  m.grad_stats = std::move(grad_stats);
  double sum_ms = 0.0;
  for (int i = 0; i < kNumPhases; ++i) {
    m.phase_ms[i] = p.phase_s[i] * 1e3;
    sum_ms += m.phase_ms[i];
  }
  m.other_ms = m.dt_ms - sum_ms;
  m.memory = p.memory;
  m.allocated_peak_bytes = p.allocated_peak_bytes;
  // A non-finite loss is not a measurement error: the trainer handles it as a
  // bad step (skipped on every rank, an event in the run log).
  const double peak_total =
      setup_.peak.tflops_per_device ? *setup_.peak.tflops_per_device * static_cast<double>(setup_.num_devices) : 0.0;
  nlohmann::json rec = m.to_json();
  if (m.mfu) rec["mfu"] = *m.mfu;  // check the raw figure even if to_json withheld it
  for (auto& e : check_iteration_record(rec, setup_.flops_per_token, peak_total)) m.errors.push_back(std::move(e));
  history_.push_back(m);
  return m;
}

IterationMetrics Metrics::end_iter(int64_t iter, double loss, double lr, std::optional<double> grad_norm,
                                   std::optional<GradNormStats> grad_stats) {
  close_iter(iter, lr);
  return finish_iter(iter, loss, grad_norm, std::move(grad_stats));
}

WarmupSplit find_warmup(const std::vector<double>& dt_ms, int64_t max_skip) {
  WarmupSplit w;
  const int64_t n = static_cast<int64_t>(dt_ms.size());
  // median[k] = median of dt_ms[k..n-1], for k = n-2 down to 1: a running median
  // over two heaps as the tail grows (O(n log n); a run may have a million records).
  std::vector<double> median(static_cast<size_t>(std::max<int64_t>(n, 0)), 0.0);
  std::priority_queue<double> lower;                                       // the smaller half
  std::priority_queue<double, std::vector<double>, std::greater<>> upper;  // the larger half
  for (int64_t k = n - 1; k >= 1; --k) {
    const double x = dt_ms[static_cast<size_t>(k)];
    if (lower.empty() || x <= lower.top()) {
      lower.push(x);
    } else {
      upper.push(x);
    }
    if (lower.size() > upper.size() + 1) {
      upper.push(lower.top());
      lower.pop();
    } else if (upper.size() > lower.size()) {
      lower.push(upper.top());
      upper.pop();
    }
    median[static_cast<size_t>(k)] = lower.size() > upper.size() ? lower.top() : 0.5 * (lower.top() + upper.top());
  }
  // A tail of one iteration is its own median and says nothing: k <= n-2.
  for (int64_t k = 1; k + 2 <= n; ++k) {
    if (dt_ms[static_cast<size_t>(k)] <= (1.0 + kWarmupTolerance) * median[static_cast<size_t>(k)]) {
      w.settled_after = k;
      break;
    }
  }
  if (n > 1) w.skipped = std::min<int64_t>(std::max<int64_t>(max_skip, 0), w.settled_after.value_or(1));
  return w;
}

nlohmann::json summarize_records(const nlohmann::json& records, int64_t max_warmup_iters) {
  nlohmann::json s = nlohmann::json::object();
  const int64_t n = records.is_array() ? static_cast<int64_t>(records.size()) : 0;
  s["iterations"] = n;
  // Leave out the warm-up: the iterations before the step time settles, at most
  // max_warmup_iters, never all of them; say what was done.
  std::vector<double> dt_ms;
  for (int64_t i = 0; i < n; ++i) dt_ms.push_back(num_or(records[static_cast<size_t>(i)], "dt_ms", 0.0));
  const WarmupSplit warmup = find_warmup(dt_ms, max_warmup_iters);
  const int64_t skip = warmup.skipped;
  s["warmup_iters_skipped"] = skip;
  if (warmup.settled_after) s["step_time_settled_after"] = *warmup.settled_after;  // absent: never settled
  s["iterations_averaged"] = n - skip;
  if (n == 0) return s;
  double sum_dt = 0, sum_tokens = 0, sum_flop_ms = 0, sum_mfu_ms = 0, mfu_dt = 0, peak_mem = 0, peak_reserved = 0;
  double allocated_peak = -1;  // -1: no record has it
  bool mfu_known = true;
  std::array<double, kNumPhases + 1> phase_sum{};
  int64_t n_errors = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto& r = records[static_cast<size_t>(i)];
    peak_mem = std::max(peak_mem, num_or(r, "memory_peak_gb", 0.0));
    peak_reserved = std::max(peak_reserved, num_or(r, "memory_reserved_gb", 0.0));
    allocated_peak = std::max(allocated_peak, num_or(r, "allocated_peak_bytes", -1.0));
    if (r.contains("errors") && r["errors"].is_array()) n_errors += static_cast<int64_t>(r["errors"].size());
    if (i < skip) continue;
    const double dt = num_or(r, "dt_ms", 0.0);
    sum_dt += dt;
    // The measured token count when present; tokens/s is derived from it.
    sum_tokens += r.contains("tokens") ? num_or(r, "tokens", 0.0) : num_or(r, "tokens_per_sec", 0.0) * dt / 1e3;
    sum_flop_ms += num_or(r, "achieved_tflops", 0.0) * dt;
    if (r.contains("mfu") && r["mfu"].is_number()) {
      sum_mfu_ms += r["mfu"].get<double>() * dt;
      mfu_dt += dt;
    } else {
      mfu_known = false;
    }
    for (int p = 0; p < kNumPhases; ++p) phase_sum[p] += num_or(r, phase_name(static_cast<Phase>(p)), 0.0);
    phase_sum[kNumPhases] += num_or(r, "other_ms", 0.0);
  }
  const double cnt = static_cast<double>(n - skip);
  s["mean_dt_ms"] = sum_dt / cnt;
  // Time-weighted: total tokens (FLOPs) over total time, not a mean of ratios.
  s["tokens_per_sec"] = sum_dt > 0 ? sum_tokens / (sum_dt / 1e3) : 0.0;
  s["achieved_tflops"] = sum_dt > 0 ? sum_flop_ms / sum_dt : 0.0;
  if (mfu_known && mfu_dt > 0) s["mfu"] = sum_mfu_ms / mfu_dt;  // absent when unknown, never null
  for (int p = 0; p < kNumPhases; ++p) s[std::string("mean_") + phase_name(static_cast<Phase>(p))] = phase_sum[p] / cnt;
  s["mean_other_ms"] = phase_sum[kNumPhases] / cnt;
  s["memory_peak_gb"] = peak_mem;
  s["memory_reserved_gb"] = peak_reserved;
  if (allocated_peak >= 0) s["allocated_peak_bytes"] = static_cast<int64_t>(allocated_peak);  // this log's rank
  s["final_loss"] = num_or(records[static_cast<size_t>(n - 1)], "loss", std::nan(""));
  s["total_time_s"] = 0.0;
  double total = 0;
  for (const auto& r : records) total += num_or(r, "dt_ms", 0.0);
  s["total_time_s"] = total / 1e3;
  s["num_errors"] = n_errors;
  return s;
}

nlohmann::json Metrics::summary(int64_t max_warmup_iters) const {
  nlohmann::json recs = nlohmann::json::array();
  for (const auto& m : history_) recs.push_back(m.to_json());
  auto s = summarize_records(recs, max_warmup_iters);
  s["flops_per_token"] = setup_.flops_per_token;
  s["num_devices"] = setup_.num_devices;
  if (s.contains("tokens_per_sec"))
    s["tokens_per_sec_per_device"] =
        s["tokens_per_sec"].get<double>() / static_cast<double>(std::max<int64_t>(1, setup_.num_devices));
  return s;
}

std::string format_iteration_line(const IterationMetrics& m, int64_t max_iters) {
  std::string mfu;
  if (!m.errors.empty())
    mfu = "MFU n/a (self-check failed)";
  else if (m.mfu)
    mfu = fmt::format("MFU {:.2f}%", *m.mfu);
  else
    mfu = "MFU unknown";
  std::string grad = m.grad_norm ? fmt::format(" | gnorm {:.3f}", *m.grad_norm) : "";
  std::string line = fmt::format(
      "iter {}/{} | loss {:.4f} | {:.1f} ms | lr {:.3e} | {} | {:.2f} TFLOP/s | {:.0f} tok/s ({:.0f}/dev) | "
      "mem {:.2f}/{:.2f}/{:.2f} GB{}{}",
      m.iter, max_iters, m.loss, m.dt_ms, m.lr, mfu, m.achieved_tflops, m.tokens_per_sec,
      m.tokens_per_sec_per_device, m.memory.allocated_gb, m.memory.peak_gb, m.memory.reserved_gb,
      m.memory.from_cuda ? "" : " (rss)", grad);
  if (m.grad_stats)
    line += fmt::format(" | per-param gnorm min {:.3g} ({}) max {:.3g} ({}){}", m.grad_stats->min_norm,
                        m.grad_stats->min_name, m.grad_stats->max_norm, m.grad_stats->max_name,
                        m.grad_stats->clipped ? " clipped" : "");
  return line;
}

}  // namespace llmtrain
