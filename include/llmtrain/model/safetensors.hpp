// safetensors files (the format of Hugging Face checkpoints), read and written
// in C++ with no Python: an 8-byte little-endian header length N, N bytes of
// JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
// {str: str}}, then the tensors' bytes (offsets relative to the end of the header).
// Every check names the file and the tensor; nothing is read past what the
// header was checked against.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace llmtrain {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;              // "F32", "BF16", ... as in the header
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;    // byte range in the data section
};

// A safetensors file opened for reading (memory-mapped). The constructor checks
// the whole header: its length against the file size, the JSON, every dtype
// (F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL), shape x element size = byte count,
// offsets inside the data and not overlapping. DataError names the file (and
// the tensor) and what was expected.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const;
  // DataError naming the file and the tensor when it is absent.
  const SafetensorsEntry& entry(const std::string& name) const;
  // Tensor names in file order (by data offset).
  std::vector<std::string> names() const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // A CPU tensor of the stored dtype and shape (a copy of the bytes).
  torch::Tensor tensor(const std::string& name) const;

 private:
  std::string path_;
  std::vector<SafetensorsEntry> entries_;  // by data offset
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  const unsigned char* data_ = nullptr;    // start of the data section inside the mapping
  void* map_ = nullptr;
  size_t map_size_ = 0;
};

// Writes `tensors` (any device, float or integer dtypes) in the given order as
// one safetensors file, atomically (core/atomic_file.hpp: temporary name, fsync,
// rename). The header is padded with spaces to a multiple of 8 bytes, as the
// Python library does. Error names the path on failure.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The safetensors word for a dtype ("F32", "BF16", ...); Error for one the
// format has no word for.
std::string safetensors_dtype(torch::ScalarType t);

}  // namespace llmtrain
