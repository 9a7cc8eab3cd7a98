#include "core/hdf5_util.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "llmtrain/core/error.hpp"

namespace llmtrain {

std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex m;
  return m;
}

namespace h5 {

H5Id& H5Id::operator=(H5Id&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    closer_ = o.closer_;
    o.id_ = -1;
  }
  return *this;
}

void H5Id::reset() { close(); }

herr_t H5Id::close() {
  herr_t rc = 0;
  if (id_ >= 0 && closer_) rc = H5_LOCKED(closer_(id_));
  id_ = -1;
  return rc;
}

void quiet_hdf5_once() {
  static const bool done = [] {
    H5_LOCKED(H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr));
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

void write_attr(hid_t obj, const char* name, int64_t v) {
  H5Id space(H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Id a(H5_CHECK(H5Acreate2(obj, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  H5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, &v));
}

void write_attr(hid_t obj, const char* name, double v) {
  H5Id space(H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Id a(H5_CHECK(H5Acreate2(obj, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  H5_CHECK(H5Awrite(a, H5T_NATIVE_DOUBLE, &v));
}

void write_attr(hid_t obj, const char* name, const std::string& v, StrPad pad) {
  const bool term = pad == StrPad::nullterm;
  std::string buf = v;
  buf.resize(term ? v.size() + 1 : std::max<size_t>(1, v.size()), '\0');
  H5Id type(H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  H5_CHECK(H5Tset_size(type, buf.size()));
  H5_CHECK(H5Tset_strpad(type, term ? H5T_STR_NULLTERM : H5T_STR_NULLPAD));
  H5Id space(H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Id a(H5_CHECK(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  H5_CHECK(H5Awrite(a, type, buf.data()));
}

void AttrReader::fail(const std::string& msg) const {
  if (data_error_) throw DataError(msg);
  throw Error(msg);
}

bool AttrReader::has(hid_t obj, const char* name) const { return H5_CHECK(H5Aexists(obj, name)) > 0; }

H5Id AttrReader::open(hid_t obj, const char* name) const {
  if (!has(obj, name)) fail(fmt::format("{}: attribute '{}' is missing ({})", subject_, name, hint_));
  return H5Id(H5_CHECK(H5Aopen(obj, name, H5P_DEFAULT)), H5Aclose);
}

int64_t AttrReader::i64(hid_t obj, const char* name) const {
  H5Id a = open(obj, name);
  int64_t v = 0;
  H5_CHECK(H5Aread(a, H5T_NATIVE_INT64, &v));
  return v;
}

double AttrReader::f64(hid_t obj, const char* name) const {
  H5Id a = open(obj, name);
  double v = 0;
  H5_CHECK(H5Aread(a, H5T_NATIVE_DOUBLE, &v));
  return v;
}

std::string AttrReader::str(hid_t obj, const char* name) const {
  H5Id a = open(obj, name);
  H5Id ftype(H5_CHECK(H5Aget_type(a)), H5Tclose);
  if (H5_CHECK(H5Tget_class(ftype)) != H5T_STRING)
    fail(fmt::format("{}: attribute '{}' is not a string", subject_, name));
  H5Id mtype(H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  if (H5_CHECK(H5Tis_variable_str(ftype)) > 0) {
    H5_CHECK(H5Tset_size(mtype, H5T_VARIABLE));
    char* s = nullptr;
    H5_CHECK(H5Aread(a, mtype, &s));
    std::string out = s ? s : "";
    H5_LOCKED(H5free_memory(s));
    return out;
  }
  // Read as NUL-terminated with room for the NUL, whatever the file's padding.
  const size_t n = H5_LOCKED(H5Tget_size(ftype));
  std::string buf(n + 1, '\0');
  H5_CHECK(H5Tset_size(mtype, n + 1));
  H5_CHECK(H5Tset_strpad(mtype, H5T_STR_NULLTERM));
  H5_CHECK(H5Aread(a, mtype, buf.data()));
  buf.resize(std::strlen(buf.c_str()));
  return buf;
}

}  // namespace h5
}  // namespace llmtrain
