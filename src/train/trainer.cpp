// Trainer: builds the parts of a run in a fixed order and runs the loop.
// Read Trainer::Impl::train_step first: one iteration, top to bottom.
#include "llmtrain/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <torch/torch.h>

#include "llmtrain/core/error.hpp"          // defines: Error, MPI_CHECK
#include "llmtrain/core/fault.hpp"          // defines: fault::hit (named fault points for the tests)
#include "llmtrain/core/log.hpp"            // defines: log::info (rank 0 only)
#include "llmtrain/data/loader.hpp"         // defines: TokenLoader, Batch, read_data_info
#include "llmtrain/distributed/collectives.hpp"    // defines: Collectives, make_collectives
#include "llmtrain/distributed/runtime.hpp"        // defines: Runtime (rank, device)
#include "llmtrain/distributed/strategy.hpp"       // defines: Strategy (DDP / ZeRO-1 / FSDP), make_strategy
#include "llmtrain/distributed/watchdog.hpp"       // defines: Watchdog (a stalled rank ends the job)
#include "llmtrain/model/hf.hpp"            // defines: load_hf_checkpoint, export_hf (transformers format)
#include "llmtrain/model/params.hpp"        // defines: parameter_table (checkpoint names and shapes)
#include "llmtrain/model/transformer.hpp"   // defines: Transformer, ModelConfig
#include "llmtrain/checkpoint/checkpoint.hpp"    // defines: Checkpointer, TrainState (HDF5 checkpoints, resume)
#include "llmtrain/checkpoint/checkpoint_manager.hpp"  // defines: CheckpointManager (when to save; failed saves)
#include "llmtrain/train/checkpoint_parts.hpp"  // defines: the state's parts in a checkpoint (Stateful)
#include "llmtrain/record/device_memory.hpp"  // defines: count_cpu_allocations, allocated_bytes, available_memory
#include "llmtrain/train/eval_full.hpp"     // defines: evaluate_full (eval_full=True)
#include "train/graph_step.hpp"             // defines: GraphStep (use_cuda_graphs=True: the step as one CUDA graph)
#include "llmtrain/train/memory_check.hpp"  // defines: check_memory_fits (refuse before an out-of-memory)
#include "llmtrain/record/metrics.hpp"       // defines: Metrics (phases, MFU, self-check)
#include "llmtrain/model/precision.hpp"     // defines: AutocastGuard, compute_dtype
#include "llmtrain/core/progress.hpp"      // defines: ProgressBar
#include "llmtrain/record/run_log.hpp"       // defines: RunLog, start-up block
#include "llmtrain/record/step_profiler.hpp"  // defines: StepProfiler (profile_steps: a trace of chosen steps)
#include "llmtrain/record/run_record.hpp"    // defines: make_metrics_setup, make_run_environment, open_run_log, predict_run
#include "llmtrain/train/schedule.hpp"      // defines: LrSchedule

namespace llmtrain {

namespace {
void sync_device(torch::Device d) {
#ifdef LLMTRAIN_WITH_CUDA
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
#else
  (void)d;
#endif
}

// The id that ends a document, for document_masking (-1 without it): the data
// index's EOS; data without one (a nanoGPT token stream) is refused.
int64_t document_eos(const Config& cfg, const DataInfo& data) {
  if (!cfg.document_masking) return -1;
  if (data.eos_id < 0)
    throw ConfigError(fmt::format("document_masking=true needs documents separated by an EOS token, but the data "
                                  "in {} records none (eos_id = -1: a raw token stream, e.g. --from_nanogpt); "
                                  "set document_masking=false or prepare the data from text",
                                  data.dir));
  return data.eos_id;
}

// The training loop's console: the progress bar, and the lines printed around
// it; with the bar off (LLMTRAIN_PROGRESS=off, or not rank 0) they are plain
// rank-0 lines.
class Console {
 public:
  Console(int64_t start_iter, int64_t end_iter) : bar_(start_iter, end_iter, ProgressBar::detect_mode()) {}
  void say(const std::string& line) {
    if (bar_.mode() == ProgressBar::Mode::off)
      log::info("{}", line);
    else
      bar_.print_line(line);
  }
  ProgressBar& bar() { return bar_; }

 private:
  ProgressBar bar_;
};

}  // namespace

struct Trainer::Impl {
  Config cfg;
  Runtime& rt;
  torch::Device device{torch::kCPU};
  torch::ScalarType dtype = torch::kFloat;
  DataInfo data;
  ModelConfig mcfg;
  Transformer model{nullptr};
  std::unique_ptr<Collectives> comm;
  std::unique_ptr<Strategy> strategy;
  std::unique_ptr<TokenLoader> train_loader;
  std::optional<PredictionCheck> prediction;  // none when the device has no profile
  LrSchedule schedule;
  LossScaler scaler{false};
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<RunLog> run_log;
  // Checkpoints: every stateful part registered with the checkpointer, whose
  // manager owns when a save happens and what a failed one means.
  std::unique_ptr<CheckpointManager> checkpoints;
  TrainState state;                          // state.iteration = the next iteration to run
  std::optional<LoadedCheckpoint> resumed;
  int64_t consecutive_bad_steps = 0;
  bool last_step_bad = false;  // the last recorded step was a bad step (no checkpoint_interval save after it)
  // Steps run but not yet recorded (issue 46: a step that does not log never
  // waits on the host): what each one needs at the next log point, where the
  // device is waited for once and every pending step recorded, oldest first.
  struct PendingStep {
    int64_t iter = 0;
    double scale = 1.0;                       // float16's loss scale this step used (1 otherwise)
    std::optional<GradNormStats> grad_stats;  // on gradient_log_interval iterations
    int64_t row = -1;                         // its row of step_values; -1: the host path read them already
    double loss = 0, grad_norm = 0;           // the host path's: averaged over ranks; global, unscaled
    bool skipped = false;                     // no update was made on any rank
    std::string bad;                          // the host path's: why the step is an anomaly ("" = it is not)
  };
  std::vector<PendingStep> pending_steps;
  // (capacity, 3) double on the device: per pending step of the device path,
  // its loss (averaged over ranks), global gradient norm and found_inf; its
  // host copy (pinned on CUDA) is filled at the log point.
  torch::Tensor step_values, step_values_host;
  int64_t step_rows = 0;
  nlohmann::json full_eval = nlohmann::json::object();  // the last eval_full's token counts
  int64_t last_eval_tokens = 0;                         // predicted tokens of the last evaluate(), all ranks
  nlohmann::json memory_plan;  // the memory model's peak per rank and what the device had at start-up
  // use_cuda_graphs=True (capture on CUDA), or the test's CPU twin (plain):
  // the whole step on static buffers (train/graph_step.hpp); none otherwise.
  std::unique_ptr<GraphStep> graph;
  ProfileSteps profile_steps;  // profile_steps' iterations run uncaptured (the trace shows their ops)

  // The parts of a run, built in this order.
  Impl(const Config& c, Runtime& r) : cfg(c), rt(r), schedule(LrSchedule::from_config(c)) {
    rt.watchdog().start(WatchdogOptions::from_config(cfg));  // 0. a rank that stops arriving ends the job
    rt.watchdog().activity("start-up");
    const std::string tf32 = setup_device();                  // 1. device and precision
    setup_data();                                             // 2. loader, vocabulary, val split checked
    build_model();                                            // 3. memory check, model, attention plan
    comm = make_collectives(rt, device);                      // 4. parallelism, applied from outside the model
    strategy = make_strategy(StrategyOptions::from_config(cfg), model, *comm);
    // 5. checkpoints: every stateful part saves and loads its own piece of one
    //    file (weights and optimizer shards, counters, loss scale, data position,
    //    schedule settings, RNG); resume restores them all
    state.best_val_loss = std::numeric_limits<double>::infinity();
    register_checkpoint_parts();
    if (cfg.init_from.source == InitSource::resume) resume();
    setup_graph_step();                                       // 6. use_cuda_graphs: the step's static buffers
    open_record(tf32);                                        // 7. metrics and the run log (rank 0 writes)
  }

  // The rank's device, the compute dtype and float16's loss scaler. Returns
  // what TF32 was set to, for the start-up block.
  std::string setup_device() {
    device = rt.setup_device(cfg.device, cfg.num_threads);
    check_graph_step_device(cfg, device);  // use_cuda_graphs=True needs CUDA: refused before any work
    if (device.is_cpu()) count_cpu_allocations();  // the run log's allocated_peak_bytes (CUDA: its allocator counts)
    dtype = compute_dtype(cfg.dtype, device);
    scaler = LossScaler(dtype == torch::kHalf);  // float16 needs loss scaling; bfloat16 does not
    return enable_tf32(device);
  }

  // The index tells the vocabulary; the loader checks block_size against the
  // shards before anything large is allocated.
  void setup_data() {
    train_loader =
        std::make_unique<TokenLoader>(LoaderOptions::from_config(cfg), rt, Split::train, device, /*stream=*/0);
    data = train_loader->info();  // data_dir's, or the first of a data_mix (all share one tokenizer)
    check_split_at_startup(Split::val);  // now, not at the first evaluation after training work
  }

  // The model, initialized identically on every rank from the seed, once the
  // memory model says the run fits.
  void build_model() {
    mcfg = ModelConfig::from_config(cfg, data.vocab_size);
    if (mcfg.vocab_size < data.vocab_size)
      throw ConfigError(fmt::format("config key 'vocab_size' ({}) is smaller than the data's vocabulary ({} in {})",
                                    mcfg.vocab_size, data.vocab_size, cfg.data_dir));
    mcfg.eos_id = document_eos(cfg, data);
    if (!cfg.export_hf.empty()) check_hf_export_target(cfg.export_hf, mcfg);  // refused before any work
    const AvailableMemory available = available_memory(device, rt.local_size(), rt.hostname());
    check_memory_fits(cfg, mcfg, rt.world_size(), available);
    memory_plan = {{"plan_bytes", estimate_memory(mcfg, MemoryInputs::from_config(cfg, rt.world_size()), cfg.strategy())
                                      .total()},
                   {"capacity_bytes", available.bytes},
                   {"capacity_source", available.source}};  // startup_info.memory (the report's memory figure)
    torch::manual_seed(cfg.seed);
    model = Transformer(mcfg);
    model->init_weights(static_cast<uint64_t>(cfg.seed));
    if (cfg.init_from.source == InitSource::hf) load_hf_checkpoint(*model, cfg.init_from.hf_dir);
    model->to(device);
    model->plan_attention(device, dtype);
    model->plan_kernels(device, dtype);  // compile=True: the fused kernels' self-check and fallback lines
  }

  // use_cuda_graphs=True: the step captured once and replayed (on CUDA; the
  // configuration refused what cannot be captured: Config::validate). The
  // test hook LLMTRAIN_TEST_GRAPH_STEP=plain runs the same step uncaptured.
  void setup_graph_step() {
    const bool twin = graph_step_twin_requested();
    if (!cfg.use_cuda_graphs && !twin) return;
    profile_steps = parse_profile_steps(cfg.profile_steps);
    graph = std::make_unique<GraphStep>(twin ? GraphStep::Mode::plain : GraphStep::Mode::capture, device,
                                        cfg.gradient_accumulation_steps, cfg.batch_size, cfg.block_size,
                                        [this](const GraphStep::Buffers& b) { graph_body(b); });
    log::info("cuda graphs: {}", graph->describe());
  }

  // Metrics, the run log with its start-up block and the predicted step
  // (record/run_record.hpp).
  void open_record(const std::string& tf32) {
    const MetricsSetup setup = make_metrics_setup(cfg, mcfg, rt, device, tf32_matmuls_enabled(device));
    metrics = std::make_unique<Metrics>(setup, comm.get());  // waits on collectives in a phase = communication
    metrics->report_activity_to(&rt.watchdog());             // each phase is the rank's activity too
    RunChoices choices;
    choices.attention_backend = to_string(model->attention_backend_used());
    choices.attention_kernel = model->attention_kernel_used();
    choices.loss_scaling = scaler.enabled();
    choices.tf32 = tf32;
    choices.parallelism = fmt::format("{} over {} ({} B optimizer state on rank 0)", strategy->name(), comm->name(),
                                      strategy->optimizer_state_bytes());
    const RunEnvironment env = make_run_environment(cfg, rt, device, choices);
    run_log = open_run_log(cfg, rt.is_root());
    auto startup = make_startup_info(cfg, mcfg, env, setup);
    startup["memory"] = memory_plan;
    if (graph) startup["cuda_graphs"] = {{"mode", graph->mode() == GraphStep::Mode::capture ? "capture" : "plain"},
                                         {"warmup_steps", graph->warmup_steps()},
                                         {"timing", graph->describe()}};
    if (resumed)
      startup["resumed_from"] = {{"checkpoint", resumed->path},
                                 {"iteration", resumed->state.iteration},
                                 {"world_size", resumed->world_size},
                                 {"strategy", resumed->strategy}};
    prediction = predict_run(cfg, mcfg, rt, startup);
    if (resumed) startup["resume_changes"] = resume_changes_json;
    run_log->set_startup_info(std::move(startup));
    run_log->flush(/*force=*/true);
    checkpoints->record_to(*run_log);
    // How the run's record survives its end: another rank's fatal error is
    // recorded here (rank 0) before the job is aborted, and a stop signal
    // flushes the log at once (mpirun kills the ranks about a second after
    // forwarding SIGTERM).
    rt.set_observer(run_log.get());
    log::info("{}", format_startup_block(cfg, mcfg, env, setup));
    log::info("run log: {}", run_log->path());
  }

  ~Impl() { rt.set_observer(nullptr); }

  // The checkpoint's parts, in file order (train/checkpoint_parts.hpp).
  void register_checkpoint_parts() {
    const std::string tokenizer = data.tokenizer_hash.empty() ? data.tokenizer
                                                              : data.tokenizer + " " + data.tokenizer_hash;
    auto checkpointer = std::make_unique<Checkpointer>(cfg.out_dir, cfg.keep_last, rt,
                                                       CheckpointRun{strategy->name(), cfg.to_json(), tokenizer});
    checkpointer->add(std::make_unique<ResumeConfigCheck>(cfg.to_json(), cfg.resume_allow, tokenizer));  // first
    checkpointer->add(std::make_unique<StrategyCheckpoint>(parameter_table(mcfg), *strategy));
    checkpointer->add(std::make_unique<TrainStateCheckpoint>(state));
    checkpointer->add(std::make_unique<LossScalerCheckpoint>(scaler));
    checkpointer->add(std::make_unique<DataPositionCheckpoint>(
        *train_loader, DataPosition{cfg.global_batch_sequences(rt.world_size()), cfg.block_size, cfg.seed,
                                    cfg.gradient_accumulation_steps}));
    checkpointer->add(std::make_unique<ScheduleCheckpoint>(schedule));
    checkpointer->add(std::make_unique<RngCheckpoint>(device));
    checkpoints = std::make_unique<CheckpointManager>(std::move(checkpointer), CheckpointPolicy::from_config(cfg),
                                                      rt.watchdog());
  }

  // Loads the newest loadable checkpoint of out_dir: any world size and strategy
  // can continue what any other wrote; the same world size and strategy
  // continue bit-exactly.
  void resume() {
    resumed = checkpoints->load_latest();  // every part: state, scaler, loader position, RNG, weights
    if (!resumed)
      throw ConfigError(fmt::format(
          "init_from=resume: no checkpoint in '{}' (runs write one at evaluations that improve val loss, "
          "with always_save_checkpoint=True, every checkpoint_interval iterations and on a stop signal)",
          checkpoints->checkpointer().dir()));
    resumed->state = state;  // the counters the file held, as TrainStateCheckpoint loaded them
    log::info("resumed from {} at iteration {} (written by {} on {} rank(s))", resumed->path, state.iteration,
              resumed->strategy, resumed->world_size);
    for (const auto& c : resume_changes(resumed->config, cfg.to_json()))
      resume_changes_json.push_back({{"key", c.key}, {"checkpoint", c.checkpoint}, {"now", c.now}});
    if (resume_changes_json.empty()) return;
    std::string text;
    for (const auto& c : resume_changes_json)
      text += fmt::format("{}{} {} -> {}", text.empty() ? "" : ", ", c["key"].get<std::string>(), c["checkpoint"].dump(),
                          c["now"].dump());
    log::info("resume changes (applied from iteration {} on): {}", state.iteration, text);
  }
  nlohmann::json resume_changes_json = nlohmann::json::array();  // resume_changes: keys that differ from the checkpoint's run

  // A split that cannot give one window of block_size + 1 tokens (empty, or
  // shards too short) fails here with the loader's message.
  void check_split_at_startup(Split split) {
    LoaderOptions o = LoaderOptions::from_config(cfg);
    o.num_workers = 0;  // checking only
    TokenLoader check(o, rt, split, device, /*stream=*/1);
  }

  // Mean of a per-rank scalar over all ranks (the run's collectives, on its device).
  double mean_over_ranks(double v) {
    auto t = torch::tensor({v}, torch::TensorOptions().dtype(torch::kDouble)).to(device);
    comm->allreduce_sum(t);
    return t.item<double>() / static_cast<double>(comm->world_size());
  }


  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& p : model->named_parameters()) out.emplace_back(p.key(), p.value());
    return out;
  }

  // Mean loss over eval_iters global batches of `split` (each rank: eval_iters x
  // accum micro-batches), averaged over ranks: the same samples for every world
  // size and accumulation split of the same global batch. The evaluation stream
  // restarts at position 0 each time, so every evaluation of a run sees the same
  // batches and the numbers are comparable.
  double evaluate(Split split) {
    if (split == Split::val && cfg.eval_full) return evaluate_full_val();
    torch::NoGradGuard no_grad;
    model->eval();
    TokenLoader loader(LoaderOptions::from_config(cfg), rt, split, device, /*stream=*/1);
    const int64_t n = cfg.eval_iters * cfg.gradient_accumulation_steps;
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      rt.watchdog().activity(fmt::format("evaluation of {}: batch {}/{}", to_string(split), i + 1, n));
      Batch b = loader.next();
      AutocastGuard autocast(device, dtype);
      sum += model->loss(b.x, b.y).item<double>();
    }
    model->train();
    last_eval_tokens = n * cfg.batch_size * cfg.block_size * rt.world_size();
    rt.watchdog().activity(fmt::format("evaluation of {}: loss allreduce", to_string(split)));
    const double mean = mean_over_ranks(sum / static_cast<double>(n));
    rt.watchdog().activity(fmt::format("after the evaluation of {}: run log, checkpoint", to_string(split)));
    return mean;
  }

  // eval_full=True: the whole val split in order (eval_full.hpp), printed and
  // run-logged with its token count.
  double evaluate_full_val() {
    const FullEvalResult r =
        evaluate_full(*model, cfg.data_dir, Split::val, cfg.block_size, cfg.batch_size, device, dtype, *comm);
    log::info("eval_full: val loss {:.6f} over {} tokens ({} windows of {})", r.loss, r.tokens, r.windows,
              cfg.block_size);
    full_eval = {{"eval_full", true}, {"val_tokens", r.tokens}, {"val_windows", r.windows}};
    last_eval_tokens = r.tokens;
    return r.loss;
  }

  // An eval_results entry (docs/run-log.md), with eval_full's counts when it ran.
  nlohmann::json eval_entry(int64_t iter, double train_loss, double val_loss) const {
    nlohmann::json e = {{"iter", iter}, {"train_loss", train_loss}, {"val_loss", val_loss}};
    e.update(full_eval);
    return e;
  }

  // export_hf=DIR at the end of the run: every rank makes the parameters whole
  // (FSDP), rank 0 writes, and no rank leaves before the directory is complete.
  void export_model() {
    if (cfg.export_hf.empty()) return;
    strategy->materialize_parameters();
    if (rt.is_root())
      log::info("{}", export_hf(cfg.export_hf, mcfg, named_parameters(),
                                {data.eos_id, data.tokenizer, data.tokenizer_hash}));
    rt.barrier();  // no rank leaves before the directory is complete
  }

  // ---- TRAINING STEP BEGIN ----
  // One iteration: accumulate micro-batches, reduce, clip, step. Nothing here
  // waits on the host (issue 46): loss, gradient norm, the non-finite flag and
  // the clip coefficient stay on the device, and the step's figures are read
  // at the next log point (record_pending). float16's loss scaler and the
  // gradient_log_interval iterations take the host path (update_on_host).
  // use_cuda_graphs=True: the same step on static buffers, captured once and
  // replayed (graph_step); its gradient_log_interval iterations run eager_step.
  void train_step(int64_t iter) {
    begin_iteration(iter);                                    // watchdog, fault points, metrics window
    const double lr = schedule.at(iter);
    PendingStep s = graph && !host_step(iter) ? graph_step(iter, lr)   // use_cuda_graphs: one replay
                                              : eager_step(iter, lr);
    metrics->close_iter(iter, lr);                            // its figures wait for the log point
    rt.watchdog().activity(fmt::format("after iteration {}: run log, evaluation, checkpoint", iter));
    pending_steps.push_back(std::move(s));
  }
  // ---- TRAINING STEP END ----

  // The step op by op, each phase timed.
  PendingStep eager_step(int64_t iter, double lr) {
    const torch::Tensor loss_sum = forward_backward(iter);    // accum micro-batches; DDP reduces in the last
    reduce_gradients(iter);                                   // gradients now averaged over ranks
    const double scale = scaler.scale();                      // float16's loss scale (1 otherwise)
    const torch::Tensor loss = reduce_loss(iter, loss_sum);   // on the device, the same on every rank
    PendingStep s = host_step(iter) ? update_on_host(iter, lr, loss, scale)  // norm, clip, AdamW; or no update
                                    : update_on_device(iter, lr, loss);       //   on any rank
    s.scale = scale;
    return s;
  }

  // use_cuda_graphs=True: the batches into the static buffers (Phase::data),
  // the learning rate into its device tensor, then the whole step as one
  // replay (Phase::forward_backward: a replay cannot be cut into phases).
  // profile_steps' iterations run the same step uncaptured.
  PendingStep graph_step(int64_t iter, double lr) {
    const int64_t accum = cfg.gradient_accumulation_steps;
    {
      auto t = metrics->phase(Phase::data, fmt::format("iteration {}: data into the static buffers", iter));
      for (int64_t micro = 0; micro < accum; ++micro) {
        const Batch batch = train_loader->next();             // (B, T) x and y
        graph->set_batch(micro, batch.x, batch.y);
      }
      graph->set_lr(lr);
    }
    const bool traced = profile_steps.contains(iter);
    if (!traced && graph->capture_due()) {
      // Once, outside the timed phases (what a capture records never runs:
      // no phase may read its events); the replay below is the step.
      rt.watchdog().activity(fmt::format("iteration {}: capturing the step in a CUDA graph", iter));
      graph->capture();
    }
    {
      auto t = metrics->phase(Phase::forward_backward,
                              fmt::format("iteration {}: the captured step (forward, backward, gradient all-reduce, "
                                          "clipping, AdamW)", iter));
      if (traced)
        graph->run_uncaptured();
      else
        graph->run();
    }
    PendingStep s;
    s.iter = iter;
    s.row = next_step_row();
    step_values[s.row].copy_(graph->buffers().slot);          // on the device: read at the log point
    return s;
  }

  // The body GraphStep captures: eager_step's device path on the static
  // buffers, every value left on the device (no host read, no fault point, no
  // metrics phase: a replay runs none of the host's code).
  void graph_body(const GraphStep::Buffers& b) {
    const int64_t accum = cfg.gradient_accumulation_steps;
    torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device));
    for (int64_t micro = 0; micro < accum; ++micro)
      loss_sum += micro_step(b.x[micro], b.y[micro], micro + 1 == accum, /*iter=*/-1);
    strategy->finish_gradients();
    const torch::Tensor loss = loss_mean_over_ranks(loss_sum);
    const auto [norm, found_inf] = device_update(b.lr, loss);
    b.slot.copy_(torch::stack({loss, norm, found_inf}));
  }
  void begin_iteration(int64_t iter) {
    rt.watchdog().iteration_begin(iter);
    rt.watchdog().activity(fmt::format("iteration {}: start", iter));
    if (fault::hit(fault::Point::fail_iteration, rt.rank(), iter))
      throw Error(fmt::format("injected failure at iteration {} ({})", iter,
                              fault::env_name(fault::Point::fail_iteration)));
    if (fault::hit(fault::Point::iteration_sleep, rt.rank(), iter))
      std::this_thread::sleep_for(std::chrono::milliseconds(fault::value(fault::Point::iteration_sleep)));
    metrics->start_iter();
  }

  // The iteration's micro-batches, each loaded (Phase::data), then forward
  // under autocast and backward through the strategy (Phase::forward_backward;
  // FSDP gathers each block's shards inside, its waits count as
  // communication). Returns the sum of the micro-batches' losses / accum.
  torch::Tensor forward_backward(int64_t iter) {
    const int64_t accum = cfg.gradient_accumulation_steps;
    torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device));
    for (int64_t micro = 0; micro < accum; ++micro) {
      Batch batch;
      {
        auto t = metrics->phase(Phase::data, fmt::format("iteration {}: data, micro-batch {}/{}", iter, micro + 1, accum));
        batch = train_loader->next();                         // (B, T) x and y
      }
      auto t = metrics->phase(Phase::forward_backward,
                              fmt::format("iteration {}: forward/backward, micro-batch {}/{}", iter, micro + 1, accum));
      loss_sum += micro_step(batch.x, batch.y, /*last=*/micro + 1 == accum, iter);
    }
    return loss_sum;
  }

  // One micro-batch's forward under autocast and backward through the
  // strategy; returns its loss / accum (0-dim fp32, detached). `iter` < 0: no
  // fault point (the captured step).
  torch::Tensor micro_step(const torch::Tensor& x, const torch::Tensor& y, bool last, int64_t iter) {
    torch::Tensor loss;
    {
      AutocastGuard autocast(device, dtype);
      loss = model->loss(x, y) / static_cast<double>(cfg.gradient_accumulation_steps);
    }
    if (iter >= 0 && fault::hit(fault::Point::nan_loss, rt.rank(), iter))
      loss = loss * std::numeric_limits<double>::quiet_NaN();
    // float16: the loss is scaled so that small gradients survive; step() unscales.
    strategy->backward(scaler.enabled() ? loss * scaler.scale() : loss, last);  // DDP: reduces only on the last
    return loss.detach().to(torch::kFloat);
  }

  // Waits for the gradient reductions still in flight: what did not overlap
  // the backward is the iteration's Phase::communication.
  void reduce_gradients(int64_t iter) {
    auto t = metrics->phase(Phase::communication, fmt::format("iteration {}: gradient reduction", iter));
    strategy->finish_gradients();
  }

  // The iteration's loss, averaged over ranks, as a 0-dim double tensor on the
  // device (Phase::communication: a rank that arrives late is waited for here).
  torch::Tensor reduce_loss(int64_t iter, const torch::Tensor& loss_sum) {
    if (fault::hit(fault::Point::slow_loss_reduce, rt.rank(), iter))
      std::this_thread::sleep_for(std::chrono::milliseconds(fault::value(fault::Point::slow_loss_reduce)));
    auto t = metrics->phase(Phase::communication, fmt::format("iteration {}: loss allreduce", iter));
    return loss_mean_over_ranks(loss_sum);
  }
  // A 0-dim loss averaged over ranks, as a 0-dim double on the device.
  torch::Tensor loss_mean_over_ranks(const torch::Tensor& loss_sum) {
    auto sum = loss_sum.to(torch::kDouble).reshape({1});
    if (comm->world_size() > 1) {
      comm->allreduce_sum(sum);
      sum.div_(static_cast<double>(comm->world_size()));
    }
    return sum.reshape({});
  }

  // The host path: float16's loss scaler reads the norm every step (it halves
  // its scale on an overflow), and gradient_log_interval iterations read every
  // parameter's gradient norm.
  bool host_step(int64_t iter) const {
    return scaler.enabled() || (cfg.gradient_log_interval > 0 && iter % cfg.gradient_log_interval == 0);
  }

  // Phase::optimizer on the device: the global gradient norm, the clip
  // coefficient and found_inf (the loss or the norm is not finite) are device
  // tensors the fused AdamW reads; found_inf = 1 leaves parameters, moments
  // and the step count as they were on every rank (every rank holds the same
  // loss and norm). The three values go to the step's row of step_values.
  PendingStep update_on_device(int64_t iter, double lr, const torch::Tensor& loss) {
    auto t = metrics->phase(Phase::optimizer, fmt::format("iteration {}: gradient norm, optimizer step", iter));
    PendingStep s;
    s.iter = iter;
    const auto [norm, found_inf] = device_update(lr, loss);
    s.row = next_step_row();
    step_values[s.row].copy_(torch::stack({loss, norm, found_inf}));
    return s;
  }

  // The norm, found_inf and the AdamW step on the device; returns (norm,
  // found_inf). `lr`: a double from the host, or (the captured step) a 0-dim
  // device tensor.
  template <typename Lr>
  std::pair<torch::Tensor, torch::Tensor> device_update(const Lr& lr, const torch::Tensor& loss) {
    torch::NoGradGuard no_grad;
    const torch::Tensor norm = strategy->grad_norm_tensor();  // 0-dim double, global
    // norm >= 0: the sum is not finite exactly when the loss or the norm is not.
    const torch::Tensor found_inf = (loss + norm).isfinite().logical_not().to(torch::kDouble);
    strategy->step(lr, clip_coefficient(norm, cfg.grad_clip), found_inf);  // the coefficient as its gradient scale
    return {norm, found_inf};
  }

  // The next free row of step_values (made at the first step of the device path).
  int64_t next_step_row() {
    if (!step_values.defined()) {
      const int64_t rows = max_pending_steps();
      const auto opts = torch::TensorOptions().dtype(torch::kDouble);
      step_values = torch::empty({rows, 3}, opts.device(device));
      step_values_host = device.is_cpu() ? step_values : torch::empty({rows, 3}, opts.pinned_memory(true));
    }
    return step_rows++;
  }

  // Phase::optimizer on the host: the same step, its values read now.
  // float16: a non-finite norm is the loss scale overflowing: it is halved and
  // no update is made. The sharded strategies' norm allreduce and parameter
  // gathers count as communication.
  PendingStep update_on_host(int64_t iter, double lr, const torch::Tensor& loss_t, double scale) {
    auto t = metrics->phase(Phase::optimizer, fmt::format("iteration {}: gradient norm, optimizer step", iter));
    PendingStep s;
    s.iter = iter;
    s.loss = loss_t.item<double>();
    const double scaled_norm = strategy->grad_norm();
    s.grad_norm = scaled_norm / scale;
    if (cfg.gradient_log_interval > 0 && iter % cfg.gradient_log_interval == 0)
      // The gradients hold sums over ranks (the optimizer folds in 1/world).
      s.grad_stats = summarize_grad_norms(
          parameter_grad_norms(named_parameters(), scale * static_cast<double>(comm->world_size())), s.grad_norm,
          cfg.grad_clip);
    s.bad = bad_step_reason(s.loss, scaled_norm);
    const bool finite = s.bad.empty() && std::isfinite(scaled_norm);
    const bool take = scaler.update(finite ? scaled_norm : std::numeric_limits<double>::infinity()) && finite;
    if (take) {
      strategy->step(lr, clip_coefficient(s.grad_norm, cfg.grad_clip) / scale);  // AdamW, the clip coefficient as its gradient scale
    } else {
      strategy->skip_step();                                  // no update on any rank
      s.skipped = true;
    }
    return s;
  }

  // Why a step is an anomaly: a non-finite loss, or (without float16's
  // scaler, where it is an overflow) a non-finite gradient norm; "" = it is not.
  std::string bad_step_reason(double loss, double scaled_norm) const {
    if (!std::isfinite(loss)) return fmt::format("loss is {}", loss);
    if (!std::isfinite(scaled_norm) && !scaler.enabled()) return fmt::format("gradient norm is {}", scaled_norm);
    return "";
  }

  // The log point: waits for the device once, then each pending step's record
  // (oldest first) with the values the device held for it.
  std::vector<IterationMetrics> settle_pending() {
    std::vector<IterationMetrics> out;
    if (pending_steps.empty()) return out;
    rt.watchdog().activity("log point: device synchronize, the steps' records");
    if (step_rows > 0 && !device.is_cpu())
      step_values_host.narrow(0, 0, step_rows).copy_(step_values.narrow(0, 0, step_rows), /*non_blocking=*/true);
    sync_device(device);  // the only wait on the device in the loop, outside evaluations and checkpoints
    const double* v = step_rows > 0 ? step_values_host.data_ptr<double>() : nullptr;
    for (auto& s : pending_steps) {
      if (s.row >= 0) {
        s.loss = v[s.row * 3];
        s.grad_norm = v[s.row * 3 + 1];
        s.skipped = v[s.row * 3 + 2] != 0.0;
        s.bad = bad_step_reason(s.loss, s.grad_norm);
      }
      IterationMetrics it = metrics->finish_iter(s.iter, s.loss, s.grad_norm, std::move(s.grad_stats));
      rt.watchdog().iteration_done(it.dt_ms / 1e3);
      if (scaler.enabled()) it.loss_scale = s.scale;
      it.skipped_step = s.skipped;
      it.bad_step = s.bad;
      out.push_back(std::move(it));
    }
    pending_steps.clear();
    step_rows = 0;
    return out;
  }

  // A log point is due: every pending step to the run log (self-check
  // failures, bad steps: max_bad_steps in a row end the run) and, on
  // log_interval iterations and the last, to the console.
  void record_pending(Console& console) {
    for (const IterationMetrics& it : settle_pending()) {
      record_iteration(it);
      count_bad_step(it);
      last_step_bad = !it.bad_step.empty();
      if (it.iter % cfg.log_interval == 0 || it.iter + 1 == cfg.max_iters)
        console.say(format_iteration_line(it, cfg.max_iters) + " | ETA " + console.bar().eta(it.iter + 1));
    }
  }
  // Steps between two log points at most: a full buffer is a log point too.
  int64_t max_pending_steps() const { return std::clamp<int64_t>(cfg.log_interval, 1, 1024); }
  bool pending_full() const { return static_cast<int64_t>(pending_steps.size()) >= max_pending_steps(); }

  // ---- the loop's parts, in the order Trainer::run_loop calls them ----

  // eval_only=True: evaluate the loaded model (train and val), log, export.
  // The summary holds the losses and the tokens evaluated (docs/run-log.md).
  TrainResult evaluate_only() {
    TrainResult result;
    const int64_t at = state.iteration;  // the loaded checkpoint's
    const auto t0 = std::chrono::steady_clock::now();
    result.final_train_loss = evaluate(Split::train);
    const int64_t train_tokens = last_eval_tokens;
    result.final_val_loss = evaluate(Split::val);
    const int64_t val_tokens = last_eval_tokens;
    result.evaluated_at = at;
    const std::string what = resumed ? resumed->path : to_string(cfg.init_from);
    log::info("eval of {} (iteration {}): train loss {:.4f} over {} tokens, val loss {:.4f} over {} tokens", what,
              at, result.final_train_loss, train_tokens, result.final_val_loss, val_tokens);
    run_log->add_eval(eval_entry(at, result.final_train_loss, result.final_val_loss));
    run_log->set_summary({{"status", "completed"}, {"eval_only", true}, {"iterations", 0}, {"iteration", at},
                          {"train_loss", result.final_train_loss}, {"val_loss", result.final_val_loss},
                          {"train_tokens", train_tokens}, {"val_tokens", val_tokens},
                          {"tokens_evaluated", train_tokens + val_tokens},
                          {"total_time_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()}});
    run_log->flush(/*force=*/true);
    result.iterations = 0;
    result.run_log_path = run_log->path();
    export_model();
    return result;
  }

  // The iteration's run-log record, and its self-check failures as errors.
  void record_iteration(const IterationMetrics& it) {
    if (prediction)
      if (auto slow = prediction->observe(it, cfg.warmup_report_iters)) {
        log::warn("{}", *slow);
        run_log->add_event({{"iter", it.iter}, {"kind", "slower_than_predicted"}, {"message", *slow}});
      }
    run_log->add_iteration(it.to_json());
    for (const auto& e : it.errors) {
      run_log->add_error(e);
      log::warn("self-check failed at iter {}: {}", it.iter, e);
    }
  }

  // A non-finite loss or gradient norm skipped its update on every rank; too
  // many in a row means the run has diverged: the run ends naming the last
  // good checkpoint.
  void count_bad_step(const IterationMetrics& it) {
    if (it.bad_step.empty()) {
      consecutive_bad_steps = 0;
      return;
    }
    ++state.bad_steps;
    ++consecutive_bad_steps;
    const std::string msg = fmt::format("iteration {}: {}; the update was skipped on every rank ({} in a row, "
                                        "max_bad_steps = {})",
                                        it.iter, it.bad_step, consecutive_bad_steps, cfg.max_bad_steps);
    run_log->add_event({{"iter", it.iter}, {"kind", "bad_step"}, {"message", msg}});
    log::warn("{}", msg);
    if (consecutive_bad_steps < cfg.max_bad_steps) return;
    run_log->flush(/*force=*/true);
    const std::string good = checkpoints->latest_path();
    throw Error(fmt::format("training diverged: {} non-finite steps in a row up to iteration {} (lr {:.3e}); "
                            "the last good checkpoint is {}; lower learning_rate or raise warmup_iters and "
                            "resume from it (init_from=resume)",
                            consecutive_bad_steps, it.iter, it.lr,
                            good.empty() ? std::string("none (no checkpoint was written)") : good));
  }

  // Train and val loss after state.iteration iterations; the checkpoint
  // manager saves when val improved, or at every evaluation if asked.
  void evaluate_and_checkpoint(TrainResult& result, Console& console) {
    result.final_train_loss = evaluate(Split::train);
    result.final_val_loss = evaluate(Split::val);
    result.evaluated_at = state.iteration;
    run_log->add_eval(eval_entry(state.iteration, result.final_train_loss, result.final_val_loss));
    console.say(fmt::format("eval at iter {}: train loss {:.4f}, val loss {:.4f}", state.iteration,
                            result.final_train_loss, result.final_val_loss));
    const bool improved = result.final_val_loss < state.best_val_loss;
    if (improved) state.best_val_loss = result.final_val_loss;
    checkpoints->after_evaluation(state.iteration, improved);
    run_log->flush(/*force=*/true);
  }

  // Slurm's warning before the time limit (or a pre-emption), seen by any rank:
  // every rank checkpoints and leaves with the requeue code; the requeued job
  // resumes from here. Returns whether the run stops.
  bool stop_on_signal(TrainResult& result, Console& console) {
    rt.watchdog().activity("stop-signal check (MPI allreduce on the host)");
    const int sig = rt.stop_signal_any_rank();  // all ranks stop after the same iteration; the GPU is not waited for
    if (!sig) return false;
    record_pending(console);  // the checkpoint's counters include every step run
    result.stop_signal = sig;
    result.checkpoint = checkpoints->on_stop_signal(state.iteration);
    const std::string msg = fmt::format("stopped by signal {} after iteration {} of {}; checkpoint {} (resume "
                                        "with init_from=resume)",
                                        sig, state.iteration, cfg.max_iters, result.checkpoint);
    run_log->add_event({{"iter", state.iteration}, {"kind", "stopped"}, {"signal", sig}, {"message", msg}});
    console.say(msg);
    return true;
  }

  // summary.allocated_peak_bytes: the largest of every rank's peak over its
  // iterations, and each rank's (collective; absent where nothing was counted).
  void add_allocated_peaks(nlohmann::json& s) {
    int64_t mine = -1;
    for (const auto& m : metrics->history()) mine = std::max(mine, m.allocated_peak_bytes.value_or(-1));
    auto in = torch::tensor({static_cast<double>(mine)}, torch::TensorOptions().dtype(torch::kDouble)).to(device);
    auto all = torch::zeros({comm->world_size()}, in.options());
    comm->all_gather(in, all);
    const auto peaks = all.cpu();
    std::vector<int64_t> per_rank;
    for (int64_t r = 0; r < peaks.numel(); ++r) per_rank.push_back(static_cast<int64_t>(peaks[r].item<double>()));
    if (*std::min_element(per_rank.begin(), per_rank.end()) < 0) return;
    s["allocated_peak_bytes_per_rank"] = per_rank;
    s["allocated_peak_bytes"] = *std::max_element(per_rank.begin(), per_rank.end());
  }

  // The run log's summary and status; the model exported unless a signal
  // stopped the run early.
  TrainResult finish_run(TrainResult result) {
    rt.watchdog().activity("end of the run: summary, run log");
    checkpoints->finish();  // the last checkpoint on disk; throws when the run's last state is in none
    const auto summary = metrics->summary(cfg.warmup_report_iters);
    auto s = summary;
    s["bad_steps"] = state.bad_steps;
    if (prediction) prediction->add_to_summary(s);
    add_allocated_peaks(s);
    if (graph) s["cuda_graph_replays"] = graph->replays();  // steps run as a replay of the captured step
    s["status"] = result.stop_signal ? "stopped" : "completed";
    if (result.stop_signal) s["stop_signal"] = result.stop_signal;
    s["data_sources"] = nlohmann::json::array();
    for (const auto& u : train_loader->source_use(state.iteration))
      s["data_sources"].push_back({{"path", u.path}, {"weight", u.weight}, {"tokens", u.tokens}, {"epochs", u.epochs}});
    run_log->set_summary(s);
    run_log->flush(/*force=*/true);
    result.tokens_per_sec = summary.value("tokens_per_sec", 0.0);
    result.run_log_path = run_log->path();
    if (!result.stop_signal) export_model();  // a stopped run is not the finished model (collective under FSDP)
    rt.watchdog().idle();
    return result;
  }
};

Trainer::Trainer(const Config& config, Runtime& rt) {
  try {
    impl_ = std::make_unique<Impl>(config, rt);
  } catch (...) {
    rt.watchdog().idle();  // a refused start-up is not a stall (tests construct many trainers in one process)
    throw;
  }
}
Trainer::~Trainer() {
  if (impl_) impl_->rt.watchdog().idle();
}

TrainResult Trainer::run() {
  try {
    return run_loop();
  } catch (const c10::Error& e) {
    impl_->run_log->record_failure(impl_->rt.rank(), e.what_without_backtrace());
    throw;
  } catch (const std::exception& e) {
    impl_->run_log->record_failure(impl_->rt.rank(), e.what());
    throw;
  }
}

// The loop, top to bottom: step, record, console, evaluate, checkpoint, stop.
TrainResult Trainer::run_loop() {
  auto& m = *impl_;
  const Config& cfg = m.cfg;
  if (cfg.eval_only) return m.evaluate_only();
  TrainResult result;
  Console console(m.state.iteration, cfg.max_iters);
  StepProfiler profiler(cfg, m.rt.rank(), m.device);          // profile_steps: out_dir/profile/
  for (int64_t iter = m.state.iteration; iter < cfg.max_iters; ++iter) {
    console.bar().step_started(iter);                         // a long step shows its time on a terminal
    profiler.before_step(iter);
    m.train_step(iter);                                       // queued: nothing waits on the device
    profiler.after_step(iter);
    m.state.iteration = iter + 1;
    const bool last = iter + 1 == cfg.max_iters;
    const bool eval = (iter + 1) % cfg.eval_interval == 0 || last;
    // A log point: the device is waited for once and every step since the last
    // one recorded (run log, self-check failures, max_bad_steps, console).
    // Before an evaluation or a checkpoint too: they read what the steps did.
    if (iter % cfg.log_interval == 0 || eval || m.checkpoints->interval_due(m.state.iteration) || m.pending_full())
      m.record_pending(console);
    console.bar().update(iter + 1);
    if (eval)
      m.evaluate_and_checkpoint(result, console);             // checkpoint when val improved
    else
      m.run_log->flush();
    m.checkpoints->after_iteration(m.state.iteration, m.last_step_bad);  // checkpoint_interval (due: recorded)
    result.iterations = iter + 1 - (m.resumed ? m.resumed->state.iteration : 0);
    if (m.stop_on_signal(result, console)) break;             // SIGUSR1/SIGTERM: checkpoint, exit 124
  }
  console.bar().finish();
  return m.finish_run(result);
}

std::string format_run_end(const TrainResult& r, const Config& cfg) {
  const std::string log_path = r.run_log_path.empty() ? "" : ", run log " + r.run_log_path;
  if (cfg.eval_only)
    return fmt::format("done: eval only (iteration {}): train loss {:.4f}, val loss {:.4f}{}", r.evaluated_at,
                       r.final_train_loss, r.final_val_loss, log_path);
  if (r.iterations == 0 && !r.stop_signal)
    return fmt::format("no iteration ran (max_iters={}): nothing was trained or evaluated{}", cfg.max_iters,
                       r.run_log_path.empty() ? "" : "; run log " + r.run_log_path);
  const std::string head = r.stop_signal ? fmt::format("stopped by signal {}", r.stop_signal) : "done";
  const std::string eval = r.evaluated_at < 0
                               ? fmt::format("no eval yet (eval_interval={})", cfg.eval_interval)
                               : fmt::format("final train loss {:.4f}, val loss {:.4f} (eval at iteration {})",
                                             r.final_train_loss, r.final_val_loss, r.evaluated_at);
  return fmt::format("{}: {} iterations, {}, {:.0f} tokens/s{}", head, r.iterations, eval, r.tokens_per_sec,
                     log_path);
}

}  // namespace llmtrain
