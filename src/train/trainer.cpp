// Trainer: builds the parts of a run in a fixed order and runs the loop.
// Read Trainer::Impl::train_step first: one iteration, top to bottom.
#include "llmtrain/train/trainer.hpp"

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
#include "llmtrain/model/transformer.hpp"   // defines: Transformer, ModelConfig
#include "llmtrain/train/checkpoint.hpp"    // defines: Checkpointer, TrainState (HDF5 checkpoints, resume)
#include "llmtrain/train/eval_full.hpp"     // defines: evaluate_full (eval_full=True)
#include "llmtrain/train/metrics.hpp"       // defines: Metrics (phases, MFU, self-check)
#include "llmtrain/train/precision.hpp"     // defines: AutocastGuard, compute_dtype
#include "llmtrain/core/progress.hpp"      // defines: ProgressBar
#include "llmtrain/train/run_log.hpp"       // defines: RunLog, start-up block
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
  LrSchedule schedule;
  LossScaler scaler{false};
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<RunLog> run_log;
  // Checkpoints: the training state besides the tensors, and where it goes.
  std::unique_ptr<Checkpointer> checkpointer;
  std::vector<CheckpointParam> ckpt_params;  // ParamGroups order = named_parameters()
  TrainState state;                          // state.iteration = the next iteration to run
  std::optional<LoadedCheckpoint> resumed;
  int64_t last_saved_iteration = -1;
  int64_t consecutive_bad_steps = 0;
  nlohmann::json full_eval = nlohmann::json::object();  // the last eval_full's token counts

  Impl(const Config& c, Runtime& r) : cfg(c), rt(r), schedule(LrSchedule::from_config(c)) {
    // 0. the watchdog: from here on a rank that stops arriving ends the job
    rt.watchdog().start(WatchdogOptions::from_config(cfg));
    rt.watchdog().activity("start-up");
    // 1. device and precision
    device = rt.setup_device(cfg.device, cfg.num_threads);
    dtype = compute_dtype(cfg.dtype, device);
    scaler = LossScaler(dtype == torch::kHalf);  // float16 needs loss scaling; bfloat16 does not
    const std::string tf32 = enable_tf32(device);
    // 2. data: the index tells the vocabulary; the loader checks block_size against
    //    the shards before anything large is allocated
    data = read_data_info(cfg.data_dir);
    train_loader =
        std::make_unique<TokenLoader>(LoaderOptions::from_config(cfg), rt, Split::train, device, /*stream=*/0);
    check_split_at_startup(Split::val);  // now, not at the first evaluation after training work
    // 3. model, initialized identically on every rank from the seed
    mcfg = ModelConfig::from_config(cfg, data.vocab_size);
    if (mcfg.vocab_size < data.vocab_size)
      throw ConfigError(fmt::format("config key 'vocab_size' ({}) is smaller than the data's vocabulary ({} in {})",
                                    mcfg.vocab_size, data.vocab_size, cfg.data_dir));
    if (!cfg.export_hf.empty()) check_hf_export_target(cfg.export_hf, mcfg);  // refused before any work
    torch::manual_seed(cfg.seed);
    model = Transformer(mcfg);
    model->init_weights(static_cast<uint64_t>(cfg.seed));
    if (cfg.init_from.source == InitSource::hf) load_hf_checkpoint(*model, cfg.init_from.hf_dir);
    model->to(device);
    model->plan_attention(device, dtype);
    // 4. parallelism, applied from outside the model
    comm = make_collectives(rt, device);
    strategy = make_strategy(StrategyOptions::from_config(cfg), model, *comm);
    // 5. checkpoints: resume restores every stateful part through one file
    //    (weights and optimizer shards, iteration = schedule and data position,
    //    best val loss, loss scale, RNG)
    checkpointer = std::make_unique<Checkpointer>(cfg.out_dir, cfg.keep_last, rt);
    for (const auto& p : model->named_parameters()) ckpt_params.push_back({p.key(), p.value().sizes().vec()});
    state.best_val_loss = std::numeric_limits<double>::infinity();
    state.global_batch_sequences = cfg.global_batch_sequences(rt.world_size());
    state.block_size = cfg.block_size;
    state.seed = cfg.seed;
    if (cfg.init_from.source == InitSource::resume) resume();
    // 6. metrics and the run log (rank 0 writes)
    MetricsSetup setup;
    setup.flops_per_token = mcfg.flops_per_token();
    setup.flops_per_token_6n = mcfg.flops_per_token_6n();
    setup.tokens_per_iter = cfg.tokens_per_iter(rt.world_size());
    setup.num_devices = rt.world_size();
    setup.peak = resolve_peak(rt.device_name(), cfg.dtype, cfg.peak_tflops);
    setup.device = device;
    metrics = std::make_unique<Metrics>(setup);
    RunEnvironment env;
    env.world_size = rt.world_size();
    env.num_nodes = rt.num_nodes();
    env.hostname = rt.hostname();
    env.hostnames = rt.all_hostnames();
    env.device_names = rt.all_device_names();
    env.device_type = device.is_cuda() ? "cuda" : "cpu";
    env.threads_per_rank = rt.num_threads();
    env.attention_backend_used = to_string(model->attention_backend_used());
    env.attention_kernel = model->attention_kernel_used();
    env.precision = fmt::format("{}{}; {}", to_string(cfg.dtype),
                                scaler.enabled() ? " with dynamic loss scaling" : "", tf32);
    env.parallelism = fmt::format("{} over {} ({} B optimizer state on rank 0)", strategy->name(), comm->name(),
                                  strategy->optimizer_state_bytes());
    run_log = std::make_unique<RunLog>(cfg.out_dir, rt.is_root());
    auto startup = make_startup_info(cfg, mcfg, env, setup);
    if (resumed)
      startup["resumed_from"] = {{"checkpoint", resumed->path},
                                 {"iteration", resumed->state.iteration},
                                 {"world_size", resumed->world_size},
                                 {"strategy", resumed->strategy}};
    run_log->set_startup_info(std::move(startup));
    run_log->flush(/*force=*/true);
    // How the run's record survives its end: another rank's fatal error is
    // recorded here (rank 0) before the job is aborted, and a stop signal
    // flushes the log at once (mpirun kills the ranks about a second after
    // forwarding SIGTERM).
    rt.set_end_handlers([log = run_log.get()](int rank, const std::string& msg) { log->record_failure(rank, msg); },
                        [log = run_log.get()](int sig) {
                          log->add_event({{"kind", "signal"}, {"signal", sig},
                                          {"message", fmt::format("signal {} received; stopping after the "
                                                                  "current iteration with a checkpoint", sig)}});
                          log->flush(/*force=*/true);
                        });
    log::info("{}", format_startup_block(cfg, mcfg, env, setup));
    log::info("run log: {}", run_log->path());
  }

  ~Impl() { rt.set_end_handlers({}, {}); }

  // Loads the newest loadable checkpoint of out_dir: any world size and strategy
  // can continue what any other wrote; the same world size and strategy
  // continue bit-exactly.
  void resume() {
    resumed = checkpointer->load_latest(ckpt_params, *strategy);
    if (!resumed)
      throw ConfigError(fmt::format(
          "init_from=resume: no checkpoint in '{}' (runs write one at evaluations that improve val loss, "
          "with always_save_checkpoint=True, every checkpoint_interval iterations and on a stop signal)",
          checkpointer->dir()));
    const TrainState& s = resumed->state;
    state.iteration = s.iteration;
    state.best_val_loss = s.best_val_loss;
    state.bad_steps = s.bad_steps;
    if (scaler.enabled()) scaler.load_state(s.loss_scaler);
    last_saved_iteration = s.iteration;
    // The data position: the loader is a pure function of (seed, iteration, sample).
    train_loader->seek(s.iteration * cfg.gradient_accumulation_steps);
    if (s.global_batch_sequences != state.global_batch_sequences)
      log::warn("resuming at iteration {} with a global batch of {} sequences, the checkpoint's run used {}: the "
                "samples from here on are not the ones that run would have seen",
                s.iteration, state.global_batch_sequences, s.global_batch_sequences);
    if (s.block_size != cfg.block_size || s.seed != cfg.seed)
      log::warn("resuming with block_size {} and seed {}, the checkpoint's run used {} and {}: the data order "
                "differs from that run's",
                cfg.block_size, cfg.seed, s.block_size, s.seed);
    if (!resumed->rng_restored)
      log::info("the checkpoint was written by {} rank(s), this run has {}: random streams (dropout) start anew",
                resumed->world_size, rt.world_size());
    log::info("resumed from {} at iteration {} (written by {} on {} rank(s))", resumed->path, s.iteration,
              resumed->strategy, resumed->world_size);
  }

  // Saves the training state after state.iteration iterations (once per iteration).
  std::string save_checkpoint(const char* why) {
    const std::string dir_latest = checkpointer->latest_path();
    if (last_saved_iteration == state.iteration && !dir_latest.empty()) return dir_latest;
    state.loss_scaler = scaler.state();
    rt.watchdog().activity(fmt::format("checkpoint save after iteration {} ({})", state.iteration, why));
    const auto t0 = std::chrono::steady_clock::now();
    const std::string path = checkpointer->save(ckpt_params, *strategy, state, cfg.to_json());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    last_saved_iteration = state.iteration;
    run_log->add_checkpoint({{"iter", state.iteration}, {"path", path}, {"reason", why}, {"seconds", seconds}});
    log::info("checkpoint {} ({}, {:.2f} s)", path, why, seconds);
    return path;
  }

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

  // The stop signal seen by any rank (0 = none; SIGTERM wins over SIGUSR1): all
  // ranks stop after the same iteration.
  int stop_signal_any_rank() {
    rt.watchdog().activity("stop-signal check (allreduce)");
    const int mine = Runtime::stop_signal();
    auto t = torch::tensor({mine == SIGUSR1 ? 1.0 : 0.0, mine == SIGTERM ? 1.0 : 0.0},
                           torch::TensorOptions().dtype(torch::kDouble))
                 .to(device);
    comm->allreduce_sum(t);
    const auto seen = t.cpu();
    return seen[1].item<double>() > 0 ? SIGTERM : seen[0].item<double>() > 0 ? SIGUSR1 : 0;
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
    mean_over_ranks(0.0);  // a barrier through the run's collectives
  }

  // ---- TRAINING STEP BEGIN ----
  // One iteration: accumulate micro-batches, reduce, clip, step. The window
  // between start_iter and end_iter is bounded by device synchronizations.
  IterationMetrics train_step(int64_t iter) {
    rt.watchdog().iteration_begin(iter);
    rt.watchdog().activity(fmt::format("iteration {}: data, forward/backward", iter));
    if (fault::hit(fault::Point::fail_iteration, rt.rank(), iter))
      throw Error(fmt::format("injected failure at iteration {} ({})", iter,
                              fault::env_name(fault::Point::fail_iteration)));
    if (fault::hit(fault::Point::iteration_sleep, rt.rank(), iter))
      std::this_thread::sleep_for(std::chrono::milliseconds(fault::value(fault::Point::iteration_sleep)));
    sync_device(device);
    metrics->start_iter();
    strategy->take_exposed_comm_seconds();                    // drop waits from before (eval's FSDP gathers)
    const double lr = schedule.at(iter);
    const int64_t accum = cfg.gradient_accumulation_steps;
    torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device));
    for (int64_t micro = 0; micro < accum; ++micro) {
      Batch batch;
      {
        auto t = metrics->phase(Phase::data);
        batch = train_loader->next();                         // (B, T) x and y
      }
      auto t = metrics->phase(Phase::forward_backward);
      torch::Tensor loss;
      {
        AutocastGuard autocast(device, dtype);
        loss = model->loss(batch.x, batch.y) / static_cast<double>(accum);
      }
      if (fault::hit(fault::Point::nan_loss, rt.rank(), iter)) loss = loss * std::numeric_limits<double>::quiet_NaN();
      // float16: the loss is scaled so that small gradients survive; step() unscales.
      strategy->backward(scaler.enabled() ? loss * scaler.scale() : loss,
                         /*last_micro=*/micro + 1 == accum);  // DDP: reduces only on the last
      loss_sum += loss.detach().to(torch::kFloat);
    }
    charge_exposed_comm(Phase::forward_backward);             // FSDP: gathers not hidden by prefetch
    rt.watchdog().activity(fmt::format("iteration {}: gradient reduction", iter));
    {
      auto t = metrics->phase(Phase::communication);          // only what did not overlap
      strategy->finish_gradients();                           // gradients now averaged over ranks
    }
    charge_exposed_comm(Phase::communication);
    double grad_norm = 0;
    std::optional<GradNormStats> grad_stats;
    const double scale = scaler.scale();
    bool skipped = false;
    std::string bad;                                          // why this step is an anomaly ("" = it is not)
    const double loss = mean_over_ranks(loss_sum.item<double>());  // the same on every rank
    {
      auto t = metrics->phase(Phase::optimizer);
      rt.watchdog().activity(fmt::format("iteration {}: gradient norm, optimizer step, loss allreduce", iter));
      const double scaled_norm = strategy->grad_norm();       // global, across ranks and shards
      grad_norm = scaled_norm / scale;
      if (cfg.gradient_log_interval > 0 && iter % cfg.gradient_log_interval == 0)
        grad_stats = summarize_grad_norms(parameter_grad_norms(named_parameters(), scale), grad_norm, cfg.grad_clip);
      // Every rank sees the same loss and norm, so every rank takes the same branch.
      if (!std::isfinite(loss))
        bad = fmt::format("loss is {}", loss);
      else if (!std::isfinite(scaled_norm) && !scaler.enabled())
        bad = fmt::format("gradient norm is {}", scaled_norm);
      const bool finite = bad.empty() && std::isfinite(scaled_norm);
      // float16: a non-finite norm is the loss scale overflowing: halve it, no update.
      const bool take = scaler.update(finite ? scaled_norm : std::numeric_limits<double>::infinity()) && finite;
      if (take) {
        const bool clip = cfg.grad_clip > 0 && grad_norm > cfg.grad_clip;
        const double clip_coef = clip ? cfg.grad_clip / (grad_norm + 1e-6) : 1.0;
        strategy->step(lr, clip_coef / scale);                // AdamW (sharded: ZeRO-1/FSDP)
      } else {
        strategy->skip_step();                                // no update on any rank
        skipped = true;
      }
    }
    charge_exposed_comm(Phase::optimizer);                    // sharded: norm allreduce, parameter gathers
    sync_device(device);
    IterationMetrics it = metrics->end_iter(iter, loss, lr, grad_norm, grad_stats);
    rt.watchdog().iteration_done(it.dt_ms / 1e3);
    rt.watchdog().activity(fmt::format("after iteration {}: run log, evaluation, checkpoint", iter));
    if (scaler.enabled()) it.loss_scale = scale;
    it.skipped_step = skipped;
    it.bad_step = bad;
    return it;
  }
  // ---- TRAINING STEP END ----

  // The strategy's waits on communication inside `phase` count as
  // communication (for the communication phase itself this moves nothing).
  void charge_exposed_comm(Phase phase) {
    metrics->move_seconds(phase, Phase::communication, strategy->take_exposed_comm_seconds());
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

TrainResult Trainer::run_loop() {
  auto& m = *impl_;
  const Config& cfg = m.cfg;
  TrainResult result;
  if (cfg.eval_only) {
    const int64_t at = m.state.iteration;  // the loaded checkpoint's
    result.final_train_loss = m.evaluate(Split::train);
    result.final_val_loss = m.evaluate(Split::val);
    const std::string what = m.resumed ? m.resumed->path : to_string(cfg.init_from);
    log::info("eval of {} (iteration {}): train loss {:.4f}, val loss {:.4f}", what, at, result.final_train_loss,
              result.final_val_loss);
    m.run_log->add_eval(m.eval_entry(at, result.final_train_loss, result.final_val_loss));
    m.run_log->flush(/*force=*/true);
    result.iterations = 0;
    result.run_log_path = m.run_log->path();
    m.export_model();
    return result;
  }
  ProgressBar bar(m.state.iteration, cfg.max_iters, ProgressBar::detect_mode());
  // Console lines go around the bar; with the bar off (LLMTRAIN_PROGRESS=off, or
  // not rank 0) they are plain rank-0 lines.
  auto say = [&bar](const std::string& line) {
    if (bar.mode() == ProgressBar::Mode::off)
      log::info("{}", line);
    else
      bar.print_line(line);
  };
  for (int64_t iter = m.state.iteration; iter < cfg.max_iters; ++iter) {
    const IterationMetrics it = m.train_step(iter);
    m.state.iteration = iter + 1;
    m.run_log->add_iteration(it.to_json());
    for (const auto& e : it.errors) {
      m.run_log->add_error(e);
      log::warn("self-check failed at iter {}: {}", iter, e);
    }
    // A non-finite loss or gradient norm skipped its update on every rank; too
    // many in a row means the run has diverged.
    if (!it.bad_step.empty()) {
      ++m.state.bad_steps;
      ++m.consecutive_bad_steps;
      const std::string msg = fmt::format("iteration {}: {}; the update was skipped on every rank ({} in a row, "
                                          "max_bad_steps = {})",
                                          iter, it.bad_step, m.consecutive_bad_steps, cfg.max_bad_steps);
      m.run_log->add_event({{"iter", iter}, {"kind", "bad_step"}, {"message", msg}});
      log::warn("{}", msg);
      if (m.consecutive_bad_steps >= cfg.max_bad_steps) {
        m.run_log->flush(/*force=*/true);
        const std::string good = m.checkpointer->latest_path();
        throw Error(fmt::format("training diverged: {} non-finite steps in a row up to iteration {} (lr {:.3e}); "
                                "the last good checkpoint is {}; lower learning_rate or raise warmup_iters and "
                                "resume from it (init_from=resume)",
                                m.consecutive_bad_steps, iter, it.lr,
                                good.empty() ? std::string("none (no checkpoint was written)") : good));
      }
    } else {
      m.consecutive_bad_steps = 0;
    }
    const bool last = iter + 1 == cfg.max_iters;
    if (iter % cfg.log_interval == 0 || last) say(format_iteration_line(it, cfg.max_iters));
    bar.update(iter + 1);
    if ((iter + 1) % cfg.eval_interval == 0 || last) {
      result.final_train_loss = m.evaluate(Split::train);
      result.final_val_loss = m.evaluate(Split::val);
      m.run_log->add_eval(m.eval_entry(iter + 1, result.final_train_loss, result.final_val_loss));
      say(fmt::format("eval at iter {}: train loss {:.4f}, val loss {:.4f}", iter + 1,
                                 result.final_train_loss, result.final_val_loss));
      // As the seeds: save when val improves, or at every evaluation if asked.
      const bool improved = result.final_val_loss < m.state.best_val_loss;
      if (improved) m.state.best_val_loss = result.final_val_loss;
      if (improved || cfg.always_save_checkpoint) m.save_checkpoint(improved ? "val loss improved" : "evaluation");
      m.run_log->flush(/*force=*/true);
    } else {
      m.run_log->flush();
    }
    // Not during a run of bad steps: the last checkpoint stays the last good state.
    if (cfg.checkpoint_interval > 0 && (iter + 1) % cfg.checkpoint_interval == 0 && it.bad_step.empty()) {
      m.save_checkpoint("checkpoint_interval");
      m.run_log->flush(/*force=*/true);
    }
    result.iterations = iter + 1 - (m.resumed ? m.resumed->state.iteration : 0);
    if (const int sig = m.stop_signal_any_rank()) {
      // Slurm's warning before the time limit (or a pre-emption): checkpoint and
      // leave with the requeue code; the requeued job resumes from here.
      result.stopped_by_signal = sig;
      result.checkpoint = m.save_checkpoint("stop signal");
      const std::string msg = fmt::format("stopped by signal {} after iteration {} of {}; checkpoint {} (resume "
                                          "with init_from=resume)",
                                          sig, iter + 1, cfg.max_iters, result.checkpoint);
      m.run_log->add_event({{"iter", iter + 1}, {"kind", "stopped"}, {"signal", sig}, {"message", msg}});
      say(msg);
      break;
    }
  }
  bar.finish();
  m.rt.watchdog().activity("end of the run: summary, run log");
  const auto summary = m.metrics->summary(cfg.warmup_report_iters);
  auto s = summary;
  s["bad_steps"] = m.state.bad_steps;
  s["status"] = result.stopped_by_signal ? "stopped" : "completed";
  if (result.stopped_by_signal) s["stop_signal"] = result.stopped_by_signal;
  m.run_log->set_summary(s);
  m.run_log->flush(/*force=*/true);
  result.tokens_per_sec = summary.value("tokens_per_sec", 0.0);
  result.run_log_path = m.run_log->path();
  if (!result.stopped_by_signal) m.export_model();  // a stopped run is not the finished model (collective under FSDP)
  m.rt.watchdog().idle();
  return result;
}

}  // namespace llmtrain
