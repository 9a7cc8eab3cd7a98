// Runtime: the MPI process environment of one rank (rank, world, local rank,
// device, threads) and the rule that an error on one rank ends the whole job.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "llmtrain/core/options.hpp"  // defines: DeviceKind

namespace llmtrain {

class FailureListener;
class RunObserver;
class Watchdog;

class Runtime {
 public:
  // MPI_Init_thread; checks the launch against Slurm (see check_launch).
  Runtime(int& argc, char**& argv);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }   // rank among the ranks of this node
  int local_size() const { return local_size_; }
  int num_nodes() const { return num_nodes_; }
  bool is_root() const { return rank_ == 0; }
  const std::string& hostname() const { return hostname_; }
  int mpi_thread_level() const { return thread_level_; }
  std::string mpi_version() const;

  // Device for `want` (the config's device: auto|cpu|cuda), as choose_device
  // decides from what this node has; its refusals are thrown as Error (one line).
  // Collective over the ranks (they count the node's GPUs together) unless
  // `want` is cpu. Also sets LibTorch's intra-op threads (`num_threads`, 0 =
  // cores / local ranks). Call once, after the config is known.
  torch::Device setup_device(DeviceKind want, int64_t num_threads);
  torch::Device device() const { return device_; }
  int num_threads() const { return num_threads_; }
  std::string device_name() const;  // "cpu (AMD EPYC ...)" or the GPU name
  // device_name() of every rank, in rank order (collective: every rank calls it).
  std::vector<std::string> all_device_names() const;
  // hostname() of every rank, in rank order (collective).
  std::vector<std::string> all_hostnames() const;

  void barrier() const;
  // This rank's watchdog (distributed/watchdog.hpp): started by the trainer with
  // collective_timeout_s, told what the rank is doing, stopped before MPI_Finalize.
  Watchdog& watchdog() const { return *watchdog_; }
  // SIGUSR1 (Slurm's warning before the time limit / pre-emption, forwarded by
  // jobs/common.sh) or SIGTERM received by this process: the trainer ends the
  // iteration it is in, writes its run log and stops. 0 when none.
  static int stop_signal();
  // The stop signal seen by any rank (0 = none; SIGTERM wins over SIGUSR1), so
  // that all ranks stop after the same iteration. Collective: a host allreduce
  // over MPI, off the GPU's path (no device tensor, no device read).
  int stop_signal_any_rank() const;
  // Ends every rank of the job with `code` (MPI_Abort); used after an error.
  [[noreturn]] static void abort(int code);

  // The run's record of its own end (rank 0 writes it; see failure_listener.hpp):
  // `observer->on_failure` is called on rank 0 for a fatal error on any rank
  // (reported through report_failure, which run_main does), `on_signal` once
  // when a stop signal reaches rank 0's process. Not owned; nullptr removes it
  // (after which it is no longer called).
  void set_observer(RunObserver* observer);
  void report_failure(const std::string& message);

 private:
  int rank_ = 0, world_size_ = 1, local_rank_ = 0, local_size_ = 1, num_nodes_ = 1;
  int thread_level_ = 0;
  int num_threads_ = 1;
  std::string hostname_;
  torch::Device device_{torch::kCPU};
  std::unique_ptr<FailureListener> listener_;
  std::unique_ptr<Watchdog> watchdog_;
};

// Checks that MPI's world size matches the Slurm allocation: SLURM_NTASKS ranks
// started as SLURM_NTASKS singletons of world size 1 (srun without --mpi=pmix)
// is refused with an explanation. Returns an empty string when fine, else the
// message. A rank of a world > 1 whose Slurm task id (SLURM_PROCID) is not its
// rank was started by an MPI launcher's daemon (mpirun across nodes runs its
// daemons as a Slurm step of one task per node): that step's SLURM_NTASKS
// counts daemons, not ranks, so such a rank does not check; rank 0, started
// from the batch shell, does. Exposed for tests; LLMTRAIN_SKIP_SLURM_CHECK=1
// disables it.
std::string check_launch(int world_size, int rank, const std::function<const char*(const char*)>& getenv_fn);

// Where one rank runs, decided from what its node has (pure: the tests give it
// any device count).
//   want            the config's device (auto | cpu | cuda)
//   built_with_cuda this llmtrain was built with CUDA (LLMTRAIN_WITH_CUDA)
//   visible_gpus    CUDA devices this process sees
//   node_gpus       distinct GPUs the ranks of this node see together: the node's
//                   GPUs when every rank sees all of them (srun's default),
//                   one per rank when Slurm gives each task its own
//                   (--gpus-per-task=1)
//   local_rank, local_size, hostname   this rank among the ranks of its node
// auto: CUDA when built with it and a GPU is visible, else the CPU (a build
// without CUDA always uses the CPU). cuda: a GPU or an error. On CUDA every rank
// needs a GPU of its own (NCCL refuses two ranks on one GPU with only "invalid
// usage"): more ranks on a node than its GPUs is an error naming the node, the
// counts and the fix. `error` empty: use `cuda` (and `index`), else refuse.
struct DeviceChoice {
  bool cuda = false;
  int index = 0;      // CUDA device index among the visible ones
  std::string error;  // one line; empty when the choice stands
};
DeviceChoice choose_device(DeviceKind want, bool built_with_cuda, int visible_gpus, int node_gpus, int local_rank,
                           int local_size, const std::string& hostname);

// Runs `body` with a Runtime; any exception on any rank prints its message
// (naming the rank) and aborts the whole job with exit code 1, so no rank hangs
// in a collective waiting for a dead peer. Returns body's exit code.
int run_main(int argc, char** argv, const std::function<int(Runtime&)>& body);

}  // namespace llmtrain
