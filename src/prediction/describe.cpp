#include "llmtrain/prediction/describe.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"  // defines: ConfigError
#include "llmtrain/prediction/cost_model.hpp"
#include "llmtrain/model/model_config.hpp"
#include "llmtrain/model/params.hpp"
#include "llmtrain/prediction/memory_model.hpp"

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

WorldLayout layout_of(const PredictionInput& in) {
  return {in.world_size, in.ranks_per_node > 0 ? in.ranks_per_node : std::min<int64_t>(in.world_size, 8)};
}
StepPrediction predict(const Config& c, const PredictionInput& in) {
  const ModelConfig m = ModelConfig::from_config(c, 0);
  return predict_step(RunShape::from_config(c, m), layout_of(in), load_device_profile(in.device));
}
nlohmann::json model_section(const Config& c, const DescribeOptions&) {
  const ModelConfig m = ModelConfig::from_config(c, 0);
  return {{"arch", m.arch_string()},
          {"vocab_size", m.vocab_size},
          {"padded_vocab", m.padded_vocab},
          {"vocab_pad_multiple", c.vocab_pad_multiple},
          {"block_size", m.block_size},
          {"n_layer", m.n_layer},
          {"n_embd", m.n_embd},
          {"attention_backend", to_string(m.attention_backend)},
          {"attention_activations", m.attention_backend == AttentionBackend::manual ? "stored (T, T) probabilities"
                                                                                    : "a fused kernel"}};
}

nlohmann::json parameters_section(const Config& c, const DescribeOptions&) {
  const auto pb = param_breakdown(ModelConfig::from_config(c, 0));
  return {{"total", pb.total},          {"embeddings", pb.embeddings}, {"attention", pb.attention},
          {"mlp", pb.mlp},              {"norms", pb.norms},           {"head", pb.head}};
}

nlohmann::json flops_section(const Config& c, const DescribeOptions&) {
  const ModelConfig m = ModelConfig::from_config(c, 0);
  return {{"flops_per_token", m.flops_per_token()},
          {"flops_per_token_6n", m.flops_per_token_6n()},
          {"matmul_parameters", m.num_matmul_params()}};
}

nlohmann::json estimate_json(const MemoryEstimate& e) {
  return {{"strategy", to_string(e.strategy)}, {"weights_bytes", e.weights},         {"gradients_bytes", e.gradients},
          {"optimizer_bytes", e.optimizer},    {"activations_bytes", e.activations}, {"total_bytes", e.total()}};
}

nlohmann::json memory_section(const Config& c, const DescribeOptions& o) {
  const int64_t world_size = o.world_size;
  const ModelConfig m = ModelConfig::from_config(c, 0);
  MemoryInputs in = MemoryInputs::from_config(c, world_size);
  in.attention = m.attention_backend;
  nlohmann::json strategies = nlohmann::json::array();
  for (const auto& e : estimate_memory(m, in)) strategies.push_back(estimate_json(e));
  const StrategyKind s = c.strategy();
  const double peak = estimate_memory(m, in, s).total();
  nlohmann::json j = {{"dtype", to_string(c.dtype)},
                      {"batch_size", c.batch_size},
                      {"block_size", c.block_size},
                      {"world_size", world_size},
                      {"strategy", to_string(s)},
                      {"parameter_bytes", in.param_bytes},
                      {"recomputed_blocks", in.recomputed_blocks},
                      {"peak_bytes_per_rank", peak},
                      {"strategies", strategies}};
  if (o.memory_bytes) {  // memory_max_batch.sbatch brackets its search with these
    MemoryInputs full = in;
    full.recomputed_blocks = m.n_layer;
    // A GPU's memory holds tensors of its bytes / kCudaAllocatorReserve (the caching allocator's reserve).
    const double tensors = c.device == DeviceKind::cpu ? *o.memory_bytes : gpu_tensor_bytes(*o.memory_bytes);
    j["memory_bytes_per_rank"] = *o.memory_bytes;
    j["tensor_bytes_per_rank"] = tensors;
    j["max_batch_size"] = max_batch_size(m, in, s, tensors);
    j["max_batch_size_full_checkpointing"] = max_batch_size(m, full, s, tensors);
    // max_batch_size searches up to 2^40 sequences: an answer at the bound is the
    // search's end, not a batch that fits.
    constexpr int64_t kSearchEnd = (int64_t{1} << 40) - 1;
    if (j["max_batch_size"].get<int64_t>() >= kSearchEnd ||
        j["max_batch_size_full_checkpointing"].get<int64_t>() >= kSearchEnd)
      throw ConfigError(fmt::format("--describe_memory_gib={:g}: more than 2^40 sequences per micro-batch would fit "
                                    "in that memory, past what --describe searches; give the memory of a real device "
                                    "(GiB per rank, e.g. 80)",
                                    *o.memory_bytes / (1024.0 * 1024.0 * 1024.0)));
  }
  return j;
}

PredictionInput prediction_input(const DescribeOptions& o) { return {o.world_size, o.ranks_per_node, o.device}; }

// The performance model's step (docs/performance-model.md) at --describe_device.
nlohmann::json prediction_section(const Config& c, const DescribeOptions& o) {
  const PredictionInput in = prediction_input(o);
  nlohmann::json j = prediction_json(predict(c, in));
  const WorldLayout w = layout_of(in);
  j["world_size"] = w.world_size;
  j["ranks_per_node"] = w.ranks_per_node;
  return j;
}

// The sections, in output order. One entry per section.
const std::vector<DescribeSection>& describe_sections() {
  static const std::vector<DescribeSection> sections = {
      {"model", model_section},
      {"parameters", parameters_section},
      {"flops", flops_section},
      {"memory", memory_section},
      {"prediction", prediction_section},
  };
  return sections;
}

}  // namespace

nlohmann::json describe_json(const Config& c, const DescribeOptions& o) {
  if (o.world_size < 1)
    throw ConfigError(fmt::format("--describe_world_size={}: expected a positive number of ranks", o.world_size));
  if (o.ranks_per_node > o.world_size)
    throw ConfigError(fmt::format("--describe_ranks_per_node={} exceeds the world size {} (--describe_world_size): "
                                  "a node cannot hold more ranks than the job has",
                                  o.ranks_per_node, o.world_size));
  nlohmann::json j = nlohmann::json::object();
  for (const auto& sec : describe_sections()) j[sec.key] = sec.build(c, o);
  return j;
}

std::string describe_prediction(const Config& c, const PredictionInput& in) {
  return format_prediction(predict(c, in), layout_of(in));
}

nlohmann::json describe_prediction_json(const Config& c, const PredictionInput& in) {
  DescribeOptions o;
  o.world_size = in.world_size;
  o.ranks_per_node = in.ranks_per_node;
  o.device = in.device;
  return prediction_section(c, o);
}

std::string describe_model(const Config& c, int64_t world_size) {
  DescribeOptions o;
  o.world_size = world_size;
  return describe_model(c, o);
}

std::string describe_model(const Config& c, const DescribeOptions& o) {
  const nlohmann::json j = describe_json(c, o);
  const auto& md = j["model"];
  const auto& pa = j["parameters"];
  const auto& fl = j["flops"];
  const auto& me = j["memory"];
  std::string s;
  s += fmt::format("model        {}\n", md["arch"].get<std::string>());
  s += fmt::format("vocabulary   {} tokens, {} embedding rows (vocab_pad_multiple = {}); block_size {}\n",
                   grouped(md["vocab_size"]), grouped(md["padded_vocab"]), md["vocab_pad_multiple"].get<int64_t>(),
                   md["block_size"].get<int64_t>());
  s += fmt::format("attention    {} requested; activations below assume {}\n",
                   md["attention_backend"].get<std::string>(), md["attention_activations"].get<std::string>());
  const int64_t total = pa["total"];
  s += fmt::format("parameters   {:>15} total\n", grouped(total));
  for (const char* name : {"embeddings", "attention", "mlp", "norms", "head"}) {
    const int64_t v = pa[name];
    s += fmt::format("  {:<11}{:>15}  {:5.1f}%\n", name, grouped(v), 100.0 * v / static_cast<double>(total));
  }
  s += fmt::format("FLOPs/token  {:.4g} GFLOP  (6N + 12*L*H*Q*T, N = {} matmul parameters, T = {})\n",
                   fl["flops_per_token"].get<double>() / 1e9, grouped(fl["matmul_parameters"]),
                   md["block_size"].get<int64_t>());
  s += fmt::format("             {:.4g} GFLOP  (6 * all parameters, the Python system's convention)\n",
                   fl["flops_per_token_6n"].get<double>() / 1e9);
  s += fmt::format("memory per rank, GiB: dtype {}, batch_size {} x block_size {}, world size {}\n",
                   me["dtype"].get<std::string>(), me["batch_size"].get<int64_t>(), me["block_size"].get<int64_t>(),
                   me["world_size"].get<int64_t>());
  s += fmt::format("  {:<9}{:>10}{:>10}{:>11}{:>13}{:>10}\n", "strategy", "weights", "grads", "optimizer",
                   "activations", "total");
  for (const auto& e : me["strategies"])
    s += fmt::format("  {:<9}{:>10.2f}{:>10.2f}{:>11.2f}{:>13.2f}{:>10.2f}\n", e["strategy"].get<std::string>(),
                     gib(e["weights_bytes"]), gib(e["gradients_bytes"]), gib(e["optimizer_bytes"]),
                     gib(e["activations_bytes"]), gib(e["total_bytes"]));
  s += fmt::format("  peak per rank for this run's strategy ({}): {:.2f} GiB\n", me["strategy"].get<std::string>(),
                   gib(me["peak_bytes_per_rank"]));
  if (me.contains("max_batch_size"))
    s += fmt::format("  largest micro-batch in {:.2f} GiB per rank: batch_size {} ({} with full activation checkpointing)\n",
                     gib(me["memory_bytes_per_rank"]), me["max_batch_size"].get<int64_t>(),
                     me["max_batch_size_full_checkpointing"].get<int64_t>());
  s += "  (parameters and gradients fp32, AdamW: 2 fp32 moments; 16-bit autocast adds the matmul weights' 16-bit\n"
       "   copies; activations: saved tensors; ddp/zero1 gradients: autograd's hand-over, and the buckets where\n"
       "   they are at the peak (made during backward; use_cuda_graphs=True holds them through the step); fsdp adds\n"
       "   the gathered root unit + 2 blocks and their gradients; docs/memory.md)";
  s += "\n" + describe_prediction(c, prediction_input(o));
  return s;
}

}  // namespace llmtrain
