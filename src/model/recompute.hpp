// Activation recomputation, the mechanism of activation checkpointing (private to src/model): a function of one tensor run
// without saving anything for backward, and run again, with gradients, when
// backward reaches it (torch.utils.checkpoint's reentrant form, in C++).
#pragma once
#include <functional>

#include <torch/types.h>

namespace llmtrain::model_detail {

// body(x) computed under NoGradGuard: the graph keeps only x (and the RNG and
// autocast state of the call). Backward re-runs body on a detached copy of x
// with the same RNG (when `random`) and autocast state, backpropagates the
// incoming gradient through it (the parameters body reads get their .grad
// through their own AccumulateGrad, hooks included, exactly once) and passes
// x's gradient on. Without grad mode, or when x does not require grad, it is
// body(x). x: any shape; body's output must be a new tensor, not a view of x.
torch::Tensor recompute_in_backward(const std::function<torch::Tensor(const torch::Tensor&)>& body,
                                    const torch::Tensor& x, bool random);

}  // namespace llmtrain::model_detail
