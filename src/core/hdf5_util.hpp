// Private: HDF5 handles and helpers shared by the token shards (data/) and the
// checkpoints (train/). hdf5.h stays out of the public headers.
#pragma once
#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <string>

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
// A scalar little-endian int64 attribute `name` on `obj` (a file, group or dataset).
void write_int64_attr(hid_t obj, const char* name, int64_t v);

}  // namespace llmtrain::h5
