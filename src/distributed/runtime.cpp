#include "llmtrain/distributed/runtime.hpp"

#include <malloc.h>
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "core/mpi_util.hpp"
#include <torch/torch.h>
#ifdef LLMTRAIN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "llmtrain/core/error.hpp"
#include "llmtrain/core/log.hpp"
#include "distributed/failure_listener.hpp"
#include "llmtrain/distributed/watchdog.hpp"

namespace llmtrain {

std::string check_launch(int world_size, int rank, const std::function<const char*(const char*)>& env) {
  const char* skip = env("LLMTRAIN_SKIP_SLURM_CHECK");
  if (skip && std::string(skip) == "1") return "";
  if (!env("SLURM_JOB_ID")) return "";
  const char* procid = env("SLURM_PROCID");
  if (world_size > 1 && procid && std::atoi(procid) != rank) return "";
  const char* ntasks = env("SLURM_NTASKS");
  if (!ntasks) ntasks = env("SLURM_NPROCS");
  if (!ntasks) return "";
  const int expected = std::atoi(ntasks);
  if (expected <= 0 || expected == world_size) return "";
  if (world_size == 1)
    return fmt::format(
        "this process sees an MPI world of 1 rank, but the Slurm job has SLURM_NTASKS={}: the tasks were "
        "started as {} independent singletons that would each train alone. Launch through MPI: "
        "`srun --mpi=pmix llmtrain ...` (check `srun --mpi=list`) or `mpirun -np $SLURM_NTASKS llmtrain ...` "
        "inside the allocation. (LLMTRAIN_SKIP_SLURM_CHECK=1 skips this check.)",
        expected, expected);
  return fmt::format(
      "MPI world size is {} but the Slurm job has SLURM_NTASKS={}. Start one rank per task "
      "(`srun --mpi=pmix` or `mpirun -np $SLURM_NTASKS`), or set LLMTRAIN_SKIP_SLURM_CHECK=1 if the "
      "mismatch is intended.",
      world_size, expected);
}

namespace {
std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) { g_stop_signal.store(sig); }
}  // namespace

int Runtime::stop_signal() { return g_stop_signal.load(); }

namespace {
// Open MPI's MPI-IO (ompio) loads a shared-file-pointer component at every
// MPI_File_open, which HDF5's MPI-IO driver calls for every shard read, every
// llmtrain-prepare output and every checkpoint save. Its `sm` component keeps a
// machine-wide POSIX semaphore named after the file's basename
// (/dev/shm/sem.OMPIO_<basename>); a process killed while holding it (SIGKILL at a
// time limit, the OOM killer) leaves it at 0, and from then on every open of a file
// of that name on the node blocks for ever, SIGTERM included (issue 49). llmtrain
// never uses shared file pointers, so the component is turned off here, in the
// process, before MPI_Init reads its parameters: this holds under srun, mpirun or
// any script. An explicit OMPI_MCA_sharedfp (from the environment or `mpirun --mca
// sharedfp ...`) is left as it is; other MPI libraries ignore the variable.
void turn_off_openmpi_sharedfp_sm() { setenv("OMPI_MCA_sharedfp", "^sm", /*overwrite=*/0); }
}  // namespace

Runtime::Runtime(int& argc, char**& argv) {
  // Stop requests are handled between iterations instead of killing the process
  // mid-step (SIGUSR1's default action would), so nothing written is lost.
  std::signal(SIGUSR1, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);

  // Big per-step tensors (logits and their gradients) would otherwise be mmapped
  // and returned to the kernel every step: keep freed memory in the process.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);

  turn_off_openmpi_sharedfp_sm();
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
  thread_level_ = provided;
  // Errors come back as codes and go through MPI_CHECK instead of aborting silently.
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  log::set_rank(rank_, rank_ == 0);

  MPI_Comm local = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  MPI_CHECK(MPI_Comm_rank(local, &local_rank_));
  MPI_CHECK(MPI_Comm_size(local, &local_size_));
  MPI_CHECK(MPI_Comm_free(&local));
  int is_leader = local_rank_ == 0 ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(&is_leader, &num_nodes_, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));

  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  hostname_ = host;
  watchdog_ = std::make_unique<Watchdog>(rank_, world_size_, provided >= MPI_THREAD_MULTIPLE);

  const std::string launch = check_launch(world_size_, rank_, [](const char* k) { return std::getenv(k); });
  if (!launch.empty()) throw Error(launch);
  listener_ = std::make_unique<FailureListener>(rank_);
  // A watchdog timeout is a failure like any other: into the run log before the abort.
  watchdog_->set_before_abort([this](const std::string& message) { report_failure(message); });
}

Runtime::~Runtime() {
  if (watchdog_) watchdog_->stop();  // says goodbye to the other ranks while MPI still works
  listener_.reset();  // before MPI_Finalize
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

std::string Runtime::mpi_version() const {
  char v[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(v, &len);
  std::string s(v, len);
  const auto nl = s.find_first_of("\n,");
  return nl == std::string::npos ? s : s.substr(0, nl);
}

namespace {
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto c = line.find(':');
      if (c != std::string::npos) return line.substr(c + 2);
    }
  return "unknown CPU";
}
}  // namespace

DeviceChoice choose_device(DeviceKind want, bool built_with_cuda, int visible_gpus, int node_gpus, int local_rank,
                           int local_size, const std::string& hostname) {
  DeviceChoice c;
  if (want == DeviceKind::cpu) return c;
  if (!built_with_cuda || visible_gpus <= 0) {
    if (want == DeviceKind::cuda)
      c.error = fmt::format(
          "device=cuda was requested on node {}, but {}", hostname,
          built_with_cuda ? "no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the job's --gpus)"
                          : "this llmtrain was built without CUDA (LLMTRAIN_WITH_CUDA=OFF)");
    return c;  // auto: the CPU
  }
  const int gpus = std::max(node_gpus, visible_gpus);
  if (local_size > gpus) {
    c.error = fmt::format(
        "{} ranks on node {} for {} GPU(s) (device={}): NCCL needs a GPU of its own for each rank. Start one rank "
        "per GPU (Slurm: --ntasks-per-node={} with --gpus-per-node={}; mpirun: -npernode {}), or train on the CPU "
        "with device=cpu",
        local_size, hostname, gpus, want == DeviceKind::automatic ? "auto" : "cuda", gpus, gpus, gpus);
    return c;
  }
  c.cuda = true;
  c.index = local_rank % visible_gpus;  // every rank sees all: its own; one each: index 0
  return c;
}

namespace {
// PCI bus ids of the CUDA devices this process sees, ';'-separated.
std::string visible_gpu_ids([[maybe_unused]] int visible) {
  std::string ids;
#ifdef LLMTRAIN_WITH_CUDA
  for (int i = 0; i < visible; ++i) {
    char bus[32] = {0};
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), i));
    ids += std::string(bus) + ";";
  }
#endif
  return ids;
}

// Distinct GPUs the ranks of this node see together (collective over the world).
int count_node_gpus(const std::string& my_ids, int rank) {
  MPI_Comm local = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
  std::set<std::string> ids;
  for (const auto& of_rank : mpi::allgather_strings(my_ids, local)) {
    size_t at = 0;
    for (size_t end; (end = of_rank.find(';', at)) != std::string::npos; at = end + 1)
      ids.insert(of_rank.substr(at, end - at));
  }
  MPI_CHECK(MPI_Comm_free(&local));
  return static_cast<int>(ids.size());
}
}  // namespace

torch::Device Runtime::setup_device(DeviceKind want, int64_t num_threads) {
#ifdef LLMTRAIN_WITH_CUDA
  constexpr bool built_with_cuda = true;
#else
  constexpr bool built_with_cuda = false;  // a CUDA torch underneath changes nothing: no NCCL, no CUDA kernels
#endif
  const int visible =
      built_with_cuda && torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  // Counted by every rank together (before any rank can refuse), so no rank is
  // left waiting in the count.
  const int node_gpus = (want != DeviceKind::cpu && built_with_cuda) ? count_node_gpus(visible_gpu_ids(visible), rank_)
                                                                     : visible;
  const DeviceChoice choice =
      choose_device(want, built_with_cuda, visible, node_gpus, local_rank_, local_size_, hostname_);
  if (!choice.error.empty()) throw Error(choice.error);
  if (choice.cuda) {
#ifdef LLMTRAIN_WITH_CUDA
    CUDA_CHECK(cudaSetDevice(choice.index));
#endif
    device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(choice.index));
  } else {
    device_ = torch::Device(torch::kCPU);
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  num_threads_ = num_threads > 0 ? static_cast<int>(num_threads) : std::max(1, cores / std::max(1, local_size_));
  // The torch wheel's CPU math is MKL + oneDNN on OpenMP: set_num_threads sets
  // all three (printed at start-up as the run log's cpu_math).
  torch::set_num_threads(num_threads_);
  return device_;
}

std::string Runtime::device_name() const {
#ifdef LLMTRAIN_WITH_CUDA
  if (device_.is_cuda()) {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device_.index()));
    return prop.name;
  }
#endif
  return "cpu (" + cpu_model() + ")";
}


std::vector<std::string> Runtime::all_device_names() const {
  return mpi::allgather_strings(device_name(), MPI_COMM_WORLD);
}
std::vector<std::string> Runtime::all_hostnames() const { return mpi::allgather_strings(hostname_, MPI_COMM_WORLD); }

void Runtime::barrier() const { MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }

int Runtime::stop_signal_any_rank() const {
  const int mine = stop_signal();
  int code = mine == SIGTERM ? 2 : mine == SIGUSR1 ? 1 : 0;  // SIGTERM wins
  int seen = 0;
  MPI_CHECK(MPI_Allreduce(&code, &seen, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  return seen == 2 ? SIGTERM : seen == 1 ? SIGUSR1 : 0;
}

void Runtime::set_observer(RunObserver* observer) {
  if (listener_) listener_->set_observer(observer);
}

void Runtime::report_failure(const std::string& message) {
  if (listener_) listener_->report(message);
}

void Runtime::abort(int code) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

namespace {
// After an error: every rank of a job ends (MPI_Abort), and a single process
// leaves without MPI_Finalize, whose library clean-up can trip over what the
// error left half done (an HDF5 file whose close failed on a full disk).
[[noreturn]] void fail_fast(Runtime* rt) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (rt && rt->world_size() > 1) Runtime::abort(1);
  std::_Exit(1);
}
}  // namespace

int run_main(int argc, char** argv, const std::function<int(Runtime&)>& body) {
  std::unique_ptr<Runtime> rt;
  try {
    rt = std::make_unique<Runtime>(argc, argv);
    const int code = body(*rt);
    rt.reset();
    return code;
  } catch (const c10::Error& e) {
    // LibTorch's own message, without its C++ backtrace of library frames.
    log::write_err_all(fmt::format("error: {}", e.what_without_backtrace()));
    if (rt) rt->report_failure(e.what_without_backtrace());
    fail_fast(rt.get());
  } catch (const std::exception& e) {
    log::write_err_all(fmt::format("error: {}", e.what()));
    if (rt) rt->report_failure(e.what());
    fail_fast(rt.get());
  }
}

}  // namespace llmtrain
