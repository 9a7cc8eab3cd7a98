#include "llmtrain/record/run_log_reader.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "llmtrain/core/error.hpp"

namespace llmtrain {

namespace fs = std::filesystem;
using nlohmann::json;

const json* RunLogData::startup(std::initializer_list<const char*> keys) const {
  const json* p = &startup_info;
  for (const char* k : keys) {
    if (!p->is_object()) return nullptr;
    auto it = p->find(k);
    if (it == p->end()) return nullptr;
    p = &*it;
  }
  return p;
}

double RunLogData::startup_number(std::initializer_list<const char*> keys, const char* why) const {
  const json* v = startup(keys);
  if (!v || !v->is_number()) fail(fmt::format("has no startup_info.{}{}", fmt::join(keys, "."), why));
  return v->get<double>();
}

void RunLogData::fail(const std::string& what) const { throw Error(fmt::format("run log '{}' {}", path, what)); }

json load_run_log_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error(fmt::format("cannot open run log '{}': {}", path, std::strerror(errno)));
  try {
    json j;
    f >> j;
    return j;
  } catch (const json::exception& e) {
    throw Error(fmt::format("run log '{}' is not valid JSON: {}", path, e.what()));
  }
}

RunLogData parse_run_log(json log, const std::string& path) {
  RunLogData r;
  r.path = path;
  // The section `key` of `from` (named `name`): nullptr when absent and not `required`.
  auto section = [&r](json& from, const char* key, const char* name, bool required, json::value_t type) -> json* {
    auto it = from.is_object() ? from.find(key) : from.end();
    if (!from.is_object() || it == from.end()) {
      if (required) r.fail(fmt::format("has no '{}' section (not an llmtrain run log?)", name));
      return nullptr;
    }
    if (it->type() != type)
      r.fail(fmt::format("has a '{}' section that is not {}", name,
                         type == json::value_t::array ? "an array" : "an object"));
    return &*it;
  };
  r.startup_info = std::move(*section(log, "startup_info", "startup_info", true, json::value_t::object));
  section(r.startup_info, "config", "startup_info.config", true, json::value_t::object);
  r.iterations = std::move(*section(log, "training_iterations", "training_iterations", true, json::value_t::array));
  if (json* e = section(log, "eval_results", "eval_results", false, json::value_t::array)) r.evals = std::move(*e);
  if (json* s = section(log, "summary", "summary", false, json::value_t::object)) r.summary = std::move(*s);
  if (auto it = log.find("errors"); it != log.end() && it->is_array())
    for (const auto& e : *it) r.errors.push_back(e.is_string() ? e.get<std::string>() : e.dump());
  return r;
}

RunLogData load_run_log(const std::string& path) { return parse_run_log(load_run_log_json(path), path); }

std::vector<std::string> expand_run_logs(const std::vector<std::string>& args, bool recursive) {
  std::vector<std::string> out;
  for (const auto& a : args) {
    if (!fs::is_directory(a)) {
      out.push_back(a);
      continue;
    }
    std::vector<std::string> found;
    auto consider = [&](const fs::directory_entry& e) {
      const auto name = e.path().filename().string();
      if (e.is_regular_file() && name.rfind("run_", 0) == 0 && e.path().extension() == ".json")
        found.push_back(e.path().string());
    };
    if (recursive)
      for (const auto& e : fs::recursive_directory_iterator(a)) consider(e);
    else
      for (const auto& e : fs::directory_iterator(a)) consider(e);
    if (found.empty()) throw Error(fmt::format("directory '{}' holds no run_*.json run logs", a));
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

}  // namespace llmtrain
