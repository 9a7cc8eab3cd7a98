#include "llmtrain/model/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "llmtrain/core/atomic_file.hpp"
#include "llmtrain/core/error.hpp"

namespace llmtrain {

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors is little-endian; so is every host we run on");

struct DtypeInfo {
  const char* word;
  torch::ScalarType type;
  int64_t size;
};
// The dtypes this reader maps to torch tensors (F8_* and unsigned wide ints are refused).
constexpr DtypeInfo kDtypes[] = {
    {"F64", torch::kFloat64, 8}, {"F32", torch::kFloat32, 4}, {"F16", torch::kFloat16, 2},
    {"BF16", torch::kBFloat16, 2}, {"I64", torch::kInt64, 8}, {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},   {"I8", torch::kInt8, 1},       {"U8", torch::kUInt8, 1},
    {"BOOL", torch::kBool, 1},
};

const DtypeInfo* find_dtype(const std::string& word) {
  for (const auto& d : kDtypes)
    if (word == d.word) return &d;
  return nullptr;
}

std::string known_dtypes() {
  std::string s;
  for (const auto& d : kDtypes) s += (s.empty() ? "" : " ") + std::string(d.word);
  return s;
}

}  // namespace

std::string safetensors_dtype(torch::ScalarType t) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d.word;
  throw Error(fmt::format("safetensors has no dtype for {}", c10::toString(t)));
}

// ---- reading ---------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError(fmt::format("safetensors file '{}': cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw DataError(fmt::format("safetensors file '{}': cannot stat: {}", path, std::strerror(err)));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    throw DataError(fmt::format("safetensors file '{}': {} bytes, shorter than the 8-byte header length (truncated?)",
                                path, size));
  }
  map_size_ = static_cast<size_t>(size);
  map_ = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw DataError(fmt::format("safetensors file '{}': cannot map: {}", path, std::strerror(map_err)));
  }
  try {
    const auto* bytes = static_cast<const unsigned char*>(map_);
    uint64_t n = 0;
    std::memcpy(&n, bytes, 8);  // little-endian u64
    if (n > size - 8)
      throw DataError(fmt::format("safetensors file '{}': header length {} runs past the end of the file ({} bytes "
                                  "after the length; truncated or not a safetensors file)",
                                  path, n, size - 8));
    const uint64_t data_size = size - 8 - n;
    data_ = bytes + 8 + n;
    nlohmann::json h;
    try {
      h = nlohmann::json::parse(reinterpret_cast<const char*>(bytes + 8), reinterpret_cast<const char*>(bytes + 8 + n));
    } catch (const nlohmann::json::exception& e) {
      throw DataError(fmt::format("safetensors file '{}': the {}-byte header is not valid JSON ({})", path, n,
                                  e.what()));
    }
    if (!h.is_object())
      throw DataError(fmt::format("safetensors file '{}': the header is not a JSON object", path));
    for (auto it = h.begin(); it != h.end(); ++it) {
      const std::string& name = it.key();
      const auto& v = it.value();
      if (name == "__metadata__") {
        if (!v.is_object())
          throw DataError(fmt::format("safetensors file '{}': __metadata__ is not an object of strings", path));
        for (auto m = v.begin(); m != v.end(); ++m) {
          if (!m.value().is_string())
            throw DataError(fmt::format("safetensors file '{}': __metadata__ '{}' is not a string", path, m.key()));
          metadata_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      auto bad = [&](const std::string& what) {
        return DataError(fmt::format("safetensors file '{}': tensor '{}': {}", path, name, what));
      };
      if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
        throw bad("expected an object with dtype, shape and data_offsets");
      if (!v["dtype"].is_string()) throw bad("dtype is not a string");
      SafetensorsEntry e;
      e.name = name;
      e.dtype = v["dtype"].get<std::string>();
      const DtypeInfo* d = find_dtype(e.dtype);
      if (!d) throw bad(fmt::format("dtype '{}' is not one this reader reads ({})", e.dtype, known_dtypes()));
      if (!v["shape"].is_array()) throw bad("shape is not an array");
      unsigned __int128 numel = 1;
      for (const auto& s : v["shape"]) {
        if (!s.is_number_unsigned()) throw bad(fmt::format("shape {} has an entry that is not a size", v["shape"].dump()));
        e.shape.push_back(s.get<int64_t>());
        numel *= static_cast<unsigned __int128>(s.get<uint64_t>());
        if (numel > (static_cast<unsigned __int128>(1) << 62)) throw bad(fmt::format("shape {} is too large", v["shape"].dump()));
      }
      const auto& off = v["data_offsets"];
      if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
        throw bad(fmt::format("data_offsets {} is not [begin, end]", off.dump()));
      e.begin = off[0].get<uint64_t>();
      e.end = off[1].get<uint64_t>();
      if (e.begin > e.end || e.end > data_size)
        throw bad(fmt::format("data_offsets [{}, {}] lie outside the data section of {} bytes (truncated file?)",
                              e.begin, e.end, data_size));
      const unsigned __int128 want = numel * static_cast<unsigned __int128>(d->size);
      if (want != e.end - e.begin)
        throw bad(fmt::format("shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}", v["shape"].dump(),
                              e.dtype, static_cast<uint64_t>(want), e.begin, e.end, e.end - e.begin));
      entries_.push_back(std::move(e));
    }
    std::sort(entries_.begin(), entries_.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (i > 0 && entries_[i].begin < entries_[i - 1].end)
        throw DataError(fmt::format("safetensors file '{}': tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", path,
                                    entries_[i - 1].name, entries_[i - 1].begin, entries_[i - 1].end,
                                    entries_[i].name, entries_[i].begin, entries_[i].end));
      index_[entries_[i].name] = i;
    }
  } catch (...) {
    ::munmap(map_, map_size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

bool SafetensorsFile::contains(const std::string& name) const { return index_.count(name) > 0; }

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end())
    throw DataError(fmt::format("safetensors file '{}' has no tensor '{}'", path_, name));
  return entries_[it->second];
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.name);
  return out;
}

torch::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  const DtypeInfo* d = find_dtype(e.dtype);
  auto out = torch::empty(e.shape, torch::TensorOptions().dtype(d->type));
  if (e.end > e.begin) std::memcpy(out.data_ptr(), data_ + e.begin, e.end - e.begin);
  return out;
}

// ---- writing ---------------------------------------------------------------------------

void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  std::vector<torch::Tensor> host;  // contiguous CPU copies, in file order
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    LLMTRAIN_CHECK(!h.contains(name), "write_safetensors '{}': tensor '{}' given twice", path.string(), name);
    auto c = t.detach().to(torch::kCPU).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(c.numel()) * static_cast<uint64_t>(c.element_size());
    h[name] = {{"dtype", safetensors_dtype(c.scalar_type())},
               {"shape", c.sizes().vec()},
               {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    host.push_back(std::move(c));
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t n = header.size();

  std::vector<std::string_view> pieces = {{reinterpret_cast<const char*>(&n), 8}, header};
  for (const auto& c : host)
    pieces.emplace_back(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()) * c.element_size());
  write_file_atomic(path, pieces);  // fsync, rename, directory fsync
}

}  // namespace llmtrain
