#include "model/recompute.hpp"

#include <mutex>
#include <optional>

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/torch.h>

#include "llmtrain/core/error.hpp"

namespace llmtrain::model_detail {

namespace {

// The autocast settings of one device type, captured at forward and put back
// around the recompute (backward may run outside the trainer's AutocastGuard).
struct AutocastState {
  at::DeviceType type = at::kCPU;
  bool enabled = false;
  at::ScalarType dtype = at::kBFloat16;

  static AutocastState capture(at::DeviceType type) {
    return {type, at::autocast::is_autocast_enabled(type), at::autocast::get_autocast_dtype(type)};
  }
};

// Puts an AutocastState in place while alive. The cast cache is off: the
// recomputed casts belong to this block's graph and go with it.
class AutocastRestore {
 public:
  explicit AutocastRestore(const AutocastState& s)
      : prev_(AutocastState::capture(s.type)), prev_cache_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_dtype(s.type, s.dtype);
    at::autocast::set_autocast_enabled(s.type, s.enabled);
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastRestore() {
    at::autocast::set_autocast_dtype(prev_.type, prev_.dtype);
    at::autocast::set_autocast_enabled(prev_.type, prev_.enabled);
    at::autocast::set_autocast_cache_enabled(prev_cache_);
  }
  AutocastRestore(const AutocastRestore&) = delete;
  AutocastRestore& operator=(const AutocastRestore&) = delete;

 private:
  AutocastState prev_;
  bool prev_cache_;
};

at::Tensor rng_state(at::Generator& gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}
void set_rng_state(at::Generator& gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// Sets the device's default generator to `state` while alive, then puts back
// the state it had (the draws after the recompute are those without it).
class RngFork {
 public:
  RngFork(at::Generator gen, const at::Tensor& state) : gen_(std::move(gen)), prev_(rng_state(gen_)) {
    set_rng_state(gen_, state);
  }
  ~RngFork() { set_rng_state(gen_, prev_); }
  RngFork(const RngFork&) = delete;
  RngFork& operator=(const RngFork&) = delete;

 private:
  at::Generator gen_;
  at::Tensor prev_;
};

at::Generator default_generator(const torch::Device& device) {
  return device.is_cpu() ? at::detail::getDefaultCPUGenerator() : at::globalContext().defaultGenerator(device);
}

// The graph node of one recomputed call: holds x's values, the body and the
// states of the call, nothing the body computed.
struct RecomputeBackward final : torch::autograd::Node {
  std::function<torch::Tensor(const torch::Tensor&)> body;
  torch::Tensor input;  // x, detached: (shape of x)
  AutocastState autocast;
  at::Tensor rng;  // the default generator's state before the forward; undefined unless random

  std::string name() const override { return "llmtrain::RecomputeBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    LLMTRAIN_CHECK(body, "a recomputed block ran backward twice (retain_graph is not supported with "
                         "activation_checkpointing)");
    auto x = input.detach().requires_grad_(true);
    torch::Tensor y;
    {
      torch::AutoGradMode grad_on(true);
      AutocastRestore autocast_guard(autocast);
      std::optional<RngFork> rng_guard;
      if (rng.defined()) rng_guard.emplace(default_generator(input.device()), rng);
      y = body(x);
    }
    // Reentrant: the block's own backward, its parameters' .grad included.
    if (grads[0].defined()) torch::autograd::backward({y}, {grads[0]});
    auto gx = x.grad();
    release_variables();
    return {gx};
  }

  void release_variables() override {
    body = nullptr;
    input.reset();
    rng.reset();
  }
};

}  // namespace

torch::Tensor recompute_in_backward(const std::function<torch::Tensor(const torch::Tensor&)>& body,
                                    const torch::Tensor& x, bool random) {
  if (!torch::GradMode::is_enabled() || !x.requires_grad()) return body(x);
  auto node = std::make_shared<RecomputeBackward>();
  node->autocast = AutocastState::capture(x.device().type());
  if (random) {
    auto gen = default_generator(x.device());
    node->rng = rng_state(gen);
  }
  torch::Tensor y;
  {
    torch::NoGradGuard no_grad;
    y = body(x);
  }
  LLMTRAIN_CHECK(!y.is_view() && !y.is_alias_of(x), "a recomputed block must return a new tensor");
  node->body = body;
  node->input = x.detach();
  node->set_next_edges(torch::autograd::collect_next_edges(x));
  torch::autograd::set_history(y, node);
  return y;
}

}  // namespace llmtrain::model_detail
