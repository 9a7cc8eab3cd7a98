// Named fault points (RocksDB's TEST_SYNC_POINT, etcd's gofail failpoints):
// the code names the places where a test may make it fail, and only this
// injector decides whether a fault strikes there. No step or checkpoint code
// reads the environment to fail on purpose.
//
// A test arms points in-process (`fault::arm`), or, for a whole program under
// mpirun, through the environment, read once by this injector on first use:
//   LLMTRAIN_TEST_NAN_AT=5,6,7              nan_loss at those iterations, every rank
//   LLMTRAIN_TEST_FAIL_AT=<rank>:<iter>     fail_iteration: that rank throws at that iteration
//   LLMTRAIN_TEST_ITER_SLEEP_MS=<ms>        iteration_sleep: every iteration that much longer
//   LLMTRAIN_TEST_KILL_DURING_SAVE=<rank>:<iter>
//                                           kill_during_save: that rank SIGKILLs itself half
//                                           way through writing that iteration's checkpoint
//   LLMTRAIN_TEST_DISK_FULL_DURING_SAVE=<rank>:<iter>
//                                           disk_full_during_save: that rank fills the checkpoint
//                                           directory's file system (a ballast file, written until
//                                           ENOSPC) after the header of that iteration's checkpoint,
//                                           before its tensors;
//                                           the ballast is removed once the save has failed
//   LLMTRAIN_TEST_SLOW_LOSS_REDUCE=<rank>:<ms>
//                                           slow_loss_reduce: that rank sleeps that long before
//                                           the loss allreduce of every iteration (the others
//                                           wait in it: their exposed communication)
//   LLMTRAIN_TEST_KERNEL_WRONG=<k>          kernel_wrong_output: the CPU twin of fused kernel k
//                                           (kernels::Op's index) adds 1 to its output's first
//                                           element (the start-up self-check's fallback)
#pragma once
#include <cstdint>
#include <set>

namespace llmtrain::fault {

enum class Point {
  nan_loss,          // the loss of an iteration becomes NaN (a diverging run)
  fail_iteration,    // an exception at the start of an iteration, on one rank
  iteration_sleep,   // every iteration takes `value` ms longer (a slow run)
  kill_during_save,  // SIGKILL half way through a checkpoint's tensors
  disk_full_during_save,  // the disk fills up during a checkpoint's save (a real ENOSPC)
  slow_loss_reduce,  // one rank arrives `value` ms late at every iteration's loss allreduce
  kernel_wrong_output,    // a fused kernel's CPU twin computes a wrong value (`value`: which kernel)
};
constexpr int kNumPoints = 7;

// Where a point strikes: on `rank` (-1: every rank) at the listed iterations
// (empty: every iteration); `value` is the point's argument (iteration_sleep: ms,
// kernel_wrong_output: the kernel's index).
struct Arm {
  int rank = -1;
  std::set<int64_t> iterations;
  int64_t value = 0;
};

// The point's name as messages and the environment variables say it
// ("LLMTRAIN_TEST_FAIL_AT" for fail_iteration, ...).
const char* env_name(Point p);

void arm(Point p, Arm a);
void disarm(Point p);
void disarm_all();

// Does `p` strike on `rank` at `iteration`? False unless armed.
bool hit(Point p, int rank, int64_t iteration);
// The armed point's value (0 when not armed).
int64_t value(Point p);

}  // namespace llmtrain::fault
