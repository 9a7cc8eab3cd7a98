// CheckpointWriter and CheckpointReader: the HDF5 side of checkpoints (groups,
// attributes, whole tensors written and read as slices). The parts of the
// training state (checkpoint_state.cpp) see only these two classes.
#include <mpi.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <torch/torch.h>

#include "core/hdf5_util.hpp"
#include "train/checkpoint_ops.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/core/fault.hpp"
#include "llmtrain/core/hdf5_mutex.hpp"
#include "llmtrain/distributed/runtime.hpp"
#include "llmtrain/train/checkpoint.hpp"

namespace llmtrain {
namespace fs = std::filesystem;
using h5::H5Id;

namespace {

H5Id make_dxpl(H5FD_mpio_xfer_t mode) {
  H5Id dxpl(H5_CHECK(H5Pcreate(H5P_DATASET_XFER)), H5Pclose);
  H5_CHECK(H5Pset_dxpl_mpio(dxpl, mode));
  return dxpl;
}

// Selects the row-major element range [begin, begin + n) of a dataspace of
// rank 1 or 2 (parameters are vectors or matrices): at most three hyperslab
// blocks (a partial first row, whole rows, a partial last row). HDF5 visits a
// selection in dataspace order, so the elements meet the memory buffer in order.
void select_flat_range(hid_t space, const std::vector<int64_t>& shape, int64_t begin, int64_t n) {
  if (n <= 0) {
    H5_CHECK(H5Sselect_none(space));
    return;
  }
  if (shape.size() == 1) {
    hsize_t start = static_cast<hsize_t>(begin), count = static_cast<hsize_t>(n);
    H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &count, nullptr));
    return;
  }
  LLMTRAIN_CHECK(shape.size() == 2, "checkpoints store tensors of rank 1 or 2, got rank {}", shape.size());
  const int64_t C = shape[1];
  bool first = true;
  auto add = [&](int64_t row, int64_t col, int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    hsize_t start[2] = {static_cast<hsize_t>(row), static_cast<hsize_t>(col)};
    hsize_t count[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(cols)};
    H5_CHECK(H5Sselect_hyperslab(space, first ? H5S_SELECT_SET : H5S_SELECT_OR, start, nullptr, count, nullptr));
    first = false;
  };
  int64_t pos = begin, end = begin + n;
  if (pos % C != 0) {  // partial first row
    const int64_t take = std::min(end, (pos / C + 1) * C) - pos;
    add(pos / C, pos % C, 1, take);
    pos += take;
  }
  const int64_t whole = (end - pos) / C;
  add(pos / C, 0, whole, C);
  pos += whole * C;
  if (pos < end) add(pos / C, 0, 1, end - pos);
}

std::vector<int64_t> dims_of(hid_t space) {
  const int nd = H5_CHECK(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(nd, 0)));
  H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  return std::vector<int64_t>(dims.begin(), dims.end());
}

std::string join(const std::string& group, const std::string& name) {
  return group.empty() ? name : group + "/" + name;
}

h5::AttrReader attr_reader(const std::string& path) {
  return h5::AttrReader(fmt::format("checkpoint '{}'", path),
                        "not an llmtrain checkpoint, or written by an incompatible version; "
                        "docs/checkpoint-format.md");
}

}  // namespace

// ---- the writer ----------------------------------------------------------------------

struct CheckpointWriter::File {
  H5Id file;
  MPI_Comm comm = MPI_COMM_WORLD;
  std::map<std::string, H5Id> groups;  // open until the file closes
  H5Id collective, independent;        // transfer property lists
  hid_t group(const std::string& path) {
    if (path.empty()) return file;
    if (auto it = groups.find(path); it != groups.end()) return it->second;
    const size_t slash = path.rfind('/');
    const hid_t parent = slash == std::string::npos ? file.get() : group(path.substr(0, slash));
    const std::string leaf = slash == std::string::npos ? path : path.substr(slash + 1);
    H5Id g(H5_CHECK(H5Gcreate2(parent, leaf.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
    return groups.emplace(path, std::move(g)).first->second;
  }
};

CheckpointWriter::CheckpointWriter(CheckpointOps& ops, const Runtime& rt, int64_t iteration)
    : record_(&ops), rank_(rt.rank()), world_size_(rt.world_size()), iteration_(iteration) {}

CheckpointWriter::CheckpointWriter(const std::string& path, const Runtime& rt, int64_t iteration, MPI_Comm comm)
    : f_(std::make_unique<File>()), rank_(rt.rank()), world_size_(rt.world_size()), iteration_(iteration) {
  f_->comm = comm;
  H5Id fapl = h5::make_mpio_fapl(comm);
  // Large datasets start on 1 MiB boundaries (file-system stripes, MPI-IO aggregation).
  H5_CHECK(H5Pset_alignment(fapl, 1 << 20, 1 << 20));
  const hid_t fid = H5_LOCKED(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
  if (fid < 0) throw Error(fmt::format("cannot create checkpoint '{}' (directory writable? disk full?)", path));
  f_->file = H5Id(fid, H5Fclose);
  f_->collective = make_dxpl(H5FD_MPIO_COLLECTIVE);
  // The tensors are written independently: each owner writes its contiguous
  // ranges of the whole tensor, with no two-phase shuffle between the ranks
  // (measured: 1.0x dd at one writer, against 0.68x collective).
  f_->independent = make_dxpl(H5FD_MPIO_INDEPENDENT);
}

CheckpointWriter::~CheckpointWriter() = default;

void CheckpointWriter::replay(const CheckpointOps& ops) {
  using K = CheckpointOps::Kind;
  // The test fault point: this rank dies half-way through writing the file.
  const bool kill_half_way = fault::hit(fault::Point::kill_during_save, rank_, iteration_);
  for (size_t i = 0; i < ops.ops.size(); ++i) {
    if (kill_half_way && i == ops.ops.size() / 2) std::raise(SIGKILL);
    const auto& op = ops.ops[i];
    // One HDF5 call sequence at a time in the process (the loader's workers read
    // shards meanwhile); taken per call so that they wait for one tensor at most.
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    switch (op.kind) {
      case K::attr_i64: attr(op.group, op.name.c_str(), op.i64); break;
      case K::attr_f64: attr(op.group, op.name.c_str(), op.f64); break;
      case K::attr_str: attr(op.group, op.name.c_str(), op.str); break;
      case K::tensor: tensor(op.group, op.name, op.shape, op.offset, op.data); break;
      case K::rank_row: rank_row(op.group, op.name, op.row); break;
    }
  }
}

void CheckpointWriter::close() {
  if (record_) return;
  f_->groups.clear();  // every object must be closed before the file (MPI-IO closes "semi")
  // H5Fclose flushes the last metadata: its error (a full disk) is the save's.
  if (f_->file.close() < 0) throw Error("closing the file failed (disk full?)");
}

void CheckpointWriter::attr(const std::string& group, const char* name, int64_t v) {
  if (record_) return record_->ops.push_back({CheckpointOps::Kind::attr_i64, group, name, v});
  h5::write_attr(f_->group(group), name, v);
}
void CheckpointWriter::attr(const std::string& group, const char* name, double v) {
  if (record_) return record_->ops.push_back({CheckpointOps::Kind::attr_f64, group, name, 0, v});
  h5::write_attr(f_->group(group), name, v);
}
void CheckpointWriter::attr(const std::string& group, const char* name, const std::string& v) {
  if (record_) return record_->ops.push_back({CheckpointOps::Kind::attr_str, group, name, 0, 0, v});
  h5::write_attr(f_->group(group), name, v, h5::StrPad::nullpad);
}

void CheckpointWriter::tensor(const std::string& group, const std::string& name, const std::vector<int64_t>& shape,
                              int64_t offset, const torch::Tensor& part) {
  if (record_) {
    CheckpointOps::Op op{CheckpointOps::Kind::tensor, group, name};
    op.shape = shape;
    op.offset = offset;
    if (part.defined() && part.numel() > 0) op.data = record_->host_copy(part);
    return record_->ops.push_back(std::move(op));
  }
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  H5Id fspace(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
  H5Id d(H5_CHECK(H5Dcreate2(f_->group(group), name.c_str(), H5T_IEEE_F32LE, fspace, H5P_DEFAULT, H5P_DEFAULT,
                             H5P_DEFAULT)),
         H5Dclose);
  if (!part.defined() || part.numel() == 0) return;  // independent I/O: only the owners write
  const torch::Tensor buf = part.to(torch::kCPU, torch::kFloat).contiguous();
  hsize_t n = static_cast<hsize_t>(buf.numel());
  select_flat_range(fspace, shape, offset, buf.numel());
  H5Id mspace(H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
  H5_CHECK(H5Dwrite(d, H5T_NATIVE_FLOAT, mspace, fspace, f_->independent, buf.data_ptr<float>()));
}

void CheckpointWriter::rank_row(const std::string& group, const std::string& name, const std::vector<uint8_t>& row) {
  if (record_) {
    CheckpointOps::Op op{CheckpointOps::Kind::rank_row, group, name};
    op.row = row;
    return record_->ops.push_back(std::move(op));
  }
  int64_t len = static_cast<int64_t>(row.size()), maxlen = 0;
  MPI_CHECK(MPI_Allreduce(&len, &maxlen, 1, MPI_INT64_T, MPI_MAX, f_->comm));
  LLMTRAIN_CHECK(len == maxlen, "checkpoint: rows of '{}' differ across ranks ({} vs {} bytes)", join(group, name),
                 len, maxlen);
  hsize_t dims[2] = {static_cast<hsize_t>(world_size_), static_cast<hsize_t>(len)};
  H5Id fspace(H5_CHECK(H5Screate_simple(2, dims, nullptr)), H5Sclose);
  H5Id d(H5_CHECK(H5Dcreate2(f_->group(group), name.c_str(), H5T_STD_U8LE, fspace, H5P_DEFAULT, H5P_DEFAULT,
                             H5P_DEFAULT)),
         H5Dclose);
  hsize_t start[2] = {static_cast<hsize_t>(rank_), 0}, count[2] = {1, static_cast<hsize_t>(len)};
  H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, count, nullptr));
  hsize_t mdim = static_cast<hsize_t>(len);
  H5Id mspace(H5_CHECK(H5Screate_simple(1, &mdim, nullptr)), H5Sclose);
  H5_CHECK(H5Dwrite(d, H5T_NATIVE_UINT8, mspace, fspace, f_->collective, row.data()));
}

// ---- the reader ----------------------------------------------------------------------

struct CheckpointReader::File {
  H5Id file;
  H5Id collective, independent;
  h5::AttrReader attrs{"", ""};
  H5Id object(const std::string& path) const {  // a group (or the root) to read attributes of
    return H5Id(H5_CHECK(H5Oopen(file, path.empty() ? "/" : path.c_str(), H5P_DEFAULT)), H5Oclose);
  }
};

CheckpointReader::CheckpointReader(const std::string& path, const Runtime& rt, bool collective)
    : f_(std::make_unique<File>()), path_(path), rank_(rt.rank()), world_size_(rt.world_size()) {
  f_->attrs = attr_reader(path);
  h5::quiet_hdf5_once();
  if (collective) {
    H5Id fapl = h5::make_mpio_fapl(MPI_COMM_WORLD);
    const hid_t fid = H5_LOCKED(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl));
    if (fid < 0) throw Error(fmt::format("cannot open checkpoint '{}'", path));
    f_->file = H5Id(fid, H5Fclose);
    f_->collective = make_dxpl(H5FD_MPIO_COLLECTIVE);
    // Read independently, as written: each rank its own contiguous ranges.
    f_->independent = make_dxpl(H5FD_MPIO_INDEPENDENT);
    return;
  }
  if (!fs::is_regular_file(path)) throw CheckpointUnusable(fmt::format("'{}' does not exist", path));
  if (H5_LOCKED(H5Fis_hdf5(path.c_str())) <= 0)
    throw CheckpointUnusable(fmt::format("'{}' is not an HDF5 file (truncated or overwritten?)", path));
  const hid_t fid = H5_LOCKED(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (fid < 0) throw CheckpointUnusable(fmt::format("HDF5 cannot open '{}' (truncated?)", path));
  f_->file = H5Id(fid, H5Fclose);
}

CheckpointReader::~CheckpointReader() = default;

bool CheckpointReader::close() { return f_->file.close() >= 0; }

int64_t CheckpointReader::written_world_size() const { return attr_i64("", "world_size"); }
int64_t CheckpointReader::iteration() const { return attr_i64("", "iteration"); }

bool CheckpointReader::exists(const std::string& object) const {
  // Each link on the way: H5Lexists fails on a path whose parent is missing.
  for (size_t end = object.find('/');; end = object.find('/', end + 1)) {
    if (H5_LOCKED(H5Lexists(f_->file, object.substr(0, end).c_str(), H5P_DEFAULT)) <= 0) return false;
    if (end == std::string::npos) return true;
  }
}

void CheckpointReader::require_group(const std::string& group) const {
  if (!exists(group)) throw CheckpointUnusable(fmt::format("checkpoint '{}' has no group '{}'", path_, group));
}

int64_t CheckpointReader::attr_i64(const std::string& group, const char* name) const {
  return f_->attrs.i64(f_->object(group), name);
}
double CheckpointReader::attr_f64(const std::string& group, const char* name) const {
  return f_->attrs.f64(f_->object(group), name);
}
std::string CheckpointReader::attr_str(const std::string& group, const char* name) const {
  return f_->attrs.str(f_->object(group), name);
}

CheckpointReader::Dataset CheckpointReader::dataset(const std::string& path) const {
  const hid_t did = H5_LOCKED(H5Dopen2(f_->file, path.c_str(), H5P_DEFAULT));
  if (did < 0) throw CheckpointUnusable(fmt::format("checkpoint '{}': dataset '{}' cannot be opened", path_, path));
  H5Id d(did, H5Dclose);
  H5Id space(H5_CHECK(H5Dget_space(d)), H5Sclose);
  H5Id type(H5_CHECK(H5Dget_type(d)), H5Tclose);
  return {dims_of(space), H5_LOCKED(H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 4)};
}

void CheckpointReader::read_tensor(const std::string& path, int64_t offset, const torch::Tensor& dst) {
  H5Id d(H5_CHECK(H5Dopen2(f_->file, path.c_str(), H5P_DEFAULT)), H5Dclose);
  H5Id fspace(H5_CHECK(H5Dget_space(d)), H5Sclose);
  if (!dst.defined() || dst.numel() == 0) return;
  // Straight into `dst` where it is contiguous fp32 on the CPU.
  const bool direct = dst.device().is_cpu() && dst.scalar_type() == torch::kFloat && dst.is_contiguous();
  torch::Tensor buf = direct ? dst : torch::empty({dst.numel()}, torch::TensorOptions().dtype(torch::kFloat));
  hsize_t n = static_cast<hsize_t>(buf.numel());
  select_flat_range(fspace, dims_of(fspace), offset, buf.numel());
  H5Id mspace(H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
  H5_CHECK(H5Dread(d, H5T_NATIVE_FLOAT, mspace, fspace, f_->independent, buf.data_ptr<float>()));
  if (!direct) dst.copy_(buf.view(dst.sizes()));
}

std::optional<std::vector<uint8_t>> CheckpointReader::rank_row(const std::string& path) {
  if (!exists(path)) return std::nullopt;
  H5Id d(H5_CHECK(H5Dopen2(f_->file, path.c_str(), H5P_DEFAULT)), H5Dclose);
  H5Id fspace(H5_CHECK(H5Dget_space(d)), H5Sclose);
  const std::vector<int64_t> dims = dims_of(fspace);
  LLMTRAIN_CHECK(dims.size() == 2, "checkpoint '{}': '{}' is not a (world_size, bytes) table", path_, path);
  const bool same_world = dims[0] == world_size_;
  std::vector<uint8_t> row(static_cast<size_t>(dims[1]));
  if (same_world) {
    hsize_t start[2] = {static_cast<hsize_t>(rank_), 0}, count[2] = {1, static_cast<hsize_t>(dims[1])};
    H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, count, nullptr));
  } else {
    H5_CHECK(H5Sselect_none(fspace));
  }
  // Collective: every rank reads, those of another world size nothing.
  hsize_t mdim = std::max<hsize_t>(static_cast<hsize_t>(dims[1]), 1);
  H5Id mspace(H5_CHECK(H5Screate_simple(1, &mdim, nullptr)), H5Sclose);
  if (!same_world || dims[1] == 0) H5_CHECK(H5Sselect_none(mspace));
  uint8_t dummy = 0;
  H5_CHECK(H5Dread(d, H5T_NATIVE_UINT8, mspace, fspace, f_->collective, row.empty() ? &dummy : row.data()));
  if (!same_world) return std::nullopt;
  return row;
}

}  // namespace llmtrain
