// Errors and check macros: every failing MPI/HDF5/NCCL/CUDA call names the call,
// file:line and the rank it happened on.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include <fmt/format.h>  // LLMTRAIN_CHECK formats its message

namespace llmtrain {

// Base of all llmtrain errors; what() is a complete, user-facing sentence.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Bad configuration: key, value and what is allowed.
class ConfigError : public Error {
 public:
  using Error::Error;
};
// Bad input data (missing file, wrong dtype, token id out of range ...).
class DataError : public Error {
 public:
  using Error::Error;
};
// A feature asked for by the config that this build does not provide.
class NotBuiltError : public Error {
 public:
  using Error::Error;
};

namespace detail {
// This process's rank in MPI_COMM_WORLD, or -1 before MPI_Init / after finalize.
int world_rank_or_unknown();
[[noreturn]] void throw_call_error(const char* lib, const char* call, const char* file, int line,
                                   const std::string& what);
void check_mpi(int rc, const char* call, const char* file, int line);
int64_t check_h5(int64_t rc, const char* call, const char* file, int line);
void check_nccl(int rc, const char* call, const char* file, int line);
void check_cuda(int rc, const char* call, const char* file, int line);
}  // namespace detail

}  // namespace llmtrain

#define MPI_CHECK(call) ::llmtrain::detail::check_mpi((call), #call, __FILE__, __LINE__)
// H5_CHECK is defined once, in src/core/hdf5_util.hpp: it runs the call under the
// HDF5 lock (core/hdf5_mutex.hpp) and returns its value (an hid_t or herr_t).
#define NCCL_CHECK(call) ::llmtrain::detail::check_nccl(static_cast<int>(call), #call, __FILE__, __LINE__)
#define CUDA_CHECK(call) ::llmtrain::detail::check_cuda(static_cast<int>(call), #call, __FILE__, __LINE__)
// Precondition inside llmtrain: throws llmtrain::Error with the message.
#define LLMTRAIN_CHECK(cond, ...)                                                    \
  do {                                                                               \
    if (!(cond)) throw ::llmtrain::Error(::fmt::format(__VA_ARGS__));                \
  } while (0)
