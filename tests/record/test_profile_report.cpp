// The op count of llmtrain-report --profile on a hand-made Chrome trace: what
// is top-level, what is a view, which step and category each op, host wait and
// kernel belongs to (record/profile_report.hpp).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "llmtrain/core/error.hpp"             // defines: Error
#include "llmtrain/record/profile_report.hpp"  // defines: analyze_profile, op_category

using namespace llmtrain;

namespace {

nlohmann::json op(const std::string& name, double ts, double end, int tid = 1, const std::string& cat = "cpu_op",
                  int64_t correlation = -1) {
  nlohmann::json e = {{"ph", "X"}, {"cat", cat}, {"name", name}, {"pid", 100}, {"tid", tid}, {"ts", ts},
                      {"dur", end - ts}};
  if (correlation >= 0) e["args"] = {{"correlation", correlation}};
  return e;
}

// Two steps as Kineto writes them: ProfilerStep#N spans, cpu_op events nested by
// time on their thread, a CUDA launch and its kernel tied by a correlation id.
nlohmann::json hand_made_trace() {
  nlohmann::json ev = nlohmann::json::array();
  ev.push_back(op("ProfilerStep#3", 0, 1000, 1, "user_annotation"));
  ev.push_back(op("aten::linear", 10, 100));          // GEMM, counted
  ev.push_back(op("aten::t", 11, 12));                //   view inside it
  ev.push_back(op("aten::addmm", 13, 90));            //   nested: not counted
  ev.push_back(op("aten::view", 101, 102));           // a view at top level: left out
  ev.push_back(op("aten::reshape", 103, 120));        // a reshape that copies: its clone counts
  ev.push_back(op("aten::clone", 104, 119));          //   copy, counted
  ev.push_back(op("aten::copy_", 105, 118));          //     nested in the clone
  ev.push_back(op("aten::to", 121, 122));             // a no-op to(): nothing
  ev.push_back(op("aten::add", 130, 140));            // element-wise
  ev.push_back(op("llmtrain::fused_linear_cross_entropy", 150, 400));  // one op (GEMM)
  ev.push_back(op("aten::mm", 160, 200));             //   nested
  ev.push_back(op("cudaLaunchKernel", 170, 175, 1, "cuda_runtime", 7));
  ev.push_back(op("aten::item", 210, 220));           //   a host wait inside it
  ev.push_back(op("aten::_local_scalar_dense", 211, 219));  // the same wait
  ev.push_back(op("aten::mul", 500, 510, 2));         // another thread (backward): counted
  ev.push_back(op("aten::_foreach_add_", 600, 650));  // optimizer
  ev.push_back(op("aten::item", 610, 612));           //   a CPU kernel reading a scalar: no host wait on a GPU
  ev.push_back(op("aten::_local_scalar_dense", 610.5, 611.5));
  ev.push_back(op("cudaStreamSynchronize", 700, 710, 1, "cuda_runtime"));  // a host wait
  ev.push_back(op("ProfilerStep#4", 1000, 2000, 1, "user_annotation"));
  // On a GPU Kineto also writes each step's span on the device's timeline (seen on an
  // H100, 2026-11-27): the same step, not a third one.
  ev.push_back(op("ProfilerStep#3", 20, 990, 7, "gpu_user_annotation"));
  ev.push_back(op("ProfilerStep#4", 1020, 1990, 7, "gpu_user_annotation"));
  ev.push_back(op("aten::add", 1100, 1110));
  ev.push_back(op("aten::add", 2100, 2200));          // outside every step
  ev.push_back(op("ampere_sgemm_128x64_tn", 2500, 2550, 7, "kernel", 7));  // launched in step 3 by the loss
  ev.push_back(op("vectorized_elementwise_kernel", 1500, 1520, 7, "kernel"));  // no launch known: its own time
  ev.push_back(op("Memcpy DtoH (Device -> Pageable)", 1600, 1610, 7, "gpu_memcpy"));
  ev.push_back({{"ph", "i"}, {"name", "[memory]"}, {"ts", 5}, {"pid", 100}, {"tid", 1}});  // not an op
  return {{"traceEvents", ev}, {"schemaVersion", 1}};
}

}  // namespace

TEST(ProfileReport, CountsTopLevelOpsPerStepWithoutViewsOrNestedOps) {
  const auto a = analyze_profile(hand_made_trace(), "hand.pt.trace.json");
  ASSERT_EQ(a.steps.size(), 2u);
  const auto& s3 = a.steps[0];
  EXPECT_EQ(s3.name, "ProfilerStep#3");
  EXPECT_DOUBLE_EQ(s3.ms, 1.0);
  // linear, clone, add, the fused loss, mul (other thread), _foreach_add_: a count
  // that took a nested op (addmm, copy_, mm) or a view (t, view, reshape, to) is off.
  EXPECT_EQ(s3.ops, 6);
  EXPECT_EQ(s3.ops_by_category.at("GEMM"), 2);
  EXPECT_EQ(s3.ops_by_category.at("copy"), 1);
  EXPECT_EQ(s3.ops_by_category.at("element-wise"), 2);
  EXPECT_EQ(s3.ops_by_category.at("optimizer"), 1);
  EXPECT_EQ(s3.ops_by_name.count("aten::addmm"), 0u);
  EXPECT_EQ(s3.ops_by_name.count("aten::view"), 0u);
  EXPECT_EQ(s3.ops_by_name.at("llmtrain::fused_linear_cross_entropy"), 1);
  // item() and the _local_scalar_dense inside it are one wait; the stream synchronize another;
  // the item() inside _foreach_add_ (ATen's CPU kernel) none.
  EXPECT_EQ(s3.host_syncs, 2);
  EXPECT_EQ(s3.syncs_by_kind.at("item (_local_scalar_dense)"), 1);
  EXPECT_EQ(s3.syncs_by_kind.at("cudaStreamSynchronize"), 1);
  // The GEMM kernel runs after the step's host span but was launched inside it, by the loss.
  ASSERT_TRUE(s3.has_kernels);
  EXPECT_NEAR(s3.kernel_ms, 0.05, 1e-12);
  EXPECT_NEAR(s3.kernel_ms_by_category.at("GEMM"), 0.05, 1e-12);

  const auto& s4 = a.steps[1];
  EXPECT_EQ(s4.ops, 1);  // the add after the last step is in none
  EXPECT_EQ(s4.host_syncs, 1);
  EXPECT_EQ(s4.syncs_by_kind.at("copy to host"), 1);
  EXPECT_NEAR(s4.kernel_ms_by_category.at("element-wise"), 0.02, 1e-12);
  EXPECT_NEAR(s4.kernel_ms_by_category.at("copy"), 0.01, 1e-12);

  const std::string text = format_profile_report({a});
  for (const char* c : {"GEMM", "attention", "norm", "element-wise", "copy", "optimizer", "communication",
                        "host synchronizations: 2", "6 top-level ops", "llmtrain::fused_linear_cross_entropy 1"})
    EXPECT_NE(text.find(c), std::string::npos) << c << " not in:\n" << text;
  EXPECT_EQ(profile_report_json({a})[0]["steps"][0]["ops"], 6);
}

TEST(ProfileReport, TraceWithoutStepsIsOneStep) {
  nlohmann::json ev = nlohmann::json::array({op("aten::add", 0, 1), op("aten::mul", 2, 3), op("aten::view", 4, 5)});
  const auto a = analyze_profile({{"traceEvents", ev}});
  ASSERT_EQ(a.steps.size(), 1u);
  EXPECT_EQ(a.steps[0].name, "whole trace");
  EXPECT_EQ(a.steps[0].ops, 2);
  EXPECT_FALSE(a.steps[0].has_kernels);
}

TEST(ProfileReport, CategoriesByName) {
  EXPECT_EQ(op_category("aten::mm"), "GEMM");
  EXPECT_EQ(op_category("aten::linear"), "GEMM");
  EXPECT_EQ(op_category("aten::native_layer_norm"), "norm");
  EXPECT_EQ(op_category("aten::_fused_rms_norm_backward"), "norm");
  EXPECT_EQ(op_category("aten::_foreach_norm"), "optimizer");  // the gradient norm, not a layer's
  EXPECT_EQ(op_category("aten::_fused_adamw_"), "optimizer");
  EXPECT_EQ(op_category("aten::_scaled_dot_product_flash_attention_for_cpu"), "attention");
  EXPECT_EQ(op_category("aten::silu"), "element-wise");
  EXPECT_EQ(op_category("aten::copy_"), "copy");
  EXPECT_EQ(op_category("llmtrain::all_reduce"), "communication");
  EXPECT_TRUE(is_view_op("aten::transpose"));
  EXPECT_TRUE(is_view_op("aten::unbind"));
  EXPECT_FALSE(is_view_op("aten::clone"));
  EXPECT_EQ(kernel_category("sm90_xmma_gemm_bf16bf16_bf16f32"), "GEMM");
  EXPECT_EQ(kernel_category("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), "communication");
  EXPECT_EQ(kernel_category("pytorch_flash::flash_fwd_kernel"), "attention");
  EXPECT_EQ(kernel_category("multi_tensor_apply_kernel<FusedAdamMathFunctor>"), "optimizer");
}

TEST(ProfileReport, RefusesWhatIsNotATrace) {
  try {
    analyze_profile(nlohmann::json::array(), "run_1.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("run_1.json: not a Chrome trace"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_profile("/nonexistent/rank0.pt.trace.json"), Error);
}
