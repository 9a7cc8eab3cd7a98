// Private: NCCL and the CUDA runtime on raw device pointers and opaque stream /
// event handles, without LibTorch. Built as its own object library whenever NCCL
// is found, so CPU-only CI compiles and links the NCCL path; the torch-facing
// NcclCollectives (collectives_cuda.cpp) sits on top in CUDA builds.
#pragma once
#include <atomic>
#include <cstddef>
#include <string>

namespace llmtrain::nccl {

enum class DType { f32, bf16, f64 };

// ncclGetVersion, e.g. 22807 for 2.28.7.
int version();
// "2.28.7"
std::string version_string();
// cudaGetDeviceCount; -1 when there is no driver or device (the message in `why`).
int cuda_device_count(std::string* why = nullptr);

// ncclUniqueId as bytes: made by rank 0, sent to the others over MPI_Bcast.
struct UniqueId {
  char bytes[128];
};
UniqueId make_unique_id();

// Opaque CUDA handles (cudaStream_t / cudaEvent_t).
using Stream = void*;
using Event = void*;
Stream stream_create();  // non-blocking with respect to the legacy default stream
void stream_destroy(Stream s);
Event event_create();    // timing disabled
void event_destroy(Event e);
void event_record(Event e, Stream s);
void stream_wait_event(Stream s, Event e);
bool event_done(Event e);  // cudaEventQuery
void event_synchronize(Event e);

// One NCCL communicator; calls are enqueued on `stream` and return at once.
class Comm {
 public:
  Comm(const UniqueId& id, int rank, int world_size);  // ncclCommInitRank; cudaSetDevice first
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  void allreduce_sum(void* buf, size_t count, DType t, Stream s);
  void broadcast(void* buf, size_t count, DType t, int root, Stream s);
  // in: world * recv_count elements; out: recv_count.
  void reduce_scatter_sum(const void* in, void* out, size_t recv_count, DType t, Stream s);
  // in: send_count elements; out: world * send_count.
  void all_gather(const void* in, void* out, size_t send_count, DType t, Stream s);

  // ncclCommGetAsyncError (safe from another thread): "" while healthy, else
  // NCCL's error string (a peer died, a network error, ...).
  std::string async_error() const;
  // ncclCommAbort: ends every operation on the communicator so no kernel waits
  // forever (the watchdog's last step before MPI_Abort). The communicator is gone after it.
  void abort();

 private:
  void* comm_ = nullptr;  // ncclComm_t
  int rank_ = 0;
  std::atomic<bool> aborted_{false};
};

}  // namespace llmtrain::nccl
