#include "data_test_util.hpp"

#include <hdf5.h>

#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/hdf5_util.hpp"     // defines: H5_CHECK (under the HDF5 lock)
#include "data/prepare_comm.hpp"
#include "llmtrain/core/error.hpp"
#include "test_util.hpp"

namespace llmtrain::testing {

namespace fs = std::filesystem;

std::filesystem::path fresh_dir(const std::string& name) {
  // One directory per world size: CTest runs a test's _np1/_np2/_np3 at once.
  const auto p = fs::path(build_dir()) / "test-scratch" / (name + "_w" + std::to_string(runtime().world_size()));
  if (runtime().rank() == 0) {
    fs::remove_all(p);
    fs::create_directories(p);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return p;
}

std::vector<std::string> write_corpus(const fs::path& dir, int n_docs) {
  if (runtime().rank() == 0) {
    std::mt19937 rng(1234);
    fs::create_directories(dir / "docs");
    auto doc = [&](int i) {
      std::string s;
      const int len = 200 + static_cast<int>(rng() % 3000);
      for (int j = 0; j < len; ++j) s.push_back(static_cast<char>(1 + (rng() + i) % 255));
      return s;
    };
    for (int i = 0; i < n_docs; ++i) {
      std::ofstream(dir / "docs" / ("doc_" + std::to_string(1000 + i) + ".txt"), std::ios::binary) << doc(i);
    }
    std::ofstream j(dir / "docs.jsonl", std::ios::binary);
    for (int i = 0; i < n_docs; ++i) {
      // Valid UTF-8 text with escapes: letters, newlines, quotes.
      std::string t;
      const int len = 100 + static_cast<int>(rng() % 2000);
      for (int k = 0; k < len; ++k) t.push_back("abcdefghij \n\"\\xyz"[rng() % 17]);
      j << nlohmann::json{{"id", i}, {"text", t}}.dump() << "\n";
      if (i % 7 == 3) j << "\n";  // blank lines are skipped
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return {(dir / "docs").string(), (dir / "docs.jsonl").string()};
}

PrepareResult prepare_world(PrepareOptions o) {
  o.progress = false;
  return data::prepare_data_on(o, MPI_COMM_WORLD);
}

std::vector<uint32_t> read_shard_tokens(const std::string& path) {
  hid_t f = H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  hid_t d = H5_CHECK(H5Dopen2(f, "tokens", H5P_DEFAULT));
  hid_t s = H5_CHECK(H5Dget_space(d));
  hsize_t n = 0;
  H5Sget_simple_extent_dims(s, &n, nullptr);
  std::vector<uint32_t> v(n);
  if (n) H5_CHECK(H5Dread(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()));
  H5Sclose(s);
  H5Dclose(d);
  H5Fclose(f);
  return v;
}

namespace {
void int_attr(hid_t o, const char* name, int64_t v) {
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = H5_CHECK(H5Acreate2(o, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT));
  H5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, &v));
  H5Aclose(a);
  H5Sclose(sp);
}
void str_attr(hid_t o, const char* name, const std::string& v) {
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, v.size() + 1);
  hid_t a = H5_CHECK(H5Acreate2(o, name, t, sp, H5P_DEFAULT, H5P_DEFAULT));
  H5_CHECK(H5Awrite(a, t, v.c_str()));
  H5Aclose(a);
  H5Tclose(t);
  H5Sclose(sp);
}
}  // namespace

void write_raw_shard(const std::string& path, int64_t type, const std::vector<uint32_t>& tokens,
                     const std::string& tokenizer, int64_t vocab_size, const std::string& split) {
  hid_t f = H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  const hsize_t n = tokens.size();
  hid_t sp = H5Screate_simple(1, &n, nullptr);
  hid_t d = H5_CHECK(H5Dcreate2(f, "tokens", static_cast<hid_t>(type), sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  H5_CHECK(H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tokens.data()));
  int_attr(d, "format_version", 1);
  int_attr(d, "vocab_size", vocab_size);
  int_attr(d, "eos_id", 0);
  int_attr(d, "num_tokens", static_cast<int64_t>(n));
  int_attr(d, "shard_index", 0);
  str_attr(d, "tokenizer", tokenizer);
  str_attr(d, "tokenizer_hash", "");
  str_attr(d, "split", split);
  H5Dclose(d);
  H5Sclose(sp);
  H5Fclose(f);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace llmtrain::testing
