// Published GPU training runs the performance model is checked against
// (docs/performance-model.md lists them with their sources). Data, not a timed
// test: shapes, batch, GPUs and the measured throughput as published.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "llmtrain/model/model_config.hpp"
#include "llmtrain/prediction/device_profile.hpp"

namespace llmtrain::published {

// Which attention kernel a published run used. The built-in profiles' attention
// rate is the FlashAttention-2 generation's. llm-foundry's `attn_impl: triton`
// is the FlashAttention-1-era Triton kernel (flash_attn_triton.py); the
// FlashAttention-2 paper (Dao 2023, arXiv 2307.08691) reports FlashAttention-2
// "1.3-2.5x faster than FlashAttention in Triton": such runs are predicted at
// the profile's attention rate / kTritonFlashAttn1Slowdown, a value in that
// published range fitted on the fitting set (below) with the profiles' GEMM and
// bandwidth shares (device_profile.cpp): 1.6 (until 2026-11-27: 1.3, the low end,
// assumed). The runs' long sequences weigh it most.
enum class AttentionKernel { flash_attn_2, triton_flash_attn_1 };
constexpr double kTritonFlashAttn1Slowdown = 1.6;

// The fitting set: the runs the model's fitted constants were chosen on; the
// checking set: the runs it is only compared with (docs/performance-model.md).
enum class Set { fit, check };

struct Run {
  std::string name;        // e.g. "MPT-1B, 8x A100 80GB"
  std::string source;      // where the figure is published
  std::string framework;
  int64_t n_layer, n_embd, n_head, ffn_hidden;  // MPT: GELU MLP of 4 d; LLaMA: SwiGLU of ffn_hidden
  int64_t vocab, seq_len, micro_batch, grad_accum, gpus, gpus_per_node;
  std::string device;      // built-in profile
  double tokens_per_s_per_gpu;  // measured, as published
  double mfu_percent;           // as published (their convention: 6N + 12 L d T per token)
  bool llama = false;           // RMSNorm, RoPE, SwiGLU, untied head (else MPT: LayerNorm, ALiBi, GELU, tied)
  AttentionKernel attention = AttentionKernel::flash_attn_2;  // the attention kernel the run used
  std::string family;      // "MPT H100": the runs whose error signs are reported together
  std::string size;        // "1b": the model-size ladder the fit/check split follows
  Set set = Set::check;    // fitted on, or only checked against (set_of_size, below)
};

// MosaicML llm-foundry, scripts/train/benchmarking/README.md (github.com/mosaicml/
// llm-foundry; the table as of commit 8c8dd48f7, the same rows as c90b9b3): MPT models
// (GELU MLP 4d, LayerNorm, ALiBi, tied embeddings, vocab 50368; shapes from
// scripts/train/yamls/pretrain/mpt-*.yaml), FSDP FULL_SHARD, amp_bf16, mixed precision
// DEFAULT. Tables "H100 80GB BF16" and "A100 80GB with 1600 Gbps node-node interconnect
// (RoCE)": every row on 8 GPUs with "Activation Checkpointing False" (all sequence
// lengths, 512-65536), and the 16-GPU H100 row of MPT-3B at 2048 that this table held
// before. What ran (scripts/train/benchmarking/sweep.sh, submit_benchmarks.py): image
// mosaicml/pytorch:2.0.1_cu118, llm-foundry v0.0.4, attn_impl triton (the
// FlashAttention-1-era Triton kernel: AttentionKernel::triton_flash_attn_1), no
// torch.compile, no fp8 in these rows. Columns used: SeqLen, # GPUs, MFU,
// MicroBatchSize, GradAccum, Throughput (T/s/GPU).
//
// Which runs fit the model and which only check it (fixed 2026-11-27, before any
// constant was fitted, and not to be moved after seeing an error): by model size,
// alternating along the ladder 125M, 350M, 760M, 1B, 3B, 7B, 13B. Fitting: MPT-125M,
// 760M, 3B and 13B; checking: MPT-350M, 1B and 7B, and the torchtitan run (another
// framework). Both sets have a sequence-length sweep on each GPU (H100: 760M fits,
// 1B checks; A100: 125M, 760M and 3B fit, 350M and 1B check).
inline Set set_of_size(const std::string& size) {
  return size == "125m" || size == "760m" || size == "3b" || size == "13b" ? Set::fit : Set::check;
}

struct MptShape {
  const char* size;
  int64_t n_layer, n_embd, n_head;
};
constexpr MptShape kMpt[] = {{"125m", 12, 768, 12}, {"350m", 24, 1024, 16}, {"760m", 24, 1536, 12},
                             {"1b", 24, 2048, 16},  {"3b", 32, 2560, 20},   {"7b", 32, 4096, 32},
                             {"13b", 40, 5120, 40}};

inline Run mpt(const std::string& size, int64_t T, int64_t micro, int64_t accum, int64_t gpus, const std::string& dev,
               double tokens_per_s_per_gpu, double mfu) {
  for (const auto& s : kMpt)
    if (size == s.size) {
      const bool h100 = dev == "h100";
      Run r{fmt::format("MPT-{} T={}, {}x {} 80GB", size, T, gpus, h100 ? "H100" : "A100"),
            "mosaicml/llm-foundry scripts/train/benchmarking/README.md",
            "Composer FSDP", s.n_layer, s.n_embd, s.n_head, 4 * s.n_embd, 50368, T, micro, accum, gpus, 8,
            h100 ? "h100_sxm" : "a100_sxm_80gb", tokens_per_s_per_gpu, mfu, false,
            AttentionKernel::triton_flash_attn_1};
      r.family = fmt::format("MPT {}", h100 ? "H100" : "A100");
      r.size = size;
      r.set = set_of_size(size);
      return r;
    }
  throw std::logic_error("published_runs.hpp: no MPT shape " + size);
}

inline const std::vector<Run>& runs() {
  constexpr const char* h100 = "h100";
  constexpr const char* a100 = "a100";
  static const std::vector<Run> v = [&] {
    std::vector<Run> r = {
      mpt("13b", 2048, 2, 1, 8, h100, 4792, 39.79),
      mpt("7b", 2048, 6, 1, 8, h100, 10643, 46.44),
      mpt("3b", 16384, 1, 6, 8, h100, 11152, 36.34),
      mpt("3b", 8192, 3, 6, 8, h100, 16578, 40.31),
      mpt("3b", 4096, 5, 6, 8, h100, 20964, 42.31),
      mpt("3b", 2048, 10, 3, 16, h100, 24142, 43.73),
      mpt("3b", 1024, 20, 6, 8, h100, 27046, 46.2),
      mpt("3b", 512, 40, 6, 8, h100, 27965, 46.32),
      mpt("1b", 32768, 1, 4, 8, h100, 12025, 33.54),
      mpt("1b", 16384, 2, 4, 8, h100, 19649, 35.22),
      mpt("1b", 8192, 3, 4, 8, h100, 29157, 37.73),
      mpt("1b", 4096, 7, 4, 8, h100, 38535, 40.26),
      mpt("1b", 2048, 14, 1, 8, h100, 45455, 41.82),
      mpt("1b", 1024, 18, 4, 8, h100, 48910, 41.95),
      mpt("1b", 512, 56, 4, 8, h100, 52275, 43.21),
      mpt("760m", 32768, 1, 2, 8, h100, 16291, 31.84),
      mpt("760m", 16384, 3, 2, 8, h100, 27815, 33.57),
      mpt("760m", 8192, 6, 2, 8, h100, 41825, 34.84),
      mpt("760m", 4096, 12, 2, 8, h100, 55459, 35.83),
      mpt("760m", 2048, 24, 2, 8, h100, 63147, 34.9),
      mpt("760m", 1024, 48, 2, 8, h100, 78581, 39.76),
      mpt("760m", 512, 96, 2, 8, h100, 83749, 40.42),
      mpt("13b", 2048, 2, 3, 8, a100, 2262, 59.57),
      mpt("7b", 2048, 6, 2, 8, a100, 4641, 64.23),
      mpt("3b", 16384, 1, 6, 8, a100, 5529, 57.13),
      mpt("3b", 8192, 3, 6, 8, a100, 7695, 59.34),
      mpt("3b", 4096, 5, 6, 8, a100, 9457, 60.53),
      mpt("3b", 2048, 10, 2, 8, a100, 10811, 62.11),
      mpt("3b", 1024, 20, 6, 8, a100, 11580, 62.73),
      mpt("3b", 512, 40, 6, 8, a100, 12127, 63.71),
      mpt("1b", 32768, 1, 4, 8, a100, 6275, 55.52),
      mpt("1b", 16384, 2, 4, 8, a100, 9956, 56.6),
      mpt("1b", 8192, 3, 4, 8, a100, 13814, 56.69),
      mpt("1b", 4096, 7, 4, 8, a100, 17807, 59.0),
      mpt("1b", 2048, 14, 4, 8, a100, 20513, 59.86),
      mpt("1b", 1024, 18, 4, 8, a100, 22112, 60.15),
      mpt("1b", 512, 56, 4, 8, a100, 23148, 60.68),
      mpt("760m", 32768, 1, 2, 8, a100, 8802, 54.57),
      mpt("760m", 16384, 3, 2, 8, a100, 14274, 54.64),
      mpt("760m", 8192, 6, 2, 8, a100, 20933, 55.31),
      mpt("760m", 4096, 12, 2, 8, a100, 27351, 56.05),
      mpt("760m", 2048, 24, 2, 8, a100, 32434, 56.85),
      mpt("760m", 1024, 48, 2, 8, a100, 29765, 47.76),
      mpt("760m", 512, 96, 2, 8, a100, 29446, 45.07),
      mpt("350m", 65536, 1, 2, 8, a100, 7524, 52.7),
      mpt("350m", 32768, 2, 2, 8, a100, 13652, 52.46),
      mpt("350m", 16384, 4, 2, 8, a100, 23559, 53.28),
      mpt("350m", 8192, 8, 2, 8, a100, 36569, 53.8),
      mpt("350m", 4096, 16, 2, 8, a100, 49555, 53.31),
      mpt("350m", 2048, 32, 2, 8, a100, 58782, 51.62),
      mpt("350m", 1024, 64, 2, 8, a100, 64813, 50.51),
      mpt("350m", 512, 128, 2, 8, a100, 69330, 50.61),
      mpt("125m", 65536, 1, 2, 8, a100, 20368, 54.13),
      mpt("125m", 32768, 2, 2, 8, a100, 36407, 52.71),
      mpt("125m", 16384, 4, 2, 8, a100, 60040, 50.61),
      mpt("125m", 8192, 8, 2, 8, a100, 90392, 48.85),
      mpt("125m", 4096, 16, 2, 8, a100, 118396, 46.08),
      mpt("125m", 2048, 40, 2, 8, a100, 142830, 44.79),
      mpt("125m", 2048, 32, 2, 8, a100, 141737, 44.45),
      mpt("125m", 1024, 64, 2, 8, a100, 156468, 43.15),
      mpt("125m", 512, 128, 2, 8, a100, 165681, 42.56),
    };
    // torchtitan docs/performance.md (github.com/pytorch/torchtitan): "Llama 2 performance numbers",
    // 64 A100 80GB, FSDP2, bf16, local batch 2, seq 4096, no activation checkpointing: WPS 2162
    // (tokens/s per GPU), MFU 61.1%. LLaMA-2 13B: 40 layers, d 5120, 40 heads, SwiGLU 13824, vocab 32000.
    // The network between the 8 nodes is not published: predicted with DGX A100's 200 Gb/s per GPU.
    Run t{"LLaMA-2 13B T=4096, 64x A100 80GB", "pytorch/torchtitan docs/performance.md", "torchtitan FSDP2", 40, 5120,
          40, 13824, 32000, 4096, 2, 1, 64, 8, "a100_sxm_80gb", 2162, 61.1, true};
    t.family = "torchtitan A100";
    t.size = "13b-llama";
    t.set = Set::check;
    r.push_back(t);
    return r;
  }();
  return v;
}

inline ModelConfig model_of(const Run& r) {
  ModelConfig m;
  m.vocab_size = m.padded_vocab = r.vocab;
  m.block_size = r.seq_len;
  m.n_layer = r.n_layer;
  m.n_head = m.n_kv_head = r.n_head;
  m.n_embd = r.n_embd;
  m.head_dim = r.n_embd / r.n_head;
  m.ffn_hidden = r.ffn_hidden;
  m.norm = r.llama ? NormKind::rmsnorm : NormKind::layernorm;
  // MPT's ALiBi has no parameters; a learned table is not in a matmul either.
  m.pos_encoding = r.llama ? PosEncoding::rope : PosEncoding::learned;
  m.ffn = r.llama ? FfnKind::swiglu : FfnKind::gelu;
  m.tie_embeddings = !r.llama;
  m.attention_backend = AttentionBackend::flash_attn_2;
  return m;
}

// The built-in profile of the run's GPU, with the attention rate of the kernel
// the run used (the same adjustment for every run of that kernel; no per-run fitting).
inline DeviceProfile profile_of(const Run& r) {
  DeviceProfile p = load_device_profile(r.device);
  if (r.attention == AttentionKernel::triton_flash_attn_1) {
    p.attention_tflops_16bit /= kTritonFlashAttn1Slowdown;
    p.attention_tflops_fp32 /= kTritonFlashAttn1Slowdown;
  }
  return p;
}

}  // namespace llmtrain::published
