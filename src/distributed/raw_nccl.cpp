#include "distributed/raw_nccl.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>

#include <fmt/format.h>

#include "llmtrain/core/error.hpp"

// The error strings of both libraries, on top of the numbers error.cpp prints.
#define RAW_NCCL(call)                                                                                   \
  do {                                                                                                   \
    const ncclResult_t rc_ = (call);                                                                     \
    if (rc_ != ncclSuccess)                                                                              \
      ::llmtrain::detail::throw_call_error("NCCL", #call, __FILE__, __LINE__,                            \
                                           fmt::format("{} ({})", ncclGetErrorString(rc_), int(rc_))); \
  } while (0)
#define RAW_CUDA(call)                                                                                   \
  do {                                                                                                   \
    const cudaError_t rc_ = (call);                                                                      \
    if (rc_ != cudaSuccess)                                                                              \
      ::llmtrain::detail::throw_call_error("CUDA", #call, __FILE__, __LINE__,                            \
                                           fmt::format("{} ({})", cudaGetErrorString(rc_), int(rc_))); \
  } while (0)

namespace llmtrain::nccl {

static_assert(sizeof(UniqueId) == sizeof(ncclUniqueId), "UniqueId must hold an ncclUniqueId");

namespace {
ncclDataType_t to_nccl(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f64: return ncclFloat64;
  }
  return ncclFloat32;
}
cudaStream_t st(Stream s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t ev(Event e) { return static_cast<cudaEvent_t>(e); }
ncclComm_t cm(void* c) { return static_cast<ncclComm_t>(c); }
}  // namespace

int version() {
  int v = 0;
  RAW_NCCL(ncclGetVersion(&v));
  return v;
}

std::string version_string() {
  const int v = version();
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    if (why) *why = cudaGetErrorString(rc);
    return -1;
  }
  return n;
}

UniqueId make_unique_id() {
  ncclUniqueId id;
  RAW_NCCL(ncclGetUniqueId(&id));
  UniqueId out;
  std::memcpy(out.bytes, &id, sizeof(id));
  return out;
}

Stream stream_create() {
  cudaStream_t s = nullptr;
  RAW_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
void stream_destroy(Stream s) { cudaStreamDestroy(st(s)); }
Event event_create() {
  cudaEvent_t e = nullptr;
  RAW_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}
void event_destroy(Event e) { cudaEventDestroy(ev(e)); }
void event_record(Event e, Stream s) { RAW_CUDA(cudaEventRecord(ev(e), st(s))); }
void stream_wait_event(Stream s, Event e) { RAW_CUDA(cudaStreamWaitEvent(st(s), ev(e), 0)); }
bool event_done(Event e) {
  const cudaError_t rc = cudaEventQuery(ev(e));
  if (rc == cudaErrorNotReady) return false;
  RAW_CUDA(rc);
  return true;
}
void event_synchronize(Event e) { RAW_CUDA(cudaEventSynchronize(ev(e))); }

Comm::Comm(const UniqueId& id, int rank, int world_size) {
  ncclUniqueId nid;
  std::memcpy(&nid, id.bytes, sizeof(nid));
  ncclComm_t c = nullptr;
  RAW_NCCL(ncclCommInitRank(&c, world_size, nid, rank));
  comm_ = c;
  rank_ = rank;
}

Comm::~Comm() {
  if (void* c = aborted_.load() ? nullptr : comm_) ncclCommDestroy(cm(c));
}

std::string Comm::async_error() const {
  if (!comm_ || aborted_.load()) return "";
  ncclResult_t err = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(cm(comm_), &err);
  if (rc != ncclSuccess) return fmt::format("ncclCommGetAsyncError failed: {}", ncclGetErrorString(rc));
  // ncclInProgress: a nonblocking call is still running, not an error.
  if (err == ncclSuccess || err == ncclInProgress) return "";
  return fmt::format("NCCL reported an asynchronous error on rank {}'s communicator: {} ({})", rank_,
                     ncclGetErrorString(err), static_cast<int>(err));
}

void Comm::abort() {
  if (!comm_ || aborted_.exchange(true)) return;
  ncclCommAbort(cm(comm_));
}

void Comm::allreduce_sum(void* buf, size_t count, DType t, Stream s) {
  RAW_NCCL(ncclAllReduce(buf, buf, count, to_nccl(t), ncclSum, cm(comm_), st(s)));
}
void Comm::broadcast(void* buf, size_t count, DType t, int root, Stream s) {
  RAW_NCCL(ncclBroadcast(buf, buf, count, to_nccl(t), root, cm(comm_), st(s)));
}
void Comm::reduce_scatter_sum(const void* in, void* out, size_t recv_count, DType t, Stream s) {
  RAW_NCCL(ncclReduceScatter(in, out, recv_count, to_nccl(t), ncclSum, cm(comm_), st(s)));
}
void Comm::all_gather(const void* in, void* out, size_t send_count, DType t, Stream s) {
  RAW_NCCL(ncclAllGather(in, out, send_count, to_nccl(t), cm(comm_), st(s)));
}

}  // namespace llmtrain::nccl
