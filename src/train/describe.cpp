#include "llmtrain/train/describe.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "llmtrain/core/config.hpp"
#include "llmtrain/prediction/cost_model.hpp"
#include "llmtrain/prediction/memory_model.hpp"
#include "llmtrain/model/model_config.hpp"
#include "llmtrain/model/params.hpp"

namespace llmtrain {

namespace {
// 1,294,159,104
std::string grouped(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return v < 0 ? "-" + out : out;
}
double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

WorldLayout layout_of(const PredictionInput& in) {
  return {in.world_size, in.ranks_per_node > 0 ? in.ranks_per_node : std::min<int64_t>(in.world_size, 8)};
}
StepPrediction predict(const Config& c, const PredictionInput& in) {
  const ModelConfig m = ModelConfig::from_config(c, 0);
  return predict_step(RunShape::from_config(c, m), layout_of(in), load_device_profile(in.device));
}
}  // namespace

std::string describe_prediction(const Config& c, const PredictionInput& in) {
  return format_prediction(predict(c, in), layout_of(in));
}

nlohmann::json describe_prediction_json(const Config& c, const PredictionInput& in) {
  nlohmann::json j = prediction_json(predict(c, in));
  const WorldLayout w = layout_of(in);
  j["world_size"] = w.world_size;
  j["ranks_per_node"] = w.ranks_per_node;
  return j;
}

std::string describe_model(const Config& c, int64_t world_size) {
  const ModelConfig m = ModelConfig::from_config(c, 0);
  const auto pb = param_breakdown(m);
  std::string s;
  s += fmt::format("model        {}\n", m.arch_string());
  s += fmt::format("vocabulary   {} tokens, {} embedding rows (vocab_pad_multiple = {}); block_size {}\n",
                   grouped(m.vocab_size), grouped(m.padded_vocab), c.vocab_pad_multiple, m.block_size);
  s += fmt::format("attention    {} requested; activations below assume {}\n", to_string(m.attention_backend),
                   m.attention_backend == AttentionBackend::manual ? "stored (T, T) probabilities" : "a fused kernel");
  s += fmt::format("parameters   {:>15} total\n", grouped(pb.total));
  auto row = [&](const char* name, int64_t v) {
    s += fmt::format("  {:<11}{:>15}  {:5.1f}%\n", name, grouped(v), 100.0 * v / static_cast<double>(pb.total));
  };
  row("embeddings", pb.embeddings);
  row("attention", pb.attention);
  row("mlp", pb.mlp);
  row("norms", pb.norms);
  row("head", pb.head);
  s += fmt::format("FLOPs/token  {:.4g} GFLOP  (6N + 12*L*H*Q*T, N = {} matmul parameters, T = {})\n",
                   m.flops_per_token() / 1e9, grouped(m.num_matmul_params()), m.block_size);
  s += fmt::format("             {:.4g} GFLOP  (6 * all parameters, the seeds' convention)\n",
                   m.flops_per_token_6n() / 1e9);
  s += fmt::format("memory per GPU, GiB: dtype {}, batch_size {} x block_size {}, world size {}\n", to_string(c.dtype),
                   c.batch_size, c.block_size, world_size);
  s += fmt::format("  {:<9}{:>10}{:>10}{:>11}{:>13}{:>10}\n", "strategy", "weights", "grads", "optimizer",
                   "activations", "total");
  for (const auto& est : estimate_memory(m, c.dtype, c.batch_size, world_size, m.attention_backend))
    s += fmt::format("  {:<9}{:>10.2f}{:>10.2f}{:>11.2f}{:>13.2f}{:>10.2f}\n", to_string(est.strategy), gib(est.weights),
                     gib(est.gradients), gib(est.optimizer), gib(est.activations), gib(est.total()));
  s += "  (weights/grads in the compute dtype; AdamW: 2 fp32 moments + fp32 master weights for 16-bit;\n"
       "   activations: saved tensors without checkpointing; fsdp adds 2 gathered units + 1 unit of grads)";
  return s;
}

}  // namespace llmtrain
