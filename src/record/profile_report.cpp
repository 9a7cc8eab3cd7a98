// The analysis of a profile_steps trace (record/profile_report.hpp).
#include "llmtrain/record/profile_report.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "llmtrain/core/atomic_file.hpp"  // defines: write_file_atomic
#include "llmtrain/core/error.hpp"        // defines: Error, LLMTRAIN_CHECK

namespace llmtrain {

// Named, not anonymous: a unity build puts other sources' helpers in this translation unit.
namespace profile_report_detail {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool has(const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; }

std::string strip_prefix(const std::string& name) {
  for (const char* p : {"aten::", "llmtrain::"})
    if (starts_with(name, p)) return name.substr(std::char_traits<char>::length(p));
  return name;
}

bool counted_namespace(const std::string& name) { return starts_with(name, "aten::") || starts_with(name, "llmtrain::"); }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// One complete ("ph": "X") event of the trace.
struct Event {
  std::string name, cat;
  double ts = 0, end = 0;  // microseconds
  int64_t pid = 0, tid = 0;
  int64_t correlation = -1;
};

int64_t as_int(const nlohmann::json& v) {
  if (v.is_number()) return v.get<int64_t>();
  if (v.is_string()) {
    try {
      return std::stoll(v.get<std::string>());
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}
double as_double(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) return std::stod(v.get<std::string>());
  return 0;
}

bool inside(const Event& outer, const Event& e) { return e.ts >= outer.ts && e.end <= outer.end; }

enum class SyncKind { none, item, runtime };
SyncKind sync_kind(const Event& e) {
  if (e.cat == "cpu_op" && (e.name == "aten::item" || e.name == "aten::_local_scalar_dense")) return SyncKind::item;
  if (e.cat == "cuda_runtime" &&
      (e.name == "cudaDeviceSynchronize" || e.name == "cudaStreamSynchronize" || e.name == "cudaEventSynchronize"))
    return SyncKind::runtime;
  return SyncKind::none;
}

// The step whose span holds time t (-1: none).
int step_at(const std::vector<Event>& spans, double t) {
  for (size_t i = 0; i < spans.size(); ++i)
    if (t >= spans[i].ts && t <= spans[i].end) return static_cast<int>(i);
  return -1;
}


const std::vector<std::string>& profile_categories_impl() {
  static const std::vector<std::string> c = {"GEMM", "attention", "norm", "element-wise", "copy", "optimizer",
                                             "communication"};
  return c;
}

bool is_view_op_impl(const std::string& op_name) {
  // Views and aliases (no kernel), composites that alias or hand their work to a
  // child (to -> _to_copy, contiguous -> clone, reshape -> view or clone), and
  // allocations (no kernel until something writes them).
  static const std::set<std::string> views = {
      "as_strided", "view", "_unsafe_view", "view_as", "reshape", "reshape_as", "_reshape_alias", "flatten",
      "unflatten", "t", "transpose", "permute", "expand", "expand_as", "slice", "select", "narrow", "unsqueeze",
      "squeeze", "split", "split_with_sizes", "chunk", "unbind", "alias", "detach", "detach_", "lift_fresh",
      "view_as_real", "view_as_complex", "diagonal", "movedim", "swapaxes", "numpy_T", "mT", "real", "imag",
      "unfold", "indices", "values", "_indices", "_values", "to", "contiguous", "type_as", "resolve_conj",
      "resolve_neg", "_conj", "conj", "_neg_view", "empty", "empty_like", "empty_strided", "new_empty",
      "new_empty_strided", "resize_", "set_", "result_type", "is_nonzero", "_has_compatible_shallow_copy_type",
      "requires_grad_", "retain_grad", "_version", "output_nr", "_fw_primal", "_make_dual", "_unpack_dual"};
  return views.count(strip_prefix(op_name)) > 0;
}

std::string op_category_impl(const std::string& op_name) {
  const std::string n = strip_prefix(op_name);
  static const std::set<std::string> gemm = {"mm", "addmm", "addmm_", "bmm", "baddbmm", "baddbmm_", "matmul",
                                             "linear", "mv", "addmv", "dot", "vdot", "_addmm_activation", "addbmm",
                                             "einsum", "tensordot", "_scaled_mm", "mm_out", "addmm_out",
                                             // the LM head and its loss fused (model/fused_loss.cpp): GEMMs mostly
                                             "fused_linear_cross_entropy", "fused_linear_cross_entropy_backward",
                                             // compile=True's fused kernel of the same (src/kernels/xent.cpp)
                                             "lm_head_cross_entropy", "lm_head_cross_entropy_backward"};
  static const std::set<std::string> copy = {
      "copy_", "clone", "_to_copy", "cat", "stack", "_copy_from", "_copy_from_and_resize", "fill_", "zero_",
      "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full",
      "narrow_copy", "index_copy", "index_copy_", "masked_scatter", "_cat", "constant_pad_nd", "repeat",
      "repeat_interleave", "tensor", "scalar_tensor", "arange", "lift", "index_select", "gather"};
  const std::string l = lower(n);
  for (const char* c : {"nccl", "all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter", "broadcast",
                        "all_to_all", "barrier", "c10d"})
    if (has(l, c)) return "communication";
  if (starts_with(n, "_foreach_") || starts_with(n, "_fused_adam") || has(l, "adam") || starts_with(n, "_amp_"))
    return "optimizer";
  if (has(l, "attention") || has(l, "flash") || has(l, "_efficient_attention")) return "attention";
  // llmtrain::add_rmsnorm / add_layernorm (compile=True's fused residual add + norm) are norms too.
  if (has(l, "layer_norm") || has(l, "rms_norm") || has(l, "group_norm") || has(l, "batch_norm") ||
      has(l, "rmsnorm") || has(l, "layernorm"))
    return "norm";
  if (gemm.count(n)) return "GEMM";
  if (copy.count(n)) return "copy";
  return "element-wise";
}

std::string kernel_category_impl(const std::string& kernel_name) {
  const std::string l = lower(kernel_name);
  if (has(l, "nccl")) return "communication";
  if (has(l, "multi_tensor") || has(l, "adam") || has(l, "foreach")) return "optimizer";
  if (has(l, "flash") || has(l, "fmha") || has(l, "attention") || has(l, "sdpa")) return "attention";
  if (has(l, "memcpy") || has(l, "memset") || has(l, "copy") || has(l, "fill")) return "copy";
  if (has(l, "layer_norm") || has(l, "layernorm") || has(l, "rms_norm") || has(l, "rmsnorm") ||
      has(l, "rowwisemoments"))
    return "norm";
  if (has(l, "gemm") || has(l, "cutlass") || has(l, "xmma") || has(l, "cublas") || has(l, "sm90_") ||
      has(l, "sm80_") || has(l, "matmul") || has(l, "nvjet"))
    return "GEMM";
  return "element-wise";
}

ProfileAnalysis analyze_profile_impl(const nlohmann::json& trace, const std::string& path) {
  const std::string where = path.empty() ? "the trace" : path;
  LLMTRAIN_CHECK(trace.is_object() && trace.contains("traceEvents") && trace["traceEvents"].is_array(),
                 "{}: not a Chrome trace (expected an object with a traceEvents array, as profile_steps writes)",
                 where);
  std::vector<Event> events, spans;
  for (const auto& j : trace["traceEvents"]) {
    if (!j.is_object() || j.value("ph", "") != "X" || !j.contains("name") || !j.contains("ts")) continue;
    Event e;
    e.name = j["name"].is_string() ? j["name"].get<std::string>() : j["name"].dump();
    e.cat = j.value("cat", "");
    e.ts = as_double(j["ts"]);
    e.end = e.ts + (j.contains("dur") ? as_double(j["dur"]) : 0.0);
    if (j.contains("pid")) e.pid = as_int(j["pid"]);
    if (j.contains("tid")) e.tid = as_int(j["tid"]);
    if (j.contains("args") && j["args"].is_object() && j["args"].contains("correlation"))
      e.correlation = as_int(j["args"]["correlation"]);
    if (starts_with(e.name, "ProfilerStep#")) {
      // The host's span is the step; on a GPU Kineto writes the same step again on the
      // device's timeline (gpu_user_annotation), which is not another step.
      if (e.cat != "gpu_user_annotation") spans.push_back(e);
    } else {
      events.push_back(std::move(e));
    }
  }
  std::sort(spans.begin(), spans.end(), [](const Event& a, const Event& b) { return a.ts < b.ts; });
  ProfileAnalysis out;
  out.path = path;
  if (spans.empty()) {  // no steps marked: the whole trace is one
    Event all;
    all.name = "whole trace";
    all.ts = -1e300;
    all.end = 1e300;
    spans.push_back(all);
  }
  for (const auto& s : spans) {
    ProfileStep st;
    st.name = s.name;
    st.ms = s.name == "whole trace" ? 0.0 : (s.end - s.ts) / 1e3;
    out.steps.push_back(st);
  }

  // Per host thread, in time order, parents before their children.
  std::map<std::pair<int64_t, int64_t>, std::vector<const Event*>> threads;
  for (const auto& e : events)
    if (e.cat == "cpu_op" || e.cat == "cuda_runtime" || e.cat == "cuda_driver") threads[{e.pid, e.tid}].push_back(&e);
  // The category of the top-level op each launch happened in, by correlation id.
  std::unordered_map<int64_t, std::pair<std::string, double>> launch;  // correlation -> (category, launch time)
  for (auto& [key, list] : threads) {
    std::sort(list.begin(), list.end(), [](const Event* a, const Event* b) {
      return a->ts != b->ts ? a->ts < b->ts : a->end > b->end;
    });
    struct Open {
      const Event* e;
      bool counted;  // a top-level op (its children are not)
    };
    std::vector<Open> ops;                 // the enclosing aten::/llmtrain:: ops
    std::vector<const Event*> waits;       // the enclosing host synchronizations
    for (const Event* e : list) {
      while (!ops.empty() && !inside(*ops.back().e, *e)) ops.pop_back();
      while (!waits.empty() && !inside(*waits.back(), *e)) waits.pop_back();
      const Event* top = nullptr;  // the counted op this event is in
      for (const auto& o : ops)
        if (o.counted) top = o.e;
      if (e->cat == "cuda_runtime" && e->correlation >= 0)
        launch[e->correlation] = {top ? op_category_impl(top->name) : std::string(), e->ts};
      const int step = step_at(spans, e->ts);
      // An item() inside an ATen op is that CPU kernel reading a CPU scalar (the CPU
      // fused AdamW reads each step count): no wait on a GPU, whose kernels read
      // device memory. The project's own code (llmtrain:: ops) and the loop count.
      const bool in_aten = std::any_of(ops.begin(), ops.end(), [](const Open& o) {
        return starts_with(o.e->name, "aten::");
      });
      if (const SyncKind k = sync_kind(*e); k != SyncKind::none && !(k == SyncKind::item && in_aten)) {
        if (waits.empty() && step >= 0) {
          auto& st = out.steps[step];
          st.host_syncs += 1;
          st.syncs_by_kind[k == SyncKind::item ? "item (_local_scalar_dense)" : e->name] += 1;
        }
        waits.push_back(e);
      }
      if (e->cat != "cpu_op" || !counted_namespace(e->name)) continue;
      const bool counted = top == nullptr && !is_view_op_impl(e->name);
      ops.push_back({e, counted});
      if (!counted || step < 0) continue;
      auto& st = out.steps[step];
      st.ops += 1;
      st.ops_by_category[op_category_impl(e->name)] += 1;
      st.ops_by_name[e->name] += 1;
    }
  }

  // Device work: kernels, copies and memsets, charged to the step and category
  // of the op that launched them (by correlation id), else by their own time and name.
  for (const auto& e : events) {
    if (e.cat != "kernel" && e.cat != "gpu_memcpy" && e.cat != "gpu_memset") continue;
    std::string cat = e.cat == "kernel" ? std::string() : "copy";
    double t = e.ts;
    if (auto it = launch.find(e.correlation); e.correlation >= 0 && it != launch.end()) {
      if (cat.empty()) cat = it->second.first;
      t = it->second.second;
    }
    if (cat.empty()) cat = kernel_category_impl(e.name);
    const int step = step_at(spans, t);
    if (step < 0) continue;
    auto& st = out.steps[step];
    st.has_kernels = true;
    st.kernel_ms += (e.end - e.ts) / 1e3;
    st.kernel_ms_by_category[cat] += (e.end - e.ts) / 1e3;
    // A copy to the host: the host waits for it (a pageable copy returns when it is done).
    if (e.cat == "gpu_memcpy" && has(e.name, "DtoH")) {
      st.host_syncs += 1;
      st.syncs_by_kind["copy to host"] += 1;
    }
  }
  return out;
}

ProfileAnalysis load_profile_impl(const std::string& path) {
  std::ifstream in(path);
  LLMTRAIN_CHECK(in.good(), "--profile: cannot open {}", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(fmt::format("--profile: {} is not JSON (a profile_steps trace expected): {}", path, e.what()));
  }
  return analyze_profile_impl(j, path);
}

template <typename T>
std::string by_category(const std::map<std::string, T>& m, const char* spec) {
  std::string s;
  for (const auto& c : profile_categories_impl()) {
    const auto it = m.find(c);
    s += fmt::format("{}{} ", s.empty() ? "" : ", ", c) + fmt::format(fmt::runtime(spec), it == m.end() ? T{} : it->second);
  }
  return s;
}

std::string format_profile_report_impl(const std::vector<ProfileAnalysis>& profiles) {
  std::string s;
  for (const auto& p : profiles) {
    s += fmt::format("profile {}: {} step(s)\n", p.path, p.steps.size());
    for (const auto& st : p.steps) {
      s += fmt::format("  {}{}: {} top-level ops ({})\n", st.name,
                       st.ms > 0 ? fmt::format(" ({:.1f} ms)", st.ms) : std::string(), st.ops,
                       by_category(st.ops_by_category, "{}"));
      std::string syncs;
      for (const auto& [k, n] : st.syncs_by_kind) syncs += fmt::format("{}{} {}", syncs.empty() ? "" : ", ", k, n);
      s += fmt::format("    host synchronizations: {}{}\n", st.host_syncs, syncs.empty() ? "" : " (" + syncs + ")");
      if (st.has_kernels)
        s += fmt::format("    kernel time: {:.3f} ms ({})\n", st.kernel_ms, by_category(st.kernel_ms_by_category, "{:.3f}"));
      else
        s += "    kernel time: no device kernels in this trace (a CPU run)\n";
      std::string fused;
      for (const auto& [name, n] : st.ops_by_name)
        if (starts_with(name, "llmtrain::")) fused += fmt::format("{}{} {}", fused.empty() ? "" : ", ", name, n);
      if (!fused.empty()) s += "    llmtrain's fused ops: " + fused + "\n";
      std::vector<std::pair<int64_t, std::string>> most;
      for (const auto& [name, n] : st.ops_by_name) most.emplace_back(-n, name);
      std::sort(most.begin(), most.end());
      std::string top;
      for (size_t i = 0; i < std::min<size_t>(8, most.size()); ++i)
        top += fmt::format("{}{} {}", top.empty() ? "" : ", ", most[i].second, -most[i].first);
      if (!top.empty()) s += "    most launched: " + top + "\n";
    }
  }
  s += "(top-level ops: aten:: and llmtrain:: ops not inside another such op of their thread, views, aliases and "
       "allocations left out; docs/performance.md)\n";
  return s;
}

nlohmann::json profile_report_json_impl(const std::vector<ProfileAnalysis>& profiles) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : profiles) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& st : p.steps) {
      nlohmann::json j = {{"name", st.name},
                          {"ms", st.ms},
                          {"ops", st.ops},
                          {"ops_by_category", st.ops_by_category},
                          {"ops_by_name", st.ops_by_name},
                          {"host_syncs", st.host_syncs},
                          {"syncs_by_kind", st.syncs_by_kind}};
      if (st.has_kernels) j["kernel_ms"] = st.kernel_ms, j["kernel_ms_by_category"] = st.kernel_ms_by_category;
      steps.push_back(std::move(j));
    }
    out.push_back({{"path", p.path}, {"steps", steps}});
  }
  return out;
}

}  // namespace profile_report_detail

const std::vector<std::string>& profile_categories() { return profile_report_detail::profile_categories_impl(); }
bool is_view_op(const std::string& op_name) { return profile_report_detail::is_view_op_impl(op_name); }
std::string op_category(const std::string& op_name) { return profile_report_detail::op_category_impl(op_name); }
std::string kernel_category(const std::string& kernel_name) {
  return profile_report_detail::kernel_category_impl(kernel_name);
}
ProfileAnalysis analyze_profile(const nlohmann::json& trace, const std::string& path) {
  return profile_report_detail::analyze_profile_impl(trace, path);
}
ProfileAnalysis load_profile(const std::string& path) { return profile_report_detail::load_profile_impl(path); }
std::string format_profile_report(const std::vector<ProfileAnalysis>& profiles) {
  return profile_report_detail::format_profile_report_impl(profiles);
}
nlohmann::json profile_report_json(const std::vector<ProfileAnalysis>& profiles) {
  return profile_report_detail::profile_report_json_impl(profiles);
}

int run_profile_report(const std::vector<std::string>& files, const std::string& json_out) {
  std::vector<ProfileAnalysis> profiles;
  for (const auto& f : files) {
    if (!std::filesystem::is_directory(f)) {
      profiles.push_back(load_profile(f));
      continue;
    }
    std::vector<std::string> in_dir;  // out_dir/profile: one trace per rank
    for (const auto& e : std::filesystem::directory_iterator(f)) {
      const std::string n = e.path().filename().string();
      if (n.size() > 14 && n.compare(n.size() - 14, 14, ".pt.trace.json") == 0) in_dir.push_back(e.path().string());
    }
    LLMTRAIN_CHECK(!in_dir.empty(), "--profile: {} holds no *.pt.trace.json file (profile_steps writes them to "
                   "out_dir/profile/)", f);
    std::sort(in_dir.begin(), in_dir.end());
    for (const auto& p : in_dir) profiles.push_back(load_profile(p));
  }
  std::cout << format_profile_report(profiles);
  if (!json_out.empty()) write_file_atomic(json_out, profile_report_json(profiles).dump(2) + "\n");
  return 0;
}

}  // namespace llmtrain
