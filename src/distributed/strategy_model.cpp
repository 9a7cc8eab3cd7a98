// make_strategy for the Transformer: its parameters in registration order, the
// no-decay group and the sharding plan (FSDP units). A file of its own so that code
// using only the ParamGroups form does not link the model.
#include <fmt/format.h>
#include <torch/torch.h>

#include "distributed/fsdp.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/distributed/strategy.hpp"
#include "llmtrain/model/params.hpp"

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
  // The sharding plan names parameters by their place in the parameter table,
  // which is the module's registration order (checked here by name).
  const auto table = parameter_table(model->config());
  const auto named = model->named_parameters();
  LLMTRAIN_CHECK(named.size() == table.size() && named.size() == g.params.size(),
                 "model: {} parameters, the parameter table {}", named.size(), table.size());
  for (size_t i = 0; i < table.size(); ++i)
    LLMTRAIN_CHECK(named[i].key() == table[i].name, "model: parameter {} is '{}', the parameter table says '{}'", i,
                   named[i].key(), table[i].name);
  g.units = fsdp_sharding_plan(model->config());
  if (options.kind == StrategyOptions::Kind::fsdp) {
    // Units are sharded; the model gathers them through hooks it knows only
    // as ForwardHooks.
    std::shared_ptr<ForwardHooks> hooks;
    auto s = make_fsdp_strategy(options, g, comm, &hooks);
    model->set_forward_hooks(hooks);
    return s;
  }
  return make_strategy(options, g, comm);
}

}  // namespace llmtrain
