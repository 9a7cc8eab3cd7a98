// Private: HDF5 handles and helpers shared by the token shards (data/) and the
// checkpoints (checkpoint/). hdf5.h stays out of the public headers.
#pragma once
#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>

#include "llmtrain/core/error.hpp"
#include "llmtrain/core/hdf5_mutex.hpp"

// Every HDF5 call holds the one HDF5 lock (core/hdf5_mutex.hpp): H5_CHECK (the
// only definition) runs the call and reads HDF5's error stack under the lock
// (detail::check_h5, core/error.hpp, names the call, file:line and rank);
// H5_LOCKED(expr) evaluates an unchecked HDF5 expression (predicates, sizes,
// closers) under it. A file that calls HDF5 includes this header
// (tests/core/check_hdf5_lock.py checks both).
#define H5_CHECK(call) \
  ::llmtrain::detail::hdf5_locked([&] { return ::llmtrain::detail::check_h5((call), #call, __FILE__, __LINE__); })
#define H5_LOCKED(...) ::llmtrain::detail::hdf5_locked([&] { return (__VA_ARGS__); })

namespace llmtrain::h5 {

// Closes an HDF5 id with the matching H5*close on scope exit.
class H5Id {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Id() = default;
  H5Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  H5Id(H5Id&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = -1; }
  H5Id& operator=(H5Id&& o) noexcept;
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  ~H5Id() { reset(); }
  void reset();
  // Closes now and returns the closer's status (files: H5Fclose reports the
  // last write-back errors, e.g. a full disk).
  herr_t close();
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

// HDF5 prints its error stack to stderr by default; H5_CHECK reports it instead.
void quiet_hdf5_once();
// File access list for the MPI-IO driver on `comm`.
H5Id make_mpio_fapl(MPI_Comm comm);
// ---- scalar attributes on a file, group or dataset ----
// Under MPI-IO every rank of the file's communicator writes the same value
// (parallel HDF5 wants metadata calls collective).
void write_attr(hid_t obj, const char* name, int64_t v);  // little-endian int64
void write_attr(hid_t obj, const char* name, double v);   // little-endian float64
// Fixed-length strings (no heap objects, so the bytes are deterministic):
// NUL-padded to max(1, size) bytes (checkpoints) or NUL-terminated in size + 1 (token shards).
enum class StrPad { nullpad, nullterm };
void write_attr(hid_t obj, const char* name, const std::string& v, StrPad pad = StrPad::nullpad);

// Reads scalar attributes of one file; its errors name the file and the
// attribute: "<subject>: attribute '<name>' is missing (<hint>)".
class AttrReader {
 public:
  // `subject` names the file ("checkpoint '/x/ckpt_00000004.h5'"); `hint` says
  // what a missing attribute means. Errors are DataError when `data_error`, Error otherwise.
  AttrReader(std::string subject, std::string hint, bool data_error = false)
      : subject_(std::move(subject)), hint_(std::move(hint)), data_error_(data_error) {}
  bool has(hid_t obj, const char* name) const;
  int64_t i64(hid_t obj, const char* name) const;
  double f64(hid_t obj, const char* name) const;
  std::string str(hid_t obj, const char* name) const;  // fixed-length (either padding) or variable-length

 private:
  H5Id open(hid_t obj, const char* name) const;  // throws naming the file when missing
  [[noreturn]] void fail(const std::string& msg) const;
  std::string subject_, hint_;
  bool data_error_;
};

}  // namespace llmtrain::h5
