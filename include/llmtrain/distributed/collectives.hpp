// Collectives: one interface over NCCL (CUDA builds) and MPI (CPU builds) for
// flat, contiguous tensors. Sums only; callers divide for averages.
#pragma once
#include <memory>
#include <string>

#include <torch/types.h>

namespace llmtrain {

class Runtime;

// A collective started without waiting. The buffers it was given must stay alive
// and untouched until wait() returns.
class CommWork {
 public:
  virtual ~CommWork() = default;
  // Blocks until the collective is complete (NCCL: orders the compute stream after
  // it instead of blocking the host). The host time spent here counts in the
  // issuing Collectives' waited_seconds().
  virtual void wait() = 0;
  // Drives progress (MPI needs calls to progress nonblocking collectives); true
  // once complete.
  virtual bool test() = 0;
};

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual std::string name() const = 0;  // "mpi" | "nccl"
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In place, sum over ranks.
  virtual void allreduce_sum(torch::Tensor& t) = 0;
  // In place from `root`.
  virtual void broadcast(torch::Tensor& t, int root) = 0;
  // in: world_size * n elements; out: n elements, the sum of every rank's
  // slice [rank*n, (rank+1)*n).
  virtual void reduce_scatter_sum(const torch::Tensor& in, torch::Tensor& out) = 0;
  // in: n elements; out: world_size * n elements, rank r's input at [r*n, (r+1)*n).
  virtual void all_gather(const torch::Tensor& in, torch::Tensor& out) = 0;

  // Nonblocking forms (MPI_Iallreduce / MPI_Ireduce_scatter_block; NCCL on its
  // own stream). The defaults run the blocking call and return finished work.
  virtual std::unique_ptr<CommWork> allreduce_sum_async(torch::Tensor& t);
  virtual std::unique_ptr<CommWork> reduce_scatter_sum_async(const torch::Tensor& in, torch::Tensor& out);
  // MPI_Iallgather / NCCL all-gather on its own stream (FSDP's prefetch,
  // ZeRO-1's parameter gather overlapped with the next shard's update).
  virtual std::unique_ptr<CommWork> all_gather_async(const torch::Tensor& in, torch::Tensor& out);

  // Collective calls issued so far, blocking and nonblocking: lets tests check
  // that a phase (an accumulation micro-step) communicates nothing.
  int64_t num_calls() const { return calls_; }

  // Host seconds spent blocked in communication so far: inside the blocking
  // calls and in CommWork::wait() of the work this object issued. Monotonic;
  // what it grows by over a stretch of work is that work's exposed (not
  // overlapped) communication, which is how the trainer's phases read it
  // (Metrics::phase). NCCL blocks the host in neither (the device waits), so
  // on GPUs this stays near 0. Read and advanced on the issuing thread only.
  double waited_seconds() const { return waited_s_; }

  // The device's side of the same (NCCL on CUDA): each CommWork::wait() puts a
  // pair of timing events on the caller's stream around its dependency on the
  // collective, and the time between them is how long that stream stood still
  // waiting for it: the compute stream's exposed communication. Counted from
  // reset_device_waits(); device_wait_seconds(from, to) sums waits [from, to)
  // and may be read only after a device synchronization. 0 where the host
  // waits itself (MPI: waited_seconds() is the whole truth there).
  virtual int64_t device_waits() const { return 0; }
  virtual double device_wait_seconds(int64_t from, int64_t to) const {
    (void)from;
    (void)to;
    return 0.0;
  }
  virtual void reset_device_waits() {}

 protected:
  int64_t calls_ = 0;
  double waited_s_ = 0;  // implementations add to it (distributed/timed_wait.hpp)
};

// How the MPI implementation runs its nonblocking forms: on a communication
// thread that calls the blocking collective (buffers up to 32 MiB; larger ones
// and builds without MPI_THREAD_MULTIPLE use the nonblocking collectives), or
// as MPI nonblocking collectives (MPI_Iallreduce, ...) that progress when
// test() or wait() call into MPI. Ignored by NCCL. The thread reaches the
// blocking call's bandwidth, but its spinning competes with compute for the
// rank's cores: on 2 shared cores the trainer ran faster with nonblocking, the
// default (figures in docs/scaling.md).
enum class MpiAsync { comm_thread, nonblocking };

// NCCL on a CUDA device (when built with CUDA), MPI otherwise.
std::unique_ptr<Collectives> make_collectives(const Runtime& rt, torch::Device device,
                                              MpiAsync mpi_async = MpiAsync::nonblocking);

}  // namespace llmtrain
