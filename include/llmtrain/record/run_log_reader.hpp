// Reading a run log back (docs/run-log.md): the one reader of llmtrain-report,
// llmtrain-plan (--fit, --predict, --run_log) and the C++ tests. Every error is
// one line naming the file and, where one is missing, the field.
#pragma once
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace llmtrain {

// One run log, by section.
struct RunLogData {
  std::string path;
  nlohmann::json startup_info;      // an object holding "config" (and "model", "mfu", ... when the run wrote them)
  nlohmann::json iterations;        // training_iterations[]: an array
  nlohmann::json evals = nlohmann::json::array();     // eval_results[] (empty when the log has none)
  nlohmann::json summary = nlohmann::json::object();  // the summary (empty when the log has none)
  std::vector<std::string> errors;  // errors[], as text

  const nlohmann::json& config() const { return startup_info.at("config"); }
  // startup_info.<keys...>, or nullptr when absent.
  const nlohmann::json* startup(std::initializer_list<const char*> keys) const;
  // The number at startup_info.<keys...>; when absent or not a number, Error
  // "run log '<path>' has no startup_info.<keys...><why>".
  double startup_number(std::initializer_list<const char*> keys, const char* why = "") const;
  // Error "run log '<path>' <what>".
  [[noreturn]] void fail(const std::string& what) const;
};

// Reads and checks `path`: Error naming it when it cannot be read, is not JSON,
// or lacks startup_info, startup_info.config or training_iterations[].
RunLogData load_run_log(const std::string& path);
// The same checks on a log already parsed.
RunLogData parse_run_log(nlohmann::json log, const std::string& path);
// The log's JSON as it is, for checks of the schema itself (Error naming the
// file when it cannot be read or is not JSON).
nlohmann::json load_run_log_json(const std::string& path);

// Files as given; a directory stands for the run_*.json files in it (sorted),
// or below it with `recursive`. Error naming a directory that holds none.
std::vector<std::string> expand_run_logs(const std::vector<std::string>& args, bool recursive);

}  // namespace llmtrain
