// What a profile_steps trace says, per step (llmtrain-report --profile): the
// top-level ops by category, the host synchronizations and, on a GPU, kernel
// time by category. User doc: docs/performance.md ("A trace of any step").
//
// The op count: a top-level op is an `aten::` or `llmtrain::` CPU op not inside
// another such op of its thread. Views and ops that only alias or allocate
// (is_view_op) are left out and are transparent: what runs inside them is
// judged as if they were not there (a reshape that copies counts its clone, a
// no-op `to` counts nothing). On a CPU that count is the number of kernels a GPU
// would launch for the same step, op for op.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace llmtrain {

// The categories, in the order the report prints them.
const std::vector<std::string>& profile_categories();
// The category of a CPU op by its name (with or without the aten::/llmtrain:: prefix).
std::string op_category(const std::string& op_name);
// The category of a GPU kernel by its name (where no launching op is known).
std::string kernel_category(const std::string& kernel_name);
// Views, aliases and allocations: no kernel of their own.
bool is_view_op(const std::string& op_name);

struct ProfileStep {
  std::string name;  // "ProfilerStep#5", or "whole trace" when the trace marks no steps
  double ms = 0;     // the span's wall time on the host
  int64_t ops = 0;   // top-level ops
  std::map<std::string, int64_t> ops_by_category;
  std::map<std::string, int64_t> ops_by_name;
  int64_t host_syncs = 0;  // outermost ones: an item() that waits in cudaStreamSynchronize is one
  std::map<std::string, int64_t> syncs_by_kind;
  bool has_kernels = false;
  double kernel_ms = 0;
  std::map<std::string, double> kernel_ms_by_category;
};

struct ProfileAnalysis {
  std::string path;
  std::vector<ProfileStep> steps;
};

// A Chrome-trace object ({"traceEvents": [...]}) as Kineto (ProfilerResult::save,
// torch.profiler's export_chrome_trace) writes it. Throws an Error naming `path`
// when it is not one.
ProfileAnalysis analyze_profile(const nlohmann::json& trace, const std::string& path = "");
// Reads and analyzes one trace file; errors name the file.
ProfileAnalysis load_profile(const std::string& path);

std::string format_profile_report(const std::vector<ProfileAnalysis>& profiles);
nlohmann::json profile_report_json(const std::vector<ProfileAnalysis>& profiles);

// llmtrain-report --profile FILE...: prints the report of each trace (a
// directory: its *.pt.trace.json files) and, with `json_out`, writes
// profile_report_json there. Returns the exit code.
int run_profile_report(const std::vector<std::string>& files, const std::string& json_out);

}  // namespace llmtrain
