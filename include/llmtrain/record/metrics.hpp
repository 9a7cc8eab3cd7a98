// Per-iteration training metrics: synchronized wall time, tokens/s, achieved
// TFLOP/s, MFU (docs/mfu.md), a phase breakdown that sums to the iteration
// time, memory and gradient-norm statistics, and a self-check that refuses to
// report numbers that contradict each other.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "llmtrain/prediction/device_peaks.hpp"
#include "llmtrain/distributed/device_timeline.hpp"

namespace llmtrain {

class Collectives;
class Watchdog;

// Timed parts of one iteration; "other" is the iteration time minus these.
// `communication` is exposed communication: the time spent waiting on
// collectives that did not overlap compute, in whichever phase it happened.
enum class Phase { data = 0, forward_backward, communication, optimizer };
constexpr int kNumPhases = 4;
// Run-log / console names: "data_ms", "forward_backward_ms", "communication_ms",
// "optimizer_ms" (and "other_ms").
const char* phase_name(Phase p);

struct MemoryStats {
  double allocated_gb = 0.0;  // CUDA: caching allocator allocated; CPU: resident set (VmRSS)
  double peak_gb = 0.0;       // CUDA: peak allocated since the last reset; CPU: VmHWM
  double reserved_gb = 0.0;   // CUDA: reserved by the caching allocator; CPU: VmRSS
  bool from_cuda = false;
};
// GB = 1e9 bytes.
MemoryStats memory_stats(const torch::Device& device);
// Starts a new peak window (CUDA only; a no-op on CPU, where VmHWM is the process peak).
void reset_peak_memory(const torch::Device& device);

// Gradient norms of one iteration (every gradient_log_interval).
struct GradNormStats {
  double global_norm = 0.0;   // over all parameters and ranks, before clipping
  double min_norm = 0.0, max_norm = 0.0;
  std::string min_name, max_name;  // parameter names of the extremes
  bool clipped = false;       // grad_clip > 0 and global_norm > grad_clip
};
// Per-parameter L2 norms of the gradients this rank holds (parameters without a
// gradient are skipped). With sharded gradients these are the local shards.
// Each norm is divided by `loss_scale` (float16's dynamic loss scale; 1 otherwise).
std::vector<std::pair<std::string, double>> parameter_grad_norms(
    const std::vector<std::pair<std::string, torch::Tensor>>& named_parameters, double loss_scale = 1.0);
GradNormStats summarize_grad_norms(const std::vector<std::pair<std::string, double>>& norms,
                                   double global_norm, double grad_clip);

// Everything fixed for a run that the per-iteration numbers are derived from.
struct MetricsSetup {
  double flops_per_token = 0.0;     // ModelConfig::flops_per_token() (6N + 12LHQT)
  double flops_per_token_6n = 0.0;  // ModelConfig::flops_per_token_6n(), for comparison only
  int64_t tokens_per_iter = 0;      // global: batch_size x grad_accum x world_size x block_size
  int64_t num_devices = 1;          // world size (one device per rank)
  PeakInfo peak;                    // per device
  torch::Device device{torch::kCPU};
};

struct IterationMetrics {
  int64_t iter = 0;
  double loss = 0.0, lr = 0.0;
  double dt_ms = 0.0;
  int64_t tokens = 0;                  // global tokens of the iteration
  double tokens_per_sec = 0.0;         // global
  double tokens_per_sec_per_device = 0.0;
  double achieved_tflops = 0.0;        // global (all devices)
  std::optional<double> mfu;           // percent; nullopt when the peak is unknown
  std::array<double, kNumPhases> phase_ms{};
  double other_ms = 0.0;               // dt_ms - sum(phase_ms)
  MemoryStats memory;
  std::optional<int64_t> allocated_peak_bytes;  // this rank's tensor bytes at most during the iteration (device_memory)
  std::optional<double> grad_norm;     // every iteration the trainer has one
  std::optional<GradNormStats> grad_stats;  // every gradient_log_interval
  std::optional<double> loss_scale;    // float16 runs: the dynamic loss scale this iteration used
  bool skipped_step = false;           // no update was made (fp16 overflow, or a bad step)
  std::string bad_step;                // why the step was an anomaly (non-finite loss or norm); "" = it was not
  std::vector<std::string> errors;     // self-check failures; non-empty = do not trust

  // One training_iterations[] record of the run log (docs/run-log.md).
  nlohmann::json to_json() const;
};

// Derives tokens/s, achieved TFLOP/s and MFU from the measured window and runs
// the self-check. Pure: the tests call it with hand-computed numbers.
IterationMetrics compute_iteration_metrics(const MetricsSetup& setup, int64_t iter, double dt_s,
                                           int64_t tokens);

// The self-check on the figures of one record (also used by llmtrain-report on
// logs read from disk): MFU > 100%, tokens/s != tokens / time, TFLOP/s !=
// tokens/s x FLOPs/token, MFU != TFLOP/s / peak, phases not summing to dt.
// `flops_per_token` and `peak_total_tflops` may be 0 when unknown (checks skipped).
std::vector<std::string> check_iteration_record(const nlohmann::json& record, double flops_per_token,
                                                double peak_total_tflops);

class Metrics {
 public:
  using Clock = std::chrono::steady_clock;

  // `comm`: the run's collectives, whose waits inside a phase count as
  // communication (see PhaseScope); null: phases are plain wall time. It must
  // outlive this object.
  // On a CUDA device the phases are GPU time (DeviceTimeline: events on the
  // compute stream where each phase opens and closes, read in finish_iter), and
  // the waits moved to communication are the compute stream's stalls on the
  // collectives (Collectives::device_waits) plus any host waits.
  explicit Metrics(MetricsSetup setup, Collectives* comm = nullptr);
  ~Metrics();

  // Where a phase opens or closes: the host clock and the collectives' wait
  // counter (Collectives::waited_seconds); on CUDA also an event on the
  // compute stream and the collectives' count of device waits, resolved in
  // finish_iter after a device synchronization instead of at close.
  struct Mark {
    Clock::time_point time;
    double comm_waited_s = 0.0;
    int event = -1;               // DeviceTimeline index (CUDA)
    int64_t device_waits = 0;     // Collectives::device_waits() (CUDA)
  };

  // One phase of the current iteration, open while it lives (micro-batches add
  // up). When it closes, the time it was open counts to its phase, except the
  // waits on collectives inside it, which count to Phase::communication:
  // FSDP's parameter gathers and gradient reduce-scatters in forward/backward,
  // ZeRO-1's and FSDP's norm allreduce and parameter gathers in the optimizer
  // step are exposed communication wherever they happen.
  class [[nodiscard]] PhaseScope {
   public:
    PhaseScope(Metrics* m, Phase p) : m_(m), p_(p), open_(m->mark()) {}
    PhaseScope(PhaseScope&& o) noexcept : m_(o.m_), p_(o.p_), open_(o.open_) { o.m_ = nullptr; }
    PhaseScope(const PhaseScope&) = delete;
    PhaseScope& operator=(const PhaseScope&) = delete;
    PhaseScope& operator=(PhaseScope&&) = delete;
    ~PhaseScope() { close(); }
    void close();  // ends it early
   private:
    Metrics* m_;
    Phase p_;
    Mark open_;
  };

  // Opens the iteration's window: right after a device synchronization, or
  // right after close_iter() of the iteration before (CUDA: the window then
  // starts at that iteration's closing event, so the windows of consecutive
  // iterations tile the device's time).
  void start_iter();
  PhaseScope phase(Phase p) { return PhaseScope(this, p); }
  // Opens phase `p` and names it as the rank's activity (what the watchdog
  // says a stalled rank was doing, report_activity_to): one call for both,
  // so the time a phase measures and the name a hang is reported under
  // cannot drift apart.
  PhaseScope phase(Phase p, const std::string& activity);
  // The watchdog phase(p, activity) names the activity to (null: none). It
  // must outlive this object.
  void report_activity_to(Watchdog* watchdog) { watchdog_ = watchdog; }
  // Moves up to `seconds` of the current iteration from phase `from` to `to`
  // (never more than `from` holds, so the phases still sum to the window).
  // Returns the seconds moved. A closing PhaseScope moves its waits on
  // communication this way.
  double move_seconds(Phase from, Phase to, double seconds);
  // Closes the iteration's window without waiting for the device (issue 46: a
  // step that does not log never waits on the host). What the host knows is
  // taken now (the host clock, memory counters); what the device knows (CUDA:
  // the GPU time of the step and of its phases) waits for finish_iter() after
  // a device synchronization. Any number of iterations may be pending.
  void close_iter(int64_t iter, double lr);
  int64_t pending_iters() const { return static_cast<int64_t>(pending_.size()); }
  // After a device synchronization: the oldest pending iteration (`iter`)
  // with the values the device held (loss, gradient norm): every figure
  // derived, self-checked and kept for summary(). The time of an iteration is
  // the host clock's on a CPU and the compute stream's events' on CUDA (from
  // the event that opened it to the one that closed it).
  // `grad_stats` only on gradient_log_interval iterations.
  IterationMetrics finish_iter(int64_t iter, double loss, std::optional<double> grad_norm,
                               std::optional<GradNormStats> grad_stats = std::nullopt);
  // close_iter then finish_iter: call right after a device synchronization.
  IterationMetrics end_iter(int64_t iter, double loss, double lr, std::optional<double> grad_norm,
                            std::optional<GradNormStats> grad_stats = std::nullopt);

  const MetricsSetup& setup() const { return setup_; }
  const std::vector<IterationMetrics>& history() const { return history_; }
  // The run log's "summary": means over the iterations after the warm-up
  // (find_warmup: until the step time settles, at most `max_warmup_iters`).
  nlohmann::json summary(int64_t max_warmup_iters) const;

 private:
  Mark mark() const;
  // A phase's span from `open` to `close`: its time to `p`, the waits inside it
  // to Phase::communication.
  void charge(Phase p, const Mark& open, const Mark& close);
  void add_phase(Phase p, double seconds) { phase_s_[static_cast<int>(p)] += seconds; }
  // CUDA: the phase spans of the iteration so far, charged in end_iter.
  struct Span {
    Phase phase;
    Mark open, close;
  };
  // A closed iteration whose device figures are not read yet.
  struct Pending {
    int64_t iter = 0;
    double lr = 0.0;
    double host_s = 0.0;              // the host clock from start_iter to close_iter
    int open_event = -1, close_event = -1;  // DeviceTimeline (CUDA)
    std::array<double, kNumPhases> phase_s{};
    std::vector<Span> spans;
    MemoryStats memory;
    std::optional<int64_t> allocated_peak_bytes;
  };
  void charge_device_spans(Pending& p);
  MetricsSetup setup_;
  Collectives* comm_ = nullptr;
  Watchdog* watchdog_ = nullptr;
  std::unique_ptr<DeviceTimeline> timeline_;  // null on the CPU
  std::vector<Span> spans_;
  Clock::time_point iter_t0_{};
  bool in_iter_ = false;
  std::array<double, kNumPhases> phase_s_{};
  int open_event_ = -1;  // CUDA: the event the current iteration's window opened at
  std::deque<Pending> pending_;
  std::vector<IterationMetrics> history_;
};

// The warm-up a run summary leaves out, read from the step times themselves.
// The step time has settled at iteration k (k >= 1) when that iteration is no
// more than kWarmupTolerance slower than the median of iterations k..n-1 (the
// pace of the rest of the run; a median, so a later stall does not count). The
// first such k, with at least one iteration after it, is `settled_after`: the
// iterations before it (iteration 0 at least) are warm-up. None: the step time
// never settled (every iteration slower than those after it, or 2 iterations
// or fewer). Left out: min(settled_after, max_skip), or only iteration 0 when
// it never settled; never all of them (a single iteration is kept), none when
// max_skip is 0 (the warmup_report_iters key).
constexpr double kWarmupTolerance = 0.10;
struct WarmupSplit {
  int64_t skipped = 0;                    // leading iterations the summary leaves out
  std::optional<int64_t> settled_after;   // warm-up iterations the step times show; nullopt: never settled
};
WarmupSplit find_warmup(const std::vector<double>& dt_ms, int64_t max_skip);

// Summary of a list of training_iterations[] records (run log JSON), leaving out
// the warm-up (find_warmup on their dt_ms, at most `max_warmup_iters`): mean
// dt_ms, tokens/s, TFLOP/s, MFU, peak memory.
nlohmann::json summarize_records(const nlohmann::json& records, int64_t max_warmup_iters);

// Console: the line printed every log_interval.
std::string format_iteration_line(const IterationMetrics& m, int64_t max_iters);

}  // namespace llmtrain
