#include "core/hdf5_util.hpp"

#include "llmtrain/core/error.hpp"

namespace llmtrain::h5 {

H5Id& H5Id::operator=(H5Id&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    closer_ = o.closer_;
    o.id_ = -1;
  }
  return *this;
}

void H5Id::reset() {
  if (id_ >= 0 && closer_) closer_(id_);
  id_ = -1;
}

herr_t H5Id::close() {
  herr_t rc = 0;
  if (id_ >= 0 && closer_) rc = closer_(id_);
  id_ = -1;
  return rc;
}

void quiet_hdf5_once() {
  static const bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

H5Id make_mpio_fapl(MPI_Comm comm) {
  quiet_hdf5_once();
  H5Id fapl(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
  H5_CHECK(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL));
  return fapl;
}

void write_int64_attr(hid_t obj, const char* name, int64_t v) {
  H5Id space(H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Id a(H5_CHECK(H5Acreate2(obj, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  H5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, &v));
}

}  // namespace llmtrain::h5
