// make_strategy for the Transformer: its parameters in registration order, the
// no-decay group and the blocks (FSDP units). A file of its own so that code
// using only the ParamGroups form does not link the model.
#include <unordered_map>

#include <fmt/format.h>
#include <torch/torch.h>

#include "distributed/fsdp.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/distributed/strategy.hpp"

namespace llmtrain {

std::unique_ptr<Strategy> make_strategy(const StrategyOptions& options, Transformer model, Collectives& comm) {
  ParamGroups g;
  g.params = model->parameters();
  g.no_decay = model->no_decay_parameters();
  const auto decay = model->decay_parameters();
  int64_t trainable = 0;
  for (const auto& p : g.params) trainable += p.requires_grad() ? 1 : 0;
  LLMTRAIN_CHECK(static_cast<int64_t>(decay.size() + g.no_decay.size()) == trainable,
                 "model: {} decay + {} no-decay parameters do not cover its {} trainable parameters",
                 decay.size(), g.no_decay.size(), trainable);
  std::unordered_map<const void*, int> index;
  for (size_t i = 0; i < g.params.size(); ++i) index[g.params[i].unsafeGetTensorImpl()] = static_cast<int>(i);
  for (const auto& block : model->blocks()) {
    std::vector<int> unit;
    for (const auto& p : block->parameters()) unit.push_back(index.at(p.unsafeGetTensorImpl()));
    g.units.push_back(std::move(unit));
  }
  if (options.kind == StrategyOptions::Kind::fsdp) {
    // Blocks are sharded; the model gathers them through hooks it knows only
    // as ForwardHooks.
    std::shared_ptr<ForwardHooks> hooks;
    auto s = make_fsdp_strategy(options, g, comm, &hooks);
    model->set_forward_hooks(hooks);
    return s;
  }
  return make_strategy(options, g, comm);
}

}  // namespace llmtrain
