// The cost model's element-wise bytes of a block (prediction/cost_model.cpp,
// block_elementwise_bytes) against the ops a block actually runs on CPU: a
// RecordFunction observer records every ATen op of the forward with its inputs
// and outputs, and the bytes are derived from what it recorded (issue 51.4).
// Nothing here lists the ops a block should run: when model/layers.cpp changes
// what it dispatches (a fused norm, one-write splits), the recorded bytes
// change with it, and the cost model must follow.
#include <gtest/gtest.h>

#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>

#include <cmath>
#include <map>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include "llmtrain/model/transformer.hpp"      // defines: Transformer
#include "llmtrain/prediction/cost_model.hpp"  // defines: block_elementwise_bytes, RunShape
#include "llmtrain/record/profile_report.hpp"  // defines: is_view_op, op_category (the trace's conventions)

using namespace llmtrain;

namespace {

// The recorded forward: bytes read + written by the element-wise ops, by op name.
struct Recorded {
  double bytes = 0;
  std::map<std::string, double> by_op;
};
Recorded* g_recorded = nullptr;

// Distinct elements a kernel touches: a broadcast (stride-0) dimension is read once.
double tensor_bytes(const at::Tensor& t) {
  if (!t.defined()) return 0;
  double n = 1;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) != 0) n *= static_cast<double>(t.size(d));
  return n * static_cast<double>(t.element_size());
}
double ivalue_bytes(const c10::IValue& v) {
  if (v.isTensor()) return tensor_bytes(v.toTensor());
  double b = 0;
  if (v.isList())
    for (const auto& e : v.toListRef()) b += ivalue_bytes(e);
  return b;
}
// A parameter: its casts under autocast are the cost model's weight term, not the block's.
bool is_parameter(const c10::IValue& v) {
  return v.isTensor() && v.toTensor().defined() && v.toTensor().is_leaf() && v.toTensor().requires_grad();
}

// One open ATen op. Top-level ops (as the trace's op count: not inside another
// counted op, views transparent) that are not GEMMs or attention are measured,
// and so are the activation casts autocast makes inside a GEMM or attention op.
struct OpFrame : at::ObserverContext {
  std::string name;
  bool counted = false;  // a top-level op: what runs inside it is its own business
  bool gemm_like = false;
  bool measured = false;
  double in_bytes = 0;
};
thread_local std::vector<OpFrame*> t_open;

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  auto f = std::make_unique<OpFrame>();
  f->name = fn.name();
  if (f->name.rfind("aten::", 0) != 0) return nullptr;
  const OpFrame* top = nullptr;
  for (const OpFrame* o : t_open)
    if (o->counted) top = o;
  const auto inputs = fn.inputs();
  const bool weight_cast = f->name == "aten::_to_copy" && !inputs.empty() && is_parameter(inputs[0]);
  if (top == nullptr && !is_view_op(f->name)) {
    f->counted = true;
    const std::string cat = op_category(f->name);
    f->gemm_like = cat == "GEMM" || cat == "attention";
    f->measured = !f->gemm_like && !weight_cast;
  } else if (top != nullptr && top->gemm_like && f->name == "aten::_to_copy" && !weight_cast) {
    f->measured = true;  // autocast's cast of an activation for the GEMM or attention kernel
  }
  if (f->measured) {
    // copy_, fill_ and zero_ write their first argument without reading it.
    const bool write_only = f->name == "aten::copy_" || f->name == "aten::fill_" || f->name == "aten::zero_";
    for (size_t i = write_only ? 1 : 0; i < inputs.size(); ++i) f->in_bytes += ivalue_bytes(inputs[i]);
  }
  t_open.push_back(f.get());
  return f;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  auto* f = static_cast<OpFrame*>(ctx);
  if (f == nullptr) return;
  if (!t_open.empty() && t_open.back() == f) t_open.pop_back();
  if (!f->measured || g_recorded == nullptr) return;
  double out = 0;
  for (const auto& o : fn.outputs()) out += ivalue_bytes(o);
  g_recorded->bytes += f->in_bytes + out;
  g_recorded->by_op[f->name] += f->in_bytes + out;
}

struct CpuAutocast {
  explicit CpuAutocast(bool on, at::ScalarType dtype) : on_(on) {
    if (!on_) return;
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, dtype);
    at::autocast::increment_nesting();
  }
  ~CpuAutocast() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCPU, false);
  }
  bool on_;
};

struct Case {
  std::string name;
  ModelConfig model;
  ComputeDtype dtype = ComputeDtype::float32;
  bool bf16_params = false;
};

constexpr int64_t kBatch = 16;

// The forward of the whole model to the final norm (hidden()), recorded.
Recorded record_forward(const Case& c, int64_t layers) {
  ModelConfig m = c.model;
  m.n_layer = layers;
  torch::manual_seed(1);
  Transformer model(m);
  model->init_weights(1);
  if (c.bf16_params) model->to(torch::kBFloat16);
  const auto idx = torch::randint(m.vocab_size, {kBatch, m.block_size}, torch::kLong);
  Recorded r;
  g_recorded = &r;
  auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(on_start, on_end).needsInputs(true).needsOutputs(true).scopes(
          {at::RecordScope::FUNCTION}));
  {
    CpuAutocast autocast(c.dtype != ComputeDtype::float32, torch::kBFloat16);
    model->hidden(idx);
  }
  at::removeCallback(handle);
  g_recorded = nullptr;
  return r;
}

ModelConfig llama_shape() {
  ModelConfig m;
  m.vocab_size = 200;
  m.padded_vocab = 256;
  m.block_size = 16;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.n_embd = 64;
  m.head_dim = 16;
  m.ffn_hidden = 192;
  return m;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back({"llama fp32", llama_shape()});
  out.push_back({"llama bf16 autocast", llama_shape(), ComputeDtype::bfloat16});
  Case qwen{"qwen3 (qk_norm) bf16 autocast", llama_shape(), ComputeDtype::bfloat16};
  qwen.model.qk_norm = true;
  out.push_back(qwen);
  out.push_back({"llama bf16 parameters", llama_shape(), ComputeDtype::bfloat16, true});
  Case gpt2{"gpt2 fp32", llama_shape()};
  gpt2.model.n_kv_head = 4;
  gpt2.model.norm = NormKind::layernorm;
  gpt2.model.pos_encoding = PosEncoding::learned;
  gpt2.model.ffn = FfnKind::gelu;
  gpt2.model.ffn_hidden = 256;
  gpt2.model.bias = true;
  out.push_back(gpt2);
  return out;
}

}  // namespace

// One block = the forward of 3 layers less that of 2 (the embedding, the final
// norm and the RoPE tables cancel). The cost model's figure must be within 5% of
// the bytes the recorded ops read and write (at 43ca912 it was within 1.3%: the
// model leaves out the broadcast reads of the RoPE tables and the norms'
// weights). The fused-kernel figure of the same block (what the published runs'
// frameworks move) must not pass: the check tells the two apart.
TEST(CostModelAgainstRecordedOps, BlockElementwiseBytes) {
  constexpr double kTolerance = 0.05;
  for (const auto& c : cases()) {
    const Recorded three = record_forward(c, 3), two = record_forward(c, 2);
    const double recorded = three.bytes - two.bytes;
    RunShape run;
    run.model = c.model;
    run.dtype = c.dtype;
    run.batch_size = kBatch;
    run.param_bytes = c.bf16_params ? 2.0 : 4.0;
    const double predicted = block_elementwise_bytes(run);
    std::string ops;
    for (const auto& [name, b] : three.by_op) {
      const double per_block = b - (two.by_op.count(name) ? two.by_op.at(name) : 0.0);
      if (per_block != 0) ops += fmt::format("\n    {:<40} {:>10.0f}", name, per_block);
    }
    std::cout << fmt::format("{}: recorded {:.0f} bytes per block, cost model {:.0f} ({:+.1f}%)\n", c.name, recorded,
                             predicted, 100.0 * (predicted / recorded - 1.0));
    if (c.model.norm == NormKind::rmsnorm && c.model.pos_encoding == PosEncoding::rope) {
      RunShape fused = run;
      fused.elementwise = ElementwiseKernels::fused;
      EXPECT_GT(std::abs(block_elementwise_bytes(fused) / recorded - 1.0), kTolerance)
          << c.name << ": the fused-kernel figure matches the recorded ops too; the check cannot tell them apart";
    }
    EXPECT_NEAR(predicted / recorded, 1.0, kTolerance)
        << c.name << ": cost model " << predicted << " bytes per block, the recorded ops " << recorded
        << " (per op, one block):" << ops;
  }
}
