// --describe (prediction/describe.hpp) on the presets in inputs/: the full-size
// presets described without allocating (parameters, FLOPs, the memory model per
// strategy), and the JSON form carrying every number of the text.
#include <gtest/gtest.h>

#include <string>

#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/model/activations.hpp"   // defines: activation_bytes
#include "llmtrain/model/model_config.hpp"  // defines: ModelConfig
#include "llmtrain/prediction/describe.hpp"      // defines: describe_model, describe_json
#include "llmtrain/prediction/memory_model.hpp"  // defines: estimate_memory, MemoryInputs
#include "test_util.hpp"

using llmtrain::ComputeDtype;
using llmtrain::Config;
using llmtrain::ModelConfig;
using llmtrain::testing::load_preset;

TEST(Describe, FullPresetsWithoutAllocating) {
  auto c = load_preset("full_llama_1.36b");
  const std::string d = llmtrain::describe_model(c, 8);
  EXPECT_NE(d.find("18L-18H-2304D-6144ff-RoPE-RMS-SwiGLU-PreNorm"), std::string::npos) << d;
  EXPECT_NE(d.find("1,294,159,104"), std::string::npos) << d;
  EXPECT_NE(d.find("zero1"), std::string::npos) << d;
  EXPECT_NE(d.find("fsdp"), std::string::npos) << d;
  // bf16 autocast keeps fp32 parameters and gradients: 4 + 4 + 8 bytes per
  // parameter under DDP; ZeRO-1 adds the 4 / W gradient shard and shards the
  // moments' 8: 9.5 bytes per parameter on 8 ranks (docs/memory.md).
  const auto m = ModelConfig::from_config(c, 0);
  const double P = static_cast<double>(m.num_params());
  // Persistent buckets (use_cuda_graphs=True) hold the gradients through the
  // forward: they count at the peak (the start of the backward).
  llmtrain::MemoryInputs in32;
  in32.dtype = ComputeDtype::bfloat16;
  in32.batch_size = 8;
  in32.world_size = 8;
  in32.persistent_grads = true;
  const auto est = llmtrain::estimate_memory(m, in32);
  // (Both also hold autograd's gradients during backward before the buckets
  // take them: the same in both, docs/memory.md.)
  const double handover = est[0].gradients - 4.0 * P;
  EXPECT_GT(handover, 0.0);
  // Buckets made during the backward (the default, issue 46): none at the
  // start of the backward, where the activations peak; the hand-over only.
  const auto made = llmtrain::estimate_memory(m, ComputeDtype::bfloat16, 8, 8, llmtrain::AttentionBackend::sdpa);
  EXPECT_DOUBLE_EQ(made[0].gradients, handover);
  EXPECT_DOUBLE_EQ(made[1].gradients, handover);
  EXPECT_DOUBLE_EQ(made[0].activations, est[0].activations);
  EXPECT_DOUBLE_EQ(est[0].total() - made[0].total(), 4.0 * P);
  EXPECT_DOUBLE_EQ(est[1].total() - made[1].total(), 4.0 * P + 4.0 * P / 8);
  EXPECT_DOUBLE_EQ(made[2].total(), est[2].total());  // FSDP keeps its gradient shards either way
  EXPECT_DOUBLE_EQ(est[0].weights + est[0].gradients - handover + est[0].optimizer, 16.0 * P);
  EXPECT_DOUBLE_EQ(est[1].weights + est[1].gradients - handover + est[1].optimizer, 9.5 * P);
  EXPECT_DOUBLE_EQ(est[1].optimizer, 8.0 * P / 8);
  // 16-bit parameters (param_dtype=bfloat16) under DDP: 2 (parameters) + 4 (the
  // fp32 gradient buckets of reduce_dtype=float32) + 12 (fp32 master and
  // moments) = 18; with reduce_dtype=bfloat16 the buckets are 2: 16.
  llmtrain::MemoryInputs in16;
  in16.dtype = ComputeDtype::bfloat16;
  in16.param_bytes = 2;
  in16.batch_size = 8;
  in16.world_size = 8;
  in16.persistent_grads = true;
  const auto e16 = llmtrain::estimate_memory(m, in16, llmtrain::StrategyKind::ddp);
  EXPECT_DOUBLE_EQ(e16.weights + e16.gradients - handover / 2 + e16.optimizer, 18.0 * P);
  EXPECT_DOUBLE_EQ(e16.weights, 2.0 * P);
  llmtrain::MemoryInputs r16 = in16;
  r16.reduce_bytes = 2;
  const auto e16r = llmtrain::estimate_memory(m, r16, llmtrain::StrategyKind::ddp);
  EXPECT_DOUBLE_EQ(e16r.weights + e16r.gradients - handover / 2 + e16r.optimizer, 16.0 * P);
  // Full activation checkpointing keeps less; the largest micro-batch grows.
  llmtrain::MemoryInputs ck = in16;
  ck.recomputed_blocks = m.n_layer;
  EXPECT_LT(llmtrain::estimate_memory(m, ck, llmtrain::StrategyKind::ddp).activations, e16.activations);
  EXPECT_GT(llmtrain::max_batch_size(m, ck, llmtrain::StrategyKind::fsdp, 80.0 * (1LL << 30)),
            llmtrain::max_batch_size(m, in16, llmtrain::StrategyKind::fsdp, 80.0 * (1LL << 30)));
  EXPECT_LT(est[2].weights, est[1].weights);
  EXPECT_LT(est[2].total(), est[1].total());
  EXPECT_LT(est[1].total(), est[0].total());
  // The manual backend also stores (T, T) bf16 probabilities per head and layer
  // where a fused kernel keeps one fp32 log-sum-exp per row (both keep their
  // output once: the manual path as c_proj's copy, the kernel's c_proj reads
  // through a view; both keep q, k and v).
  const double extra = llmtrain::activation_bytes(m, ComputeDtype::bfloat16, 8, llmtrain::AttentionBackend::manual) -
                       llmtrain::activation_bytes(m, ComputeDtype::bfloat16, 8, llmtrain::AttentionBackend::sdpa);
  EXPECT_DOUBLE_EQ(extra, 18.0 * 8 * 2048 * 18 * (2048 * 2.0 - 4.0));
  for (const char* name : {"full_llama3_1.5b_optimal", "full_llama3_2.2b_chinchilla", "full_qwen3_1.8b_optimal",
                           "full_gpt2_1.36b"})
    EXPECT_FALSE(llmtrain::describe_model(load_preset(name), 64).empty());
  Config no_vocab = c;
  no_vocab.vocab_size = 0;
  EXPECT_THROW(llmtrain::describe_model(no_vocab, 8), llmtrain::ConfigError);
}

// --describe_format=json: one object with every number of the text; the
// configured strategy's peak at the given world size.
TEST(Describe, JsonHasEveryNumber) {
  auto c = load_preset("full_llama_1.36b");
  c.use_fsdp = true;
  llmtrain::DescribeOptions o;
  o.world_size = 4;
  o.memory_bytes = 80.0 * (1LL << 30);
  const auto j = llmtrain::describe_json(c, o);
  const auto m = ModelConfig::from_config(c, 0);
  EXPECT_EQ(j["parameters"]["total"].get<int64_t>(), m.num_params());
  auto in = llmtrain::MemoryInputs::from_config(c, 4);
  in.attention = m.attention_backend;
  EXPECT_DOUBLE_EQ(j["memory"]["peak_bytes_per_rank"].get<double>(),
                   llmtrain::estimate_memory(m, in, llmtrain::StrategyKind::fsdp).total());
  EXPECT_EQ(j["memory"]["strategy"], "fsdp");
  EXPECT_EQ(j["memory"]["world_size"], 4);
  // On a GPU the tensors get the card's bytes less the caching allocator's reserve; on the CPU all of them.
  EXPECT_DOUBLE_EQ(j["memory"]["tensor_bytes_per_rank"].get<double>(), 80.0 * (1LL << 30) / 1.06);
  EXPECT_EQ(j["memory"]["max_batch_size"].get<int64_t>(),
            llmtrain::max_batch_size(m, in, llmtrain::StrategyKind::fsdp, llmtrain::gpu_tensor_bytes(80.0 * (1LL << 30))));
  auto cpu = c;
  cpu.device = llmtrain::DeviceKind::cpu;
  const auto jc = llmtrain::describe_json(cpu, o);
  EXPECT_EQ(jc["memory"]["max_batch_size"].get<int64_t>(),
            llmtrain::max_batch_size(m, in, llmtrain::StrategyKind::fsdp, 80.0 * (1LL << 30)));
  EXPECT_GT(jc["memory"]["max_batch_size"].get<int64_t>(), j["memory"]["max_batch_size"].get<int64_t>());
  // Every number the text prints is in the JSON (the text is rendered from it).
  const std::string text = llmtrain::describe_model(c, o);
  for (const char* key : {"embeddings", "attention", "mlp", "norms", "head", "total"})
    EXPECT_TRUE(j["parameters"].contains(key)) << key;
  EXPECT_NE(text.find("largest micro-batch in 80.00 GiB per rank: batch_size " +
                      std::to_string(j["memory"]["max_batch_size"].get<int64_t>())),
            std::string::npos)
      << text;
  EXPECT_EQ(j["memory"]["strategies"].size(), 3u);
  for (const char* sec : {"model", "parameters", "flops", "memory"}) EXPECT_TRUE(j.contains(sec)) << sec;
}

// Issue 49: a memory no device has (the search's bound would be the "answer")
// and more ranks per node than the job has are refused, naming the flag.
TEST(Describe, RefusesAnswersItCannotGive) {
  auto c = load_preset("full_llama_1.36b");
  llmtrain::DescribeOptions o;
  o.world_size = 4;
  o.ranks_per_node = 16;
  auto error_of = [&](const llmtrain::DescribeOptions& opts) {
    try {
      llmtrain::describe_json(c, opts);
    } catch (const llmtrain::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  std::string e = error_of(o);
  EXPECT_NE(e.find("--describe_ranks_per_node=16 exceeds the world size 4"), std::string::npos) << e;
  o.ranks_per_node = 4;
  EXPECT_EQ(error_of(o), "<no error>");
  c = load_preset("tiny_llama");  // a few hundred KiB per sequence: 1e12 GiB holds more than 2^40
  o.memory_bytes = 1e12 * (1LL << 30);
  e = error_of(o);
  EXPECT_NE(e.find("--describe_memory_gib=1e+12"), std::string::npos) << e;
  EXPECT_NE(e.find("2^40"), std::string::npos) << e;
}
