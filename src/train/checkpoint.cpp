// HDF5 checkpoints: the layout is docs/checkpoint-format.md.
//   /                      attributes: format, format_version, iteration, world_size, strategy, created,
//                          llmtrain_version, torch_version, versions (JSON), config (JSON), param_names (JSON)
//   /model/<name>          float32, the parameter's shape (the fp32 master copy where one exists)
//   /optimizer/exp_avg/<name>, /optimizer/exp_avg_sq/<name>   float32, the parameter's shape
//   /optimizer             attributes: steps, beta1, beta2, eps, weight_decay
//   /train_state           attributes: iteration, best_val_loss, bad_steps, loss_scale, loss_scale_growth_tracker,
//                          loss_scale_skipped, global_batch_sequences, block_size, seed
//   /schedule              attributes: learning_rate, min_lr, warmup_iters, lr_decay_iters, decay_lr
//   /rng/cpu               uint8 (world_size, state bytes): every rank's CPU generator
//   /rng/cuda              uint8 (world_size, state bytes): every rank's CUDA generator (CUDA runs)
#include "llmtrain/train/checkpoint.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>

#include <ATen/core/Generator.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "core/hdf5_util.hpp"
#include "llmtrain/core/atomic_file.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/core/fault.hpp"
#include "llmtrain/core/log.hpp"
#include "llmtrain/distributed/runtime.hpp"
#include "llmtrain/distributed/strategy.hpp"
#include "llmtrain/train/run_log.hpp"

namespace llmtrain {
namespace fs = std::filesystem;
using h5::H5Id;

namespace {

constexpr int64_t kFormatVersion = 1;
constexpr const char* kFormat = "llmtrain-checkpoint";
const std::regex kCheckpointName(R"(ckpt_(\d{8,})\.h5)");

const char* group_of(StateTensor t) {
  switch (t) {
    case StateTensor::weights: return "model";
    case StateTensor::exp_avg: return "optimizer/exp_avg";
    case StateTensor::exp_avg_sq: return "optimizer/exp_avg_sq";
  }
  return "?";
}
constexpr StateTensor kTensors[] = {StateTensor::weights, StateTensor::exp_avg, StateTensor::exp_avg_sq};

// ---- attributes (written by every rank with the same value: parallel HDF5 wants
// metadata calls collective) ----
void write_attr(hid_t obj, const char* name, int64_t v) { h5::write_attr(obj, name, v); }
void write_attr(hid_t obj, const char* name, double v) {
  H5Id space(H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Id a(H5_CHECK(H5Acreate2(obj, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  H5_CHECK(H5Awrite(a, H5T_NATIVE_DOUBLE, &v));
}
void write_attr(hid_t obj, const char* name, const std::string& v) {
  H5Id type(H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  H5_CHECK(H5Tset_size(type, std::max<size_t>(1, v.size())));
  H5_CHECK(H5Tset_strpad(type, H5T_STR_NULLPAD));
  H5Id space(H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Id a(H5_CHECK(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  std::string buf = v.empty() ? std::string(1, '\0') : v;
  H5_CHECK(H5Awrite(a, type, buf.data()));
}

// Readers name the file and the attribute when it is missing.
struct AttrReader {
  std::string path;
  bool has(hid_t obj, const char* name) const { return H5_CHECK(H5Aexists(obj, name)) > 0; }
  void need(hid_t obj, const char* name) const {
    if (!has(obj, name))
      throw Error(fmt::format("checkpoint '{}': attribute '{}' is missing (not an llmtrain checkpoint, or written "
                              "by an incompatible version; docs/checkpoint-format.md)",
                              path, name));
  }
  int64_t i64(hid_t obj, const char* name) const {
    need(obj, name);
    H5Id a(H5_CHECK(H5Aopen(obj, name, H5P_DEFAULT)), H5Aclose);
    int64_t v = 0;
    H5_CHECK(H5Aread(a, H5T_NATIVE_INT64, &v));
    return v;
  }
  double f64(hid_t obj, const char* name) const {
    need(obj, name);
    H5Id a(H5_CHECK(H5Aopen(obj, name, H5P_DEFAULT)), H5Aclose);
    double v = 0;
    H5_CHECK(H5Aread(a, H5T_NATIVE_DOUBLE, &v));
    return v;
  }
  std::string str(hid_t obj, const char* name) const {
    need(obj, name);
    H5Id a(H5_CHECK(H5Aopen(obj, name, H5P_DEFAULT)), H5Aclose);
    H5Id ftype(H5_CHECK(H5Aget_type(a)), H5Tclose);
    if (H5_CHECK(H5Tget_class(ftype)) != H5T_STRING)
      throw Error(fmt::format("checkpoint '{}': attribute '{}' is not a string", path, name));
    const size_t n = H5Tget_size(ftype);
    std::string s(n, '\0');
    H5Id mtype(H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
    H5_CHECK(H5Tset_size(mtype, n));
    H5_CHECK(H5Tset_strpad(mtype, H5T_STR_NULLPAD));
    H5_CHECK(H5Aread(a, mtype, s.data()));
    s.resize(std::strlen(s.c_str()));
    return s;
  }
};

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

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

H5Id make_dxpl(H5FD_mpio_xfer_t mode) {
  H5Id dxpl(H5_CHECK(H5Pcreate(H5P_DATASET_XFER)), H5Pclose);
  H5_CHECK(H5Pset_dxpl_mpio(dxpl, mode));
  return dxpl;
}

// At most one slice per parameter (the strategies guarantee it): by parameter.
std::vector<const StateSlice*> by_param(const std::vector<StateSlice>& slices, size_t num_params,
                                        const char* what) {
  std::vector<const StateSlice*> out(num_params, nullptr);
  for (const auto& s : slices) {
    LLMTRAIN_CHECK(s.param >= 0 && static_cast<size_t>(s.param) < num_params, "checkpoint: {} slice of parameter {} "
                   "outside the {} parameters", what, s.param, num_params);
    LLMTRAIN_CHECK(out[s.param] == nullptr, "checkpoint: two {} slices of parameter {} on one rank", what, s.param);
    out[s.param] = &s;
  }
  return out;
}

// The default CPU generator's state and, on CUDA, the current device's.
std::vector<uint8_t> rng_bytes(const torch::Tensor& state) {
  auto c = state.to(torch::kCPU).contiguous();
  const auto* p = c.data_ptr<uint8_t>();
  return std::vector<uint8_t>(p, p + c.numel());
}

struct Candidate {
  int64_t iteration;
  std::string file;
};

// Checkpoint files in `dir`, newest first.
std::vector<Candidate> list_checkpoints(const std::string& dir) {
  std::vector<Candidate> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, kCheckpointName)) out.push_back({std::stoll(m[1].str()), name});
  }
  std::sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) { return a.iteration > b.iteration; });
  return out;
}

// Rank 0's verdict on a file before every rank reads it collectively: "" when
// it is a complete llmtrain checkpoint whose tensors match `params`;
// "corrupt: ..." when it cannot be read; "mismatch: ..." when it is readable
// but written for another model.
std::string inspect(const std::string& path, const std::vector<CheckpointParam>& params) {
  if (!fs::is_regular_file(path)) return fmt::format("corrupt: '{}' does not exist", path);
  h5::quiet_hdf5_once();
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 <= 0) return fmt::format("corrupt: '{}' is not an HDF5 file (truncated or overwritten?)", path);
  const hid_t fid = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (fid < 0) return fmt::format("corrupt: HDF5 cannot open '{}' (truncated?)", path);
  H5Id file(fid, H5Fclose);
  try {
    AttrReader attr{path};
    if (attr.str(file, "format") != kFormat) return fmt::format("corrupt: '{}' is not an llmtrain checkpoint", path);
    const int64_t version = attr.i64(file, "format_version");
    if (version != kFormatVersion)
      return fmt::format("mismatch: '{}' has checkpoint format version {}, this llmtrain reads {}", path, version,
                         kFormatVersion);
    // Every tensor the model has, with its shape; and no tensor it lacks.
    const auto names = nlohmann::json::parse(attr.str(file, "param_names"));
    std::vector<std::string> missing;
    for (const auto& n : names) {
      const std::string name = n.get<std::string>();
      if (std::none_of(params.begin(), params.end(), [&](const CheckpointParam& p) { return p.name == name; }))
        return fmt::format("mismatch: checkpoint '{}' holds tensor '{}', which this model does not have (the "
                           "config describes another model)",
                           path, name);
    }
    for (const auto t : kTensors) {
      for (const auto& p : params) {
        const std::string ds = fmt::format("{}/{}", group_of(t), p.name);
        if (H5Lexists(file, group_of(t), H5P_DEFAULT) <= 0 || H5Lexists(file, ds.c_str(), H5P_DEFAULT) <= 0) {
          if (t == StateTensor::weights)
            return fmt::format("mismatch: checkpoint '{}' has no tensor '{}' (the config describes another model)",
                               path, ds);
          return fmt::format("corrupt: checkpoint '{}' has no dataset '{}'", path, ds);
        }
        const hid_t did = H5Dopen2(file, ds.c_str(), H5P_DEFAULT);
        if (did < 0) return fmt::format("corrupt: checkpoint '{}': dataset '{}' cannot be opened", path, ds);
        H5Id d(did, H5Dclose);
        H5Id space(H5_CHECK(H5Dget_space(d)), H5Sclose);
        const int nd = H5_CHECK(H5Sget_simple_extent_ndims(space));
        std::vector<hsize_t> dims(static_cast<size_t>(std::max(nd, 0)));
        H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
        const std::vector<int64_t> got(dims.begin(), dims.end());
        if (got != p.shape)
          return fmt::format("mismatch: checkpoint '{}': tensor '{}' has shape {}, the model {}", path, ds,
                             shape_str(got), shape_str(p.shape));
        H5Id type(H5_CHECK(H5Dget_type(d)), H5Tclose);
        if (H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != 4)
          return fmt::format("corrupt: checkpoint '{}': tensor '{}' is not float32", path, ds);
      }
    }
    for (const char* g : {"train_state", "optimizer", "rng"})
      if (H5Lexists(file, g, H5P_DEFAULT) <= 0) return fmt::format("corrupt: checkpoint '{}' has no group '{}'", path, g);
  } catch (const std::exception& e) {
    return fmt::format("corrupt: reading '{}': {}", path, e.what());
  }
  if (file.close() < 0) return fmt::format("corrupt: closing '{}' failed", path);
  return "";
}

std::string bcast_string(std::string s, int root) {
  int n = static_cast<int>(s.size());
  MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT, root, MPI_COMM_WORLD));
  s.resize(static_cast<size_t>(n));
  MPI_CHECK(MPI_Bcast(s.data(), n, MPI_CHAR, root, MPI_COMM_WORLD));
  return s;
}

}  // namespace

std::string checkpoint_file_name(int64_t iteration) { return fmt::format("ckpt_{:08d}.h5", iteration); }

Checkpointer::Checkpointer(const std::string& out_dir, int64_t keep_last, const Runtime& rt)
    : dir_((fs::path(out_dir) / "checkpoints").string()), keep_last_(keep_last), rt_(rt) {
  LLMTRAIN_CHECK(keep_last >= 1, "keep_last must be >= 1, got {}", keep_last);
  std::string err;
  if (rt.is_root()) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) {
      err = fmt::format("cannot create the checkpoint directory '{}': {}", dir_, ec.message());
    } else if (::access(dir_.c_str(), W_OK) != 0) {
      err = fmt::format("the checkpoint directory '{}' is not writable: {}", dir_, std::strerror(errno));
    } else {
      // Leftovers of saves that were interrupted: never loaded, safe to remove.
      for (const auto& e : fs::directory_iterator(dir_, ec)) {
        const std::string name = e.path().filename().string();
        if (name.size() > 1 && name[0] == '.' && name.find(".tmp") != std::string::npos) fs::remove(e.path(), ec);
      }
    }
  }
  err = bcast_string(err, 0);
  if (!err.empty()) throw Error(err);
}

std::string Checkpointer::latest_path() const {
  std::ifstream in(fs::path(dir_) / "latest");
  std::string name;
  if (!(in >> name)) return "";
  return (fs::path(dir_) / name).string();
}

std::string Checkpointer::save(const std::vector<CheckpointParam>& params, Strategy& strategy,
                               const TrainState& state, const nlohmann::json& config) {
  torch::NoGradGuard no_grad;
  const int rank = rt_.rank(), world = rt_.world_size();
  const std::string name = checkpoint_file_name(state.iteration);
  const fs::path final_path = fs::path(dir_) / name;
  const fs::path tmp_path = fs::path(dir_) / ("." + name + ".tmp");  // the same name on every rank
  h5::quiet_hdf5_once();
  try {
    H5Id fapl = h5::make_mpio_fapl(MPI_COMM_WORLD);
    // Large datasets start on 1 MiB boundaries (file-system stripes, MPI-IO aggregation).
    H5_CHECK(H5Pset_alignment(fapl, 1 << 20, 1 << 20));
    const hid_t fid = H5Fcreate(tmp_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (fid < 0)
      throw Error(fmt::format("cannot create checkpoint '{}' (directory writable? disk full?)",
                              tmp_path.string()));
    H5Id file(fid, H5Fclose);
    nlohmann::json names = nlohmann::json::array();
    for (const auto& p : params) names.push_back(p.name);
    const auto versions = library_versions();
    std::time_t now = std::time(nullptr);
    char created[32];
    std::strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    write_attr(file, "format", std::string(kFormat));
    write_attr(file, "format_version", kFormatVersion);
    write_attr(file, "iteration", state.iteration);
    write_attr(file, "world_size", static_cast<int64_t>(world));
    write_attr(file, "strategy", strategy.name());
    write_attr(file, "created", std::string(created));
    write_attr(file, "llmtrain_version", versions.value("llmtrain", std::string("?")));
    write_attr(file, "torch_version", versions.value("libtorch", std::string("?")));
    write_attr(file, "versions", versions.dump());
    write_attr(file, "config", config.dump());
    write_attr(file, "param_names", names.dump());

    H5Id dxpl = make_dxpl(H5FD_MPIO_COLLECTIVE);
    // The tensors are written independently: each owner writes its contiguous
    // ranges of the whole tensor, with no two-phase shuffle between the ranks
    // (measured: 1.0x dd at one writer, against 0.68x collective).
    H5Id wdxpl = make_dxpl(H5FD_MPIO_INDEPENDENT);
    const auto write_tensors = [&](StateTensor t, bool kill_half_way) {
      const auto slices = strategy.save_slices(t);
      const auto mine = by_param(slices, params.size(), to_string(t));
      H5Id group(H5_CHECK(H5Gcreate2(file, group_of(t), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
      for (size_t i = 0; i < params.size(); ++i) {
        if (kill_half_way && i == params.size() / 2) std::raise(SIGKILL);
        const auto& p = params[i];
        std::vector<hsize_t> dims(p.shape.begin(), p.shape.end());
        H5Id fspace(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
        H5Id d(H5_CHECK(H5Dcreate2(group, p.name.c_str(), H5T_IEEE_F32LE, fspace, H5P_DEFAULT, H5P_DEFAULT,
                                   H5P_DEFAULT)),
               H5Dclose);
        torch::Tensor buf;
        hsize_t n = 0;
        if (const StateSlice* s = mine[i]) {
          buf = s->values.to(torch::kCPU, torch::kFloat).contiguous();
          n = static_cast<hsize_t>(buf.numel());
          select_flat_range(fspace, p.shape, s->offset, buf.numel());
        } else {
          H5_CHECK(H5Sselect_none(fspace));
        }
        if (n == 0) continue;  // independent I/O: only the owners write
        H5Id mspace(H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
        H5_CHECK(H5Dwrite(d, H5T_NATIVE_FLOAT, mspace, fspace, wdxpl, buf.data_ptr<float>()));
      }
    };
    write_tensors(StateTensor::weights, false);
    {
      H5Id opt(H5_CHECK(H5Gcreate2(file, "optimizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
      write_attr(opt, "steps", strategy.optimizer_steps());
    }
    write_tensors(StateTensor::exp_avg, fault::hit(fault::Point::kill_during_save, rank, state.iteration));
    write_tensors(StateTensor::exp_avg_sq, false);
    {
      H5Id ts(H5_CHECK(H5Gcreate2(file, "train_state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
      write_attr(ts, "iteration", state.iteration);
      write_attr(ts, "best_val_loss", state.best_val_loss);
      write_attr(ts, "bad_steps", state.bad_steps);
      write_attr(ts, "loss_scale", state.loss_scaler.scale);
      write_attr(ts, "loss_scale_growth_tracker", state.loss_scaler.growth_tracker);
      write_attr(ts, "loss_scale_skipped", state.loss_scaler.skipped);
      write_attr(ts, "global_batch_sequences", state.global_batch_sequences);
      write_attr(ts, "block_size", state.block_size);
      write_attr(ts, "seed", state.seed);
    }
    {
      H5Id sched(H5_CHECK(H5Gcreate2(file, "schedule", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
      write_attr(sched, "learning_rate", config.value("learning_rate", 0.0));
      write_attr(sched, "min_lr", config.value("min_lr", 0.0));
      write_attr(sched, "warmup_iters", config.value("warmup_iters", int64_t{0}));
      write_attr(sched, "lr_decay_iters", config.value("lr_decay_iters", int64_t{0}));
      write_attr(sched, "decay_lr", static_cast<int64_t>(config.value("decay_lr", true)));
    }
    {
      // Every rank's RNG states, one row each.
      H5Id rng(H5_CHECK(H5Gcreate2(file, "rng", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
      std::vector<std::pair<const char*, std::vector<uint8_t>>> states;
      states.emplace_back("cpu", rng_bytes(at::detail::getDefaultCPUGenerator().get_state()));
      if (rt_.device().is_cuda())
        states.emplace_back("cuda", rng_bytes(at::detail::getCUDAHooks().getDefaultGenerator(rt_.device().index())
                                                  .get_state()));
      for (auto& [gname, bytes] : states) {
        int64_t len = static_cast<int64_t>(bytes.size()), maxlen = 0;
        MPI_CHECK(MPI_Allreduce(&len, &maxlen, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD));
        LLMTRAIN_CHECK(len == maxlen, "RNG state sizes differ across ranks ({} vs {} bytes)", len, maxlen);
        hsize_t dims[2] = {static_cast<hsize_t>(world), static_cast<hsize_t>(len)};
        H5Id fspace(H5_CHECK(H5Screate_simple(2, dims, nullptr)), H5Sclose);
        H5Id d(H5_CHECK(H5Dcreate2(rng, gname, H5T_STD_U8LE, fspace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
               H5Dclose);
        hsize_t start[2] = {static_cast<hsize_t>(rank), 0}, count[2] = {1, static_cast<hsize_t>(len)};
        H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, count, nullptr));
        hsize_t mdim = static_cast<hsize_t>(len);
        H5Id mspace(H5_CHECK(H5Screate_simple(1, &mdim, nullptr)), H5Sclose);
        H5_CHECK(H5Dwrite(d, H5T_NATIVE_UINT8, mspace, fspace, dxpl, bytes.data()));
      }
    }
    // H5Fclose flushes the last metadata: its error (a full disk) is the save's.
    if (file.close() < 0) throw Error("closing the file failed (disk full?)");
  } catch (const std::exception& e) {
    // The older checkpoints and `latest` are untouched; the partial file goes.
    std::error_code ec;
    if (rt_.is_root()) fs::remove(tmp_path, ec);
    throw Error(fmt::format("writing checkpoint '{}' failed ({} is kept): {}", final_path.string(),
                            latest_path().empty() ? std::string("no earlier checkpoint") : latest_path(), e.what()));
  }
  // Every rank's data is in the file: rank 0 makes it the checkpoint.
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  std::string err;
  if (rt_.is_root()) {
    try {
      fsync_path(tmp_path);
      fs::rename(tmp_path, final_path);
      fsync_path(dir_);
      write_file_atomic(fs::path(dir_) / "latest", name + "\n");
      // Keep the newest keep_last; `latest` is the newest, so it survives.
      const auto all = list_checkpoints(dir_);
      for (size_t i = static_cast<size_t>(keep_last_); i < all.size(); ++i) {
        std::error_code ec;
        fs::remove(fs::path(dir_) / all[i].file, ec);
      }
    } catch (const std::exception& e) {
      err = fmt::format("checkpoint '{}' was written but not put in place: {}", final_path.string(), e.what());
      std::error_code ec;
      fs::remove(tmp_path, ec);
    }
  }
  err = bcast_string(err, 0);
  if (!err.empty()) throw Error(err);
  return final_path.string();
}

std::optional<LoadedCheckpoint> Checkpointer::load_latest(const std::vector<CheckpointParam>& params,
                                                          Strategy& strategy) {
  torch::NoGradGuard no_grad;
  const int rank = rt_.rank(), world = rt_.world_size();
  // Rank 0 picks the newest file it can read: `latest` first, then the others newest first.
  std::string chosen, verdict;
  if (rt_.is_root()) {
    std::vector<std::string> order;
    const std::string latest = latest_path();
    if (!latest.empty()) order.push_back(latest);
    for (const auto& c : list_checkpoints(dir_)) {
      const std::string p = (fs::path(dir_) / c.file).string();
      if (p != latest) order.push_back(p);
    }
    std::vector<std::string> skipped;
    for (const auto& p : order) {
      const std::string v = inspect(p, params);
      if (v.empty()) {
        chosen = p;
        break;
      }
      if (v.rfind("mismatch: ", 0) == 0) {
        verdict = v;
        break;
      }
      log::warn("checkpoint {} is unusable ({}); trying the previous one", p, v.substr(9));
      skipped.push_back(v.substr(9));
    }
    if (chosen.empty() && verdict.empty() && !order.empty())
      verdict = fmt::format("unreadable: no checkpoint in '{}' can be loaded: {}", dir_,
                            skipped.empty() ? std::string("?") : skipped.front());
  }
  chosen = bcast_string(chosen, 0);
  verdict = bcast_string(verdict, 0);
  if (verdict.rfind("mismatch: ", 0) == 0) throw ConfigError(verdict.substr(10));
  if (!verdict.empty()) throw Error(verdict.substr(std::strlen("unreadable: ")));
  if (chosen.empty()) return std::nullopt;

  LoadedCheckpoint out;
  out.path = chosen;
  H5Id fapl = h5::make_mpio_fapl(MPI_COMM_WORLD);
  const hid_t fid = H5Fopen(chosen.c_str(), H5F_ACC_RDONLY, fapl);
  if (fid < 0) throw Error(fmt::format("cannot open checkpoint '{}'", chosen));
  H5Id file(fid, H5Fclose);
  AttrReader attr{chosen};
  out.world_size = attr.i64(file, "world_size");
  out.strategy = attr.str(file, "strategy");
  out.config = nlohmann::json::parse(attr.str(file, "config"));
  H5Id dxpl = make_dxpl(H5FD_MPIO_COLLECTIVE);
  // Read independently, as written: each rank its own contiguous ranges.
  H5Id rdxpl = make_dxpl(H5FD_MPIO_INDEPENDENT);
  for (const auto t : kTensors) {
    const auto slices = strategy.load_slices(t);
    const auto mine = by_param(slices, params.size(), to_string(t));
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& p = params[i];
      const std::string ds = fmt::format("{}/{}", group_of(t), p.name);
      H5Id d(H5_CHECK(H5Dopen2(file, ds.c_str(), H5P_DEFAULT)), H5Dclose);
      H5Id fspace(H5_CHECK(H5Dget_space(d)), H5Sclose);
      const StateSlice* s = mine[i];
      if (!s || s->values.numel() == 0) continue;
      // Straight into the strategy's tensor where it is contiguous fp32 on the CPU.
      const torch::Tensor& dst = s->values;
      const bool direct = dst.device().is_cpu() && dst.scalar_type() == torch::kFloat && dst.is_contiguous();
      torch::Tensor buf = direct ? dst : torch::empty({dst.numel()}, torch::TensorOptions().dtype(torch::kFloat));
      hsize_t n = static_cast<hsize_t>(buf.numel());
      select_flat_range(fspace, p.shape, s->offset, buf.numel());
      H5Id mspace(H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
      H5_CHECK(H5Dread(d, H5T_NATIVE_FLOAT, mspace, fspace, rdxpl, buf.data_ptr<float>()));
      if (!direct) dst.copy_(buf.view(dst.sizes()));
    }
  }
  int64_t steps = 0;
  {  // every object must be closed before the file (MPI-IO closes "semi")
    H5Id opt(H5_CHECK(H5Gopen2(file, "optimizer", H5P_DEFAULT)), H5Gclose);
    steps = attr.i64(opt, "steps");
    H5Id ts(H5_CHECK(H5Gopen2(file, "train_state", H5P_DEFAULT)), H5Gclose);
    out.state.iteration = attr.i64(ts, "iteration");
    out.state.best_val_loss = attr.f64(ts, "best_val_loss");
    out.state.bad_steps = attr.i64(ts, "bad_steps");
    out.state.loss_scaler = {attr.f64(ts, "loss_scale"), attr.i64(ts, "loss_scale_growth_tracker"),
                             attr.i64(ts, "loss_scale_skipped")};
    out.state.global_batch_sequences = attr.i64(ts, "global_batch_sequences");
    out.state.block_size = attr.i64(ts, "block_size");
    out.state.seed = attr.i64(ts, "seed");
  }
  // RNG: this rank's row when the world size is the same (bit-exact resume).
  {
    H5Id rng(H5_CHECK(H5Gopen2(file, "rng", H5P_DEFAULT)), H5Gclose);
    const bool same_world = out.world_size == world;
    std::vector<std::pair<const char*, at::Generator>> gens = {{"cpu", at::detail::getDefaultCPUGenerator()}};
    if (rt_.device().is_cuda())
      gens.emplace_back("cuda", at::detail::getCUDAHooks().getDefaultGenerator(rt_.device().index()));
    out.rng_restored = same_world;
    for (auto& [gname, gen] : gens) {
      if (H5Lexists(rng, gname, H5P_DEFAULT) <= 0) {
        out.rng_restored = false;
        continue;
      }
      H5Id d(H5_CHECK(H5Dopen2(rng, gname, H5P_DEFAULT)), H5Dclose);
      H5Id fspace(H5_CHECK(H5Dget_space(d)), H5Sclose);
      hsize_t dims[2] = {0, 0};
      H5_CHECK(H5Sget_simple_extent_dims(fspace, dims, nullptr));
      std::vector<uint8_t> row(dims[1]);
      hsize_t n = same_world ? dims[1] : 0;
      if (same_world) {
        hsize_t start[2] = {static_cast<hsize_t>(rank), 0}, count[2] = {1, dims[1]};
        H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, count, nullptr));
      } else {
        H5_CHECK(H5Sselect_none(fspace));
      }
      hsize_t mdim = std::max<hsize_t>(dims[1], 1);
      H5Id mspace(H5_CHECK(H5Screate_simple(1, &mdim, nullptr)), H5Sclose);
      if (n == 0) H5_CHECK(H5Sselect_none(mspace));
      uint8_t dummy = 0;
      H5_CHECK(H5Dread(d, H5T_NATIVE_UINT8, mspace, fspace, dxpl, n ? row.data() : &dummy));
      if (same_world) {
        auto t = torch::from_blob(row.data(), {static_cast<int64_t>(row.size())}, torch::kUInt8).clone();
        gen.set_state(t);
      }
    }
  }
  if (file.close() < 0) throw Error(fmt::format("closing checkpoint '{}' failed", chosen));
  strategy.finish_load(steps);
  return out;
}

}  // namespace llmtrain
