// Published GPU training runs the performance model is checked against
// (docs/performance-model.md lists them with their sources). Data, not a timed
// test: shapes, batch, GPUs and the measured throughput as published.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llmtrain/model/model_config.hpp"
#include "llmtrain/prediction/device_profile.hpp"

namespace llmtrain::published {

// Which attention kernel a published run used. The built-in profiles' attention
// rate is the FlashAttention-2 generation's. llm-foundry's `attn_impl: triton`
// is the FlashAttention-1-era Triton kernel (flash_attn_triton.py); the
// FlashAttention-2 paper (Dao 2023, arXiv 2307.08691) reports FlashAttention-2
// "1.3-2.5x faster than FlashAttention in Triton": such runs are predicted at
// the profile's attention rate / 1.3 (the low end).
enum class AttentionKernel { flash_attn_2, triton_flash_attn_1 };
constexpr double kTritonFlashAttn1Slowdown = 1.3;

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
};

// MosaicML llm-foundry, scripts/train/benchmarking/README.md (github.com/mosaicml/
// llm-foundry, commit c90b9b3): MPT models (GELU MLP 4d, LayerNorm, ALiBi, tied
// embeddings, vocab 50368; shapes from scripts/train/yamls/pretrain/mpt-*.yaml),
// FSDP FULL_SHARD, amp_bf16, mixed precision DEFAULT, no activation
// checkpointing (the rows' column), seq 2048. Rows: "A100 80GB with 1600 Gbps
// node-node interconnect (RoCE)" and "H100 80GB BF16". What ran
// (scripts/train/benchmarking/sweep.sh, submit_benchmarks.py): image
// mosaicml/pytorch:2.0.1_cu118, llm-foundry v0.0.4, attn_impl triton (the
// FlashAttention-1-era Triton kernel: AttentionKernel::triton_flash_attn_1),
// no torch.compile, no fp8 in these rows.
inline const std::vector<Run>& runs() {
  static const std::string foundry = "mosaicml/llm-foundry scripts/train/benchmarking/README.md";
  constexpr auto triton = AttentionKernel::triton_flash_attn_1;  // attn_impl: triton
  static const std::vector<Run> v = {
      {"MPT-125M, 8x A100 80GB", foundry, "Composer FSDP", 12, 768, 12, 3072, 50368, 2048, 32, 2, 8, 8, "a100_sxm_80gb",
       141737, 44.45, false, triton},
      {"MPT-350M, 8x A100 80GB", foundry, "Composer FSDP", 24, 1024, 16, 4096, 50368, 2048, 32, 2, 8, 8, "a100_sxm_80gb",
       58782, 51.62, false, triton},
      {"MPT-760M, 8x A100 80GB", foundry, "Composer FSDP", 24, 1536, 12, 6144, 50368, 2048, 24, 2, 8, 8, "a100_sxm_80gb",
       32434, 56.85, false, triton},
      {"MPT-1B, 8x A100 80GB", foundry, "Composer FSDP", 24, 2048, 16, 8192, 50368, 2048, 14, 4, 8, 8, "a100_sxm_80gb",
       20513, 59.86, false, triton},
      {"MPT-3B, 8x A100 80GB", foundry, "Composer FSDP", 32, 2560, 20, 10240, 50368, 2048, 10, 2, 8, 8, "a100_sxm_80gb",
       10811, 62.11, false, triton},
      {"MPT-7B, 8x A100 80GB", foundry, "Composer FSDP", 32, 4096, 32, 16384, 50368, 2048, 6, 2, 8, 8, "a100_sxm_80gb",
       4641, 64.23, false, triton},
      {"MPT-13B, 8x A100 80GB", foundry, "Composer FSDP", 40, 5120, 40, 20480, 50368, 2048, 2, 3, 8, 8, "a100_sxm_80gb",
       2262, 59.57, false, triton},
      {"MPT-760M, 8x H100 80GB", foundry, "Composer FSDP", 24, 1536, 12, 6144, 50368, 2048, 24, 2, 8, 8, "h100_sxm",
       63147, 34.9, false, triton},
      {"MPT-1B, 8x H100 80GB", foundry, "Composer FSDP", 24, 2048, 16, 8192, 50368, 2048, 14, 1, 8, 8, "h100_sxm", 45455,
       41.82, false, triton},
      {"MPT-3B, 16x H100 80GB", foundry, "Composer FSDP", 32, 2560, 20, 10240, 50368, 2048, 10, 3, 16, 8, "h100_sxm",
       24142, 43.73, false, triton},
      {"MPT-7B, 8x H100 80GB", foundry, "Composer FSDP", 32, 4096, 32, 16384, 50368, 2048, 6, 1, 8, 8, "h100_sxm", 10643,
       46.44, false, triton},
      {"MPT-13B, 8x H100 80GB", foundry, "Composer FSDP", 40, 5120, 40, 20480, 50368, 2048, 2, 1, 8, 8, "h100_sxm", 4792,
       39.79, false, triton},
      // torchtitan docs/performance.md (github.com/pytorch/torchtitan): "Llama 2 performance numbers",
      // 64 A100 80GB, FSDP2, bf16, local batch 2, seq 4096, no activation checkpointing: WPS 2162
      // (tokens/s per GPU), MFU 61.1%. LLaMA-2 13B: 40 layers, d 5120, 40 heads, SwiGLU 13824, vocab 32000.
      // The network between the 8 nodes is not published: predicted with DGX A100's 200 Gb/s per GPU.
      {"LLaMA-2 13B, 64x A100 80GB", "pytorch/torchtitan docs/performance.md", "torchtitan FSDP2", 40, 5120, 40,
       13824, 32000, 4096, 2, 1, 64, 8, "a100_sxm_80gb", 2162, 61.1, true},
  };
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
