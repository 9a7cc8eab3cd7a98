#include "llmtrain/core/error.hpp"

#include <fmt/format.h>
#include <hdf5.h>
#include <mpi.h>

#include "core/hdf5_util.hpp"  // defines: H5_LOCKED

namespace llmtrain::detail {

int world_rank_or_unknown() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return -1;
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

void throw_call_error(const char* lib, const char* call, const char* file, int line, const std::string& what) {
  throw Error(fmt::format("{} call failed on rank {}: {} at {}:{}: {}", lib, world_rank_or_unknown(), call,
                          file, line, what));
}

void check_mpi(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw_call_error("MPI", call, file, line, std::string(msg, len));
}

namespace {
// The outermost and innermost messages of HDF5's error stack, e.g.
// "unable to open file (... No such file or directory)".
struct H5Messages { std::string outer, inner; };
herr_t walk_h5(unsigned n, const H5E_error2_t* e, void* data) {
  auto* m = static_cast<H5Messages*>(data);
  if (!e->desc) return 0;
  if (n == 0) m->outer = e->desc;
  m->inner = e->desc;
  return 0;
}
}  // namespace

int64_t check_h5(int64_t rc, const char* call, const char* file, int line) {
  if (rc >= 0) return rc;
  H5Messages m;
  H5_LOCKED(H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_h5, &m));  // H5_CHECK holds it already (recursive)
  H5_LOCKED(H5Eclear2(H5E_DEFAULT));
  std::string msg = m.outer;
  if (!m.inner.empty() && m.inner != m.outer) msg += " (" + m.inner + ")";
  throw_call_error("HDF5", call, file, line, msg.empty() ? "negative return value" : msg);
}

void check_nccl(int rc, const char* call, const char* file, int line) {
  if (rc == 0) return;
  throw_call_error("NCCL", call, file, line, fmt::format("ncclResult_t {}", rc));
}

void check_cuda(int rc, const char* call, const char* file, int line) {
  if (rc == 0) return;
  throw_call_error("CUDA", call, file, line, fmt::format("cudaError_t {}", rc));
}

}  // namespace llmtrain::detail
