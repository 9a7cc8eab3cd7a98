#include "data/data_index.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data/shard_io.hpp"
#include "llmtrain/core/error.hpp"

namespace llmtrain::data {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::vector<ShardEntry> read_split(const json& j, Split which, const std::string& index_path,
                                   int64_t* documents) {
  const std::string split = to_string(which);  // index.json's key
  std::vector<ShardEntry> out;
  if (!j.contains("splits") || !j["splits"].contains(split)) return out;
  const json& s = j["splits"][split];
  *documents = s.value("documents", int64_t{0});
  for (const auto& e : s.at("shards")) {
    ShardEntry sh{e.at("file").get<std::string>(), e.at("tokens").get<int64_t>()};
    if (sh.file.find('/') != std::string::npos || sh.file.empty())
      throw DataError(fmt::format("{}: shard name '{}' must be a plain file name", index_path, sh.file));
    out.push_back(sh);
  }
  return out;
}

}  // namespace

DataIndex read_data_index(const std::string& dir) {
  if (dir.empty()) throw DataError("data_dir is empty; set it to a directory made by llmtrain-prepare");
  std::error_code ec;
  const auto st = fs::status(dir, ec);
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
    throw DataError(fmt::format("cannot access data directory '{}' (data_dir): {}", dir, ec.message()));
  if (!fs::is_directory(st))
    throw DataError(fmt::format("data directory '{}' does not exist (data_dir); make one with llmtrain-prepare",
                                dir));
  const std::string index_path = (fs::path(dir) / "index.json").string();
  errno = 0;
  std::ifstream in(index_path);
  if (!in && errno != ENOENT && errno != 0)
    throw DataError(fmt::format("cannot read '{}': {}", index_path, std::strerror(errno)));
  if (!in)
    throw DataError(fmt::format("data directory '{}' has no index.json ('{}' is missing: not made by "
                                "llmtrain-prepare, or its run was interrupted); re-run llmtrain-prepare",
                                dir, index_path));
  DataIndex idx;
  try {
    json j = json::parse(in);
    if (j.value("format", std::string()) != "llmtrain-tokens")
      throw DataError(fmt::format("{}: not an llmtrain token index (\"format\" is not \"llmtrain-tokens\")",
                                  index_path));
    const int64_t version = j.at("format_version").get<int64_t>();
    if (version != kFormatVersion)
      throw DataError(fmt::format("{}: format_version {} but this llmtrain reads version {}", index_path, version,
                                  kFormatVersion));
    idx.info.dir = dir;
    idx.info.vocab_size = j.at("vocab_size").get<int64_t>();
    idx.info.tokenizer = j.at("tokenizer").get<std::string>();
    idx.info.tokenizer_hash = j.at("tokenizer_hash").get<std::string>();
    idx.info.token_dtype = j.at("token_dtype").get<std::string>();
    idx.eos_id = j.value("eos_id", int64_t{-1});
    idx.info.eos_id = idx.eos_id;
    idx.train = read_split(j, Split::train, index_path, &idx.train_documents);
    idx.val = read_split(j, Split::val, index_path, &idx.val_documents);
  } catch (const json::exception& e) {
    throw DataError(fmt::format("{}: malformed index ({})", index_path, e.what()));
  }
  auto& info = idx.info;
  if (info.token_dtype != "uint16" && info.token_dtype != "uint32")
    throw DataError(fmt::format("{}: token_dtype '{}'; expected uint16 or uint32", index_path, info.token_dtype));
  if (info.vocab_size <= 0 || (info.token_dtype == "uint16" && info.vocab_size > 65536))
    throw DataError(fmt::format("{}: vocab_size {} does not fit token_dtype {}", index_path, info.vocab_size,
                                info.token_dtype));

  // Every shard must agree with the index: one tokenizer, one vocabulary, one dtype.
  for (const Split split : {Split::train, Split::val}) {
    auto& shards = split == Split::train ? idx.train : idx.val;
    int64_t total = 0;
    for (const auto& sh : shards) {
      const std::string path = (fs::path(dir) / sh.file).string();
      const ShardHeader h = read_shard_header(path);
      if (h.tokenizer != info.tokenizer || h.tokenizer_hash != info.tokenizer_hash)
        throw DataError(fmt::format(
            "mixed tokenizers in '{}': shard '{}' was made with tokenizer '{}' (hash '{}') but index.json says "
            "'{}' (hash '{}'); every shard of a data directory must come from one llmtrain-prepare run",
            dir, path, h.tokenizer, h.tokenizer_hash, info.tokenizer, info.tokenizer_hash));
      if (h.vocab_size != info.vocab_size)
        throw DataError(fmt::format("shard '{}' has vocab_size {} but index.json says {}", path, h.vocab_size,
                                    info.vocab_size));
      if (h.dtype != info.token_dtype)
        throw DataError(fmt::format("shard '{}' stores {} tokens but index.json says {}", path, h.dtype,
                                    info.token_dtype));
      if (h.num_tokens != sh.tokens)
        throw DataError(fmt::format("shard '{}' holds {} tokens but index.json says {}", path, h.num_tokens,
                                    sh.tokens));
      if (h.split != to_string(split))  // the shard file's attribute, as written by write_split_shards
        throw DataError(fmt::format("shard '{}' belongs to split '{}' but index.json lists it under '{}'", path,
                                    h.split, to_string(split)));
      total += h.num_tokens;
    }
    (split == Split::train ? info.train_tokens : info.val_tokens) = total;
    (split == Split::train ? info.train_shards : info.val_shards) = static_cast<int64_t>(shards.size());
  }
  return idx;
}

std::string data_index_json(const DataIndex& index, const std::vector<std::string>& sources) {
  json j;
  j["format"] = "llmtrain-tokens";
  j["format_version"] = kFormatVersion;
  j["vocab_size"] = index.info.vocab_size;
  j["tokenizer"] = index.info.tokenizer;
  j["tokenizer_hash"] = index.info.tokenizer_hash;
  j["token_dtype"] = index.info.token_dtype;
  j["eos_id"] = index.eos_id;
  j["sources"] = sources;
  for (const Split split : {Split::train, Split::val}) {
    const auto& shards = split == Split::train ? index.train : index.val;
    json s;
    int64_t total = 0;
    s["shards"] = json::array();
    for (const auto& sh : shards) {
      s["shards"].push_back({{"file", sh.file}, {"tokens", sh.tokens}});
      total += sh.tokens;
    }
    s["tokens"] = total;
    s["documents"] = split == Split::train ? index.train_documents : index.val_documents;
    j["splits"][to_string(split)] = s;
  }
  return j.dump(2) + "\n";
}

}  // namespace llmtrain::data
