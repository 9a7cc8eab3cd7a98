#include "llmtrain/prediction/cost_model.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "llmtrain/distributed/bucket_layout.hpp"
#include "llmtrain/core/config.hpp"
#include "llmtrain/core/error.hpp"
#include "llmtrain/model/params.hpp"

namespace llmtrain {
namespace {

// Parameters, gradients, buckets and AdamW state are fp32 under every dtype
// (autocast computes in bf16/fp16 with fp32 master weights: model/precision.hpp).
constexpr double kParamBytes = 4.0;
// Operators that touch data, per block and per forward, as model/layers.cpp
// dispatches them (views not counted): RMSNorm one (CUDA's fused kernel; the
// CPU twin is one llmtrain:: op), LayerNorm one; RoPE four per tensor (per
// half a multiply and a fused multiply-add; seven before 2026-11-28); SDPA reads q, k, v as views (v
// copied after RoPE without QK-norm: one copy), the manual path copies all
// three and its output back to (B, T, H*Q); attention one (manual: matmul,
// mask, softmax, matmul); the four GEMMs; two residual adds; SwiGLU two (silu,
// mul), GELU one. 16-bit runs add the autocast casts; backward dispatches
// about twice as many.
constexpr double kOpsPer16BitCast = 4.0, kBackwardOpsFactor = 2.0;
double ops_per_block_forward(const ModelConfig& m) {
  const double norm = 1.0;
  const bool manual = m.attention_backend == AttentionBackend::manual;
  const double copies = manual ? 3.0 + 1.0 : (m.pos_encoding == PosEncoding::rope && !m.qk_norm ? 1.0 : 0.0);
  double ops = 2 * norm + 4 /* GEMMs */ + copies + 2 /* residuals */;
  if (m.qk_norm) ops += 2 * norm;
  if (m.pos_encoding == PosEncoding::rope) ops += 2 * 4.0;
  ops += m.attention_backend == AttentionBackend::manual ? 4.0 : 1.0;
  ops += m.ffn == FfnKind::swiglu ? 2.0 : 1.0;
  return ops;
}
// Element-wise traffic of backward relative to forward: each op's backward reads
// the saved input and the incoming gradient and writes the outgoing one.
constexpr double kBackwardTrafficFactor = 2.0;
// Manual attention: passes over the (T, T) scores: forward matmul out, mask add
// (read + write), softmax (read + write), read by the second matmul; backward as many.
constexpr double kManualScorePasses = 6.0;
// FlashAttention's backward runs 5 matmul-sized products against forward's 2.
constexpr double kFlashBackwardFactor = 2.5;
// AdamW (at::_fused_adamw_) per fp32 element of the shard: reads param, grad,
// exp_avg, exp_avg_sq and writes param, exp_avg, exp_avg_sq (28 B); the gradient
// norm reads the grad (4 B); the buckets are not zeroed (the last micro-step's
// hooks overwrite them); averaging over ranks reads and writes it (8 B, W > 1).
constexpr double kAdamBytes = 28.0 + 4.0, kAverageBytes = 8.0;

bool is16(ComputeDtype d) { return d != ComputeDtype::float32; }
double act_bytes(ComputeDtype d) { return is16(d) ? 2.0 : 4.0; }

// The loss's memory traffic, bytes per logit (B*T*V of them), as
// TransformerImpl::loss dispatches it; the LM head's GEMMs are counted as GEMMs.
struct LossTraffic {
  double forward = 0, backward = 0;
};
LossTraffic loss_traffic(const ModelConfig& m, ComputeDtype dtype) {
  const bool sixteen = is16(dtype);
  const double a = act_bytes(dtype), cast = sixteen ? a + 4.0 : 0.0;  // 16-bit logits <-> fp32: read a, write 4
  if (!m.fused_loss) {
    // Plain path: logits.to(float) (16-bit), cross_entropy = log_softmax (read
    // 4, write 4) + nll_loss (reads one logit per row). Backward: nll_loss's
    // gradient is a zeroed fp32 (B*T, V) (write 4) with one entry per row set,
    // log_softmax's backward reads it and the saved output and writes the
    // logits' gradient (12), cast back to the compute dtype (16-bit).
    return {cast + 8.0, 4.0 + 12.0 + cast};
  }
  // Fused (model/fused_loss.cpp): every chunk's logits made fp32 (16-bit: the
  // cast), log_softmax in place (8), exp_ in place (8); below fp32 the gradient
  // is scaled in place (8) and cast to the compute dtype; the gradient GEMMs
  // run there too. Backward only scales the kept gradients (not per logit).
  return {cast + 16.0 + (sixteen ? 8.0 + cast : 0.0), 0.0};
}

// The share of an SM-parallel kernel's peak that a grid of `blocks` equal thread
// blocks reaches: they run in waves of one per SM, and the SMs idle in the last
// wave are lost (wave quantization: NVIDIA, "Matrix Multiplication Background
// User's Guide", docs.nvidia.com/deeplearning/performance). 1 where the profile
// has no SM count (a CPU).
double wave_efficiency(const DeviceProfile& p, double blocks) {
  if (p.sm_count <= 0 || blocks <= 0) return 1.0;
  const double waves = std::ceil(blocks / p.sm_count);
  return blocks / (waves * p.sm_count);
}

}  // namespace

// A GEMM's share of the profile's large-GEMM rate at its shape (M x N output):
// the tiles padded past M and N compute nothing (tile quantization), the last
// wave of tiles leaves SMs idle (wave quantization). The large-GEMM rate is a
// share of the device's best-shape rate (MAMF), so a shape that tiles and waves
// perfectly runs at it. 1 on profiles without tiles (CPUs: their calibrated
// per-shape rates carry the shape).
double gemm_shape_efficiency(const DeviceProfile& p, int64_t m, int64_t n, int64_t k) {
  if (p.gemm_tile_m <= 0 || p.gemm_tile_n <= 0) return 1.0;
  const double tm = std::ceil(static_cast<double>(m) / p.gemm_tile_m),
               tn = std::ceil(static_cast<double>(n) / p.gemm_tile_n);
  const double tiles = tm * tn;
  const double useful = static_cast<double>(m) * static_cast<double>(n) / (tiles * p.gemm_tile_m * p.gemm_tile_n);
  // Stream-K (persistent kernels that share the K loop among SMs): the work
  // units are the tiles' K steps, and only their last wave idles SMs.
  const double units =
      p.gemm_tile_k > 0 && k > 0 ? tiles * std::ceil(static_cast<double>(k) / p.gemm_tile_k) : tiles;
  return useful * wave_efficiency(p, units);
}

double large_gemm_tflops(const DeviceProfile& p, const std::vector<GemmTiming>& timed) {
  double work = 0, seconds = 0;
  for (const auto& t : timed) {
    const double flops = 2.0 * static_cast<double>(t.m) * static_cast<double>(t.n) * static_cast<double>(t.k);
    work += t.count * flops / gemm_shape_efficiency(p, t.m, t.n, t.k);
    seconds += t.count * t.seconds;
  }
  return seconds > 0 ? work / seconds / 1e12 : 0.0;
}

// A fused causal attention kernel's executed FLOPs over the causal half
// (2·B·H·T²·Q forward): the diagonal blocks of attention_tile x attention_tile
// are computed whole, T/tile of them per head, each half wasted: 1 + tile / T.
// Its grid: B·H·ceil(T / tile) blocks of query rows, in waves over the SMs.
double attention_shape_efficiency(const DeviceProfile& p, int64_t batch, int64_t heads, int64_t seq_len) {
  if (p.attention_tile <= 0) return 1.0;
  const double T = static_cast<double>(seq_len), tile = p.attention_tile;
  const double diagonal = 1.0 / (1.0 + std::min(tile, T) / T);
  return diagonal * wave_efficiency(p, static_cast<double>(batch * heads) * std::ceil(T / tile));
}

namespace {

// One GEMM (M x N x K) on the profile: the calibrated rate at this shape when
// there is one, else the profile's large-GEMM rate times the shape's efficiency;
// never faster than reading its operands and writing its result.
double gemm_seconds(const DeviceProfile& p, int64_t m, int64_t n, int64_t k, bool sixteen) {
  const double flops = 2.0 * static_cast<double>(m) * n * k;
  double rate = p.matmul_tflops(sixteen) * gemm_shape_efficiency(p, m, n, k);
  if (auto it = p.gemm_tflops.find(gemm_key(m, n, k, sixteen)); it != p.gemm_tflops.end()) rate = it->second;
  const double e = sixteen ? 2.0 : 4.0;
  const double bytes = e * (static_cast<double>(m) * k + static_cast<double>(k) * n + static_cast<double>(m) * n);
  // An asynchronous device's launches are the host's (micro_batch_cost).
  const double launch = p.asynchronous() ? 0.0 : p.launch_us * 1e-6;
  return std::max(flops / (rate * 1e12), bytes / (p.memory_gbps * 1e9)) + launch;
}

// Between nodes a ring's traffic leaves each node through all its NICs at once
// (NCCL runs one ring per NIC), so the bus bandwidth is the node's ranks times
// each rank's share of the network (`inter_node_busbw_gbps`: one GPU's NIC on
// the built-in profiles, what --calibrate measured divided by the ranks per
// node), never above the links inside the node (docs/performance-model.md).
double bus_gbps(const DeviceProfile& p, const WorldLayout& w) {
  if (w.world_size <= w.ranks_per_node) return p.intra_node_busbw_gbps;
  const double node = static_cast<double>(w.ranks_per_node) * p.inter_node_busbw_gbps;
  return p.intra_node_busbw_gbps > 0 ? std::min(node, p.intra_node_busbw_gbps) : node;
}
// nccl-tests' bus-bandwidth convention: an allreduce moves 2(W-1)/W of the
// buffer over each rank's link, a reduce-scatter or all-gather (W-1)/W of the whole.
double allreduce_s(const DeviceProfile& p, const WorldLayout& w, double bytes) {
  if (w.world_size <= 1) return 0.0;
  const double W = static_cast<double>(w.world_size);
  return p.collective_latency_us * 1e-6 + 2.0 * (W - 1) / W * bytes / (bus_gbps(p, w) * 1e9);
}
double scatter_gather_s(const DeviceProfile& p, const WorldLayout& w, double full_bytes) {
  if (w.world_size <= 1) return 0.0;
  const double W = static_cast<double>(w.world_size);
  return p.collective_latency_us * 1e-6 + (W - 1) / W * full_bytes / (bus_gbps(p, w) * 1e9);
}

// Collectives issued one after another on one link while compute runs:
// job i may start at ready[i]; returns when the last one ends.
double serial_end(const std::vector<double>& ready, const std::vector<double>& duration) {
  double end = 0.0;
  for (size_t i = 0; i < ready.size(); ++i) end = std::max(end, ready[i]) + duration[i];
  return end;
}
// What the step waits for: the link's end past the compute's end, with only
// `overlap` of the transfers able to run under compute.
double exposed(double end, double compute_end, double total, double overlap) {
  const double hidden_model = std::max(0.0, end - compute_end);
  return overlap * hidden_model + (1.0 - overlap) * total;
}

struct Shapes {
  double M, C, Hq, Hkv, F, V, B, T, H, Q, L;
};
Shapes shapes(const ModelConfig& m, int64_t batch) {
  const double B = static_cast<double>(batch), T = static_cast<double>(m.block_size);
  return {B * T,
          static_cast<double>(m.n_embd),
          static_cast<double>(m.n_head * m.head_dim),
          static_cast<double>(m.n_kv_head * m.head_dim),
          static_cast<double>(m.ffn_hidden),
          static_cast<double>(m.padded_vocab),
          B,
          T,
          static_cast<double>(m.n_head),
          static_cast<double>(m.head_dim),
          static_cast<double>(m.n_layer)};
}

// Forward + backward of one micro-batch: matmuls, attention, element-wise traffic, launches.
struct ComputeCost {
  double fwd_matmul = 0, bwd_matmul = 0, fwd_attn = 0, bwd_attn = 0, fwd_elem = 0, bwd_elem = 0, fwd_launch = 0,
         bwd_launch = 0;
  double forward() const { return fwd_matmul + fwd_attn + fwd_elem + fwd_launch; }
  double backward() const { return bwd_matmul + bwd_attn + bwd_elem + bwd_launch; }
};

// Forward element-wise bytes of one block with fused kernels: each norm reads
// and writes the fp32 stream once, the residual adds read the stream and the
// branch and write the stream, RoPE reads and writes q and k, the activation
// reads its input and writes its output, and under autocast the norm outputs
// are cast for the matmuls.
double fused_block_bytes(const ModelConfig& m, const Shapes& s, double a, double st) {
  double blk = 0;
  blk += 2 * (2 * st * s.M * s.C);                       // two norms: read + write
  blk += 2 * ((2 * st + a) * s.M * s.C);                 // two residual adds
  if (m.pos_encoding == PosEncoding::rope) blk += 3 * a * s.M * (s.Hq + s.Hkv);  // RoPE on q and k (+ cos/sin)
  if (m.qk_norm) blk += 2 * a * s.M * (s.Hq + s.Hkv);
  blk += 2 * a * s.M * s.Hq;                             // attention output back to (B, T, H*Q)
  blk += (m.ffn == FfnKind::swiglu ? 5.0 : 2.0) * a * s.M * s.F;  // silu(g) * u, or gelu
  if (a < st) blk += 2 * (st + a) * s.M * s.C;           // autocast: norm outputs cast for the matmuls
  return blk;
}

// RMSNorm over rows whose elements are `in` bytes, as the CPU twin of the
// fused kernel runs it (model/layers.cpp RmsNormCpu, the ATen ops a CPU trace
// records inside llmtrain::rms_norm): to fp32 when 16-bit, pow (read, write),
// mean (read), the row scale (read, write), times the weight in fp32 (read,
// write), back to the input's dtype when 16-bit. Bytes per row element. (On
// CUDA the fused kernel reads `in` and writes `in`.)
double rmsnorm_bytes(double in) {
  const double to32 = in < 4.0 ? in + 4.0 : 0.0, back = in < 4.0 ? 4.0 + in : 0.0;
  return to32 + 8.0 + 4.0 + 8.0 + 8.0 + back;
}

// Forward element-wise bytes of one block as model/layers.cpp dispatches it
// (views and the GEMMs not counted; the biases are in the GEMMs, addmm). e: the
// compute dtype's bytes; r: the parameters' and so the residual stream's.
double llmtrain_block_bytes(const ModelConfig& m, const Shapes& s, double e, double r) {
  const double M = s.M, C = s.C, Hq = s.Hq, Hkv = s.Hkv, F = s.F;
  const bool autocast = e < r;  // 16-bit matmuls over fp32 parameters: autocast casts their inputs
  double blk = 0;
  // ln_1, ln_2 over the stream; LayerNorm is one kernel (read, write).
  const double norm = m.norm == NormKind::rmsnorm ? rmsnorm_bytes(r) : 2 * r;
  blk += 2 * norm * M * C;
  if (autocast) blk += 2 * (r + e) * M * C;              // their outputs cast for c_attn and c_fc
  blk += 2 * (2 * r + e) * M * C;                        // x + attn(..), x + mlp(..): stream, branch -> stream
  // q and k: QK-norm (RMSNorm over D of the views of c_attn's output, its
  // weight cast to their dtype) keeps them in e.
  const double qk = e;
  if (m.qk_norm) blk += rmsnorm_bytes(e) * M * (Hq + Hkv);
  // RoPE (apply_rope, one autograd node since 2026-11-28): per half a multiply
  // (read, write) and a fused multiply-add in place (read 2, write): 5 passes
  // of the row's width (the composition before, with its cat, made 9).
  const bool rope = m.pos_encoding == PosEncoding::rope;
  if (rope) blk += 5 * qk * M * (Hq + Hkv);
  if (m.attention_backend == AttentionBackend::manual) {
    blk += 2 * qk * M * (Hq + Hkv) + 2 * e * M * Hkv;    // q, k, v made contiguous as (B, h, T, D)
    blk += 2 * e * M * Hq;                               // attention output back to (B, T, H*Q)
  } else if (rope && !m.qk_norm) {
    blk += 2 * e * M * Hkv;                              // SDPA reads views; v alone is copied
  }
  blk += (m.ffn == FfnKind::swiglu ? 5.0 : 2.0) * e * M * F;  // silu(g) (read, write), * u (read 2, write); gelu
  return blk;
}

}  // namespace

double block_elementwise_bytes(const RunShape& r) {
  const Shapes s = shapes(r.model, r.batch_size);
  const double a = act_bytes(r.dtype);
  return r.elementwise == ElementwiseKernels::fused ? fused_block_bytes(r.model, s, a, 4.0)
                                                    : llmtrain_block_bytes(r.model, s, a, r.param_bytes);
}

namespace {

ComputeCost micro_batch_cost(const RunShape& r, const DeviceProfile& p) {
  const ModelConfig& m = r.model;
  const bool sixteen = is16(r.dtype);
  const Shapes s = shapes(m, r.batch_size);
  ComputeCost c;
  for (const auto& g : forward_gemms(m, r.batch_size)) {
    c.fwd_matmul += g.count * gemm_seconds(p, g.m, g.n, g.k, sixteen);
    // dX = dY W: (M x K x N); dW = dY^T X: (N x K x M).
    c.bwd_matmul += g.count * (gemm_seconds(p, g.m, g.k, g.n, sixteen) + gemm_seconds(p, g.n, g.k, g.m, sixteen));
  }
  // Attention: the manual path computes the full (T, T) products and streams the
  // scores through memory; the fused kernels skip the masked half and keep the
  // scores on chip.
  const double attn_full = 4.0 * s.B * s.H * s.T * s.T * s.Q;  // QK^T and PV, both halves
  if (m.attention_backend == AttentionBackend::manual) {
    const double scores = s.B * s.H * s.T * s.T * 4.0;  // fp32 under autocast (softmax), fp32 without
    const double mm = attn_full / (p.matmul_tflops(sixteen) * 1e12);
    c.fwd_attn = s.L * (mm + kManualScorePasses * scores / (p.memory_gbps * 1e9));
    c.bwd_attn = s.L * (2.0 * mm + kManualScorePasses * scores / (p.memory_gbps * 1e9));
  } else {
    // The calibrated rate at this (T, head dim) when the profile has one (it
    // holds what the kernel reached, shape effects included); else the
    // profile's rate times the shape's efficiency (causal diagonal blocks, waves).
    double rate = p.attention_tflops(sixteen);
    if (rate <= 0) rate = p.matmul_tflops(sixteen);
    rate *= attention_shape_efficiency(p, r.batch_size, m.n_head, m.block_size);
    if (auto it = p.attention_by_shape_tflops.find(attention_key(m.block_size, m.head_dim, sixteen));
        it != p.attention_by_shape_tflops.end())
      rate = it->second;
    c.fwd_attn = s.L * (attn_full / 2.0) / (rate * 1e12);
    c.bwd_attn = kFlashBackwardFactor * c.fwd_attn;
  }
  // Element-wise traffic per block, forward (bytes): the residual stream is in
  // the parameters' dtype (fp32 under autocast: residual adds promote), matmul
  // outputs in the compute dtype.
  const double a = act_bytes(r.dtype), st = 4.0;
  const double blk = block_elementwise_bytes(r);
  // The blocks and the embedding gather; backward moves about twice as much.
  const double body = s.L * blk + st * s.M * s.C;
  const LossTraffic loss = loss_traffic(m, r.dtype);
  double elem_fwd = body + loss.forward * s.M * s.V;
  double elem_bwd = kBackwardTrafficFactor * body + loss.backward * s.M * s.V;
  // Weights: autocast casts each fp32 weight once per forward (read 4, write 2)
  // and the weight gradient back (backward); the gradient lands in the bucket
  // (read + write fp32).
  const double P = static_cast<double>(m.num_params());
  if (sixteen && r.param_bytes > a) {
    elem_fwd += (kParamBytes + a) * P;
    elem_bwd += (kParamBytes + a) * P;
  }
  elem_bwd += 2.0 * kParamBytes * P;
  // Fused kernels (the published runs' frameworks) at their own bandwidth where
  // the profile has one (device_profile.hpp).
  const double gbps = r.elementwise == ElementwiseKernels::fused && p.fused_elementwise_gbps > 0
                          ? p.fused_elementwise_gbps
                          : p.memory_gbps;
  c.fwd_elem = elem_fwd / (gbps * 1e9);
  c.bwd_elem = elem_bwd / (gbps * 1e9);
  const double ops_fwd = s.L * (ops_per_block_forward(m) + (sixteen ? kOpsPer16BitCast : 0.0)) + 8.0;
  const double params = static_cast<double>(parameter_table(m).size());
  const double ops_bwd = kBackwardOpsFactor * ops_fwd + params;  // + one gradient copy per parameter
  c.fwd_launch = ops_fwd * p.launch_us * 1e-6;
  c.bwd_launch = ops_bwd * p.launch_us * 1e-6;
  if (p.asynchronous()) {
    // A GPU's kernels queue behind each other while the host dispatches the
    // next ones: the host's time shows only where it exceeds the device's (the
    // H100 trace of LLaMA-2 1.36B: 1,586 kernels in 323 ms of kernel time of
    // a 336 ms step, the device busy 96% of it).
    c.fwd_launch = std::max(0.0, c.fwd_launch - (c.fwd_matmul + c.fwd_attn + c.fwd_elem));
    c.bwd_launch = std::max(0.0, c.bwd_launch - (c.bwd_matmul + c.bwd_attn + c.bwd_elem));
  }
  return c;
}

// Backward FLOP share of each parameter (its GEMM's), for when its bucket is ready.
std::vector<BucketParam> bucket_params(const std::vector<ParamSpec>& table) {
  std::vector<BucketParam> v;
  for (const auto& ps : table) v.push_back({ps.numel(), 4, 0, true});  // fp32 parameters: the buckets' dtype
  return v;
}

// DDP / ZeRO-1: the layout GradBuckets builds, each bucket's collective starting
// once backward of the last micro-batch has produced its gradients (backward
// time shared among parameters by size, which is their matmul FLOPs' share).
void bucket_comm(const RunShape& r, const WorldLayout& w, const DeviceProfile& p, double backward_s,
                 double optimizer_s, StepPrediction& out) {
  const auto table = parameter_table(r.model);
  const bool rs = r.strategy == StrategyKind::zero1;
  const BucketLayout layout = plan_bucket_layout(bucket_params(table), r.bucket_bytes, rs ? w.world_size : 1);
  const double total_numel = static_cast<double>(r.model.num_params());
  std::vector<double> ready, dur, gather;
  double done = 0;
  for (const auto& b : layout.buckets) {
    for (int si : b.slots) done += static_cast<double>(layout.slots[si].numel);
    ready.push_back(backward_s * done / total_numel);
    const double elems = static_cast<double>(b.numel);
    dur.push_back(rs ? scatter_gather_s(p, w, elems * r.reduce_bytes) : allreduce_s(p, w, elems * r.reduce_bytes));
    gather.push_back(scatter_gather_s(p, w, elems * r.gather_bytes));
  }
  double total = 0, bytes = 0;
  for (size_t i = 0; i < dur.size(); ++i) total += dur[i], bytes += layout.buckets[i].numel * r.reduce_bytes;
  const double exp = w.world_size > 1 ? exposed(serial_end(ready, dur), backward_s, total, p.comm_overlap) : 0.0;
  out.collectives.push_back({fmt::format("{} gradients ({} buckets of <= {:.0f} MiB)", rs ? "reduce-scatter" : "allreduce",
                                         layout.buckets.size(), r.bucket_bytes / (1024.0 * 1024.0)),
                             bytes, total, exp});
  if (rs) {
    // Each bucket's parameters are all-gathered once its shard is updated.
    std::vector<double> shard_done;
    double acc = 0;
    for (const auto& b : layout.buckets) shard_done.push_back(optimizer_s * (acc += b.bytes()) / bytes);
    double gtotal = 0;
    for (double g : gather) gtotal += g;
    const double gexp =
        w.world_size > 1 ? exposed(serial_end(shard_done, gather), optimizer_s, gtotal, p.comm_overlap) : 0.0;
    out.collectives.push_back({"all-gather updated parameters", bytes, gtotal, gexp});
  }
}

// FSDP: each micro-batch gathers every block's parameters before its forward
// and again before its backward, and reduce-scatters its gradients after it;
// with fsdp_prefetch the next block's gather runs under the current block's compute.
void fsdp_comm(const RunShape& r, const WorldLayout& w, const DeviceProfile& p, const ComputeCost& c,
               StepPrediction& out) {
  if (w.world_size <= 1) {
    out.collectives.push_back({"fsdp gathers and reduce-scatters (one rank: none)", 0, 0, 0});
    return;
  }
  const double W = static_cast<double>(w.world_size);
  double block = 0, root = 0;
  for (const auto& ps : parameter_table(r.model)) (ps.block >= 0 ? block : root) += static_cast<double>(ps.numel());
  const double L = static_cast<double>(r.model.n_layer);
  auto padded = [&](double n) { return std::ceil(n / W) * W; };
  const double unit_n = padded(block / L), root_n = padded(root);
  const double unit_b = unit_n * r.gather_bytes, root_b = root_n * r.gather_bytes;
  const double g = scatter_gather_s(p, w, unit_b), rg = scatter_gather_s(p, w, root_b);
  const double rs = scatter_gather_s(p, w, unit_n * r.reduce_bytes), rrs = scatter_gather_s(p, w, root_n * r.reduce_bytes);
  const double fwd_blk = c.forward() / L, bwd_blk = c.backward() / L;
  const double micro = static_cast<double>(r.grad_accum);
  auto hidden = [&](double comm, double compute) {
    const double lead = r.fsdp_prefetch ? std::max(0.0, comm - compute) * (L - 1) + comm : comm * L;
    return p.comm_overlap * lead + (1.0 - p.comm_overlap) * comm * L;
  };
  const double fwd_exp = hidden(g, fwd_blk) + rg;
  const double bwd_exp = hidden(g + rs, bwd_blk);  // gather + reduce-scatter per block
  out.collectives.push_back({"all-gather block parameters (forward and backward)", micro * 2 * (L * unit_b + root_b),
                             micro * (2 * L * g + rg), micro * (fwd_exp + bwd_exp)});
  out.collectives.push_back({"reduce-scatter block gradients", micro * (L * unit_n + root_n) * r.reduce_bytes,
                             micro * (L * rs + rrs), micro * rrs});  // the root's gradients at the end, exposed
}

double optimizer_seconds(const RunShape& r, const WorldLayout& w, const DeviceProfile& p) {
  const double P = static_cast<double>(r.model.num_params());
  const double shard = r.strategy == StrategyKind::ddp ? P : P / static_cast<double>(w.world_size);
  const double bytes = shard * (kAdamBytes + (w.world_size > 1 ? kAverageBytes : 0.0));
  // The fused kernel steps a bucket's (FSDP: a unit's) tensors in a few
  // multi-tensor launches: about four per bucket-sized piece of the shard.
  const double calls = std::ceil(shard * kParamBytes / r.bucket_bytes) + 1.0;
  const double stream = bytes / ((p.optimizer_gbps > 0 ? p.optimizer_gbps : p.memory_gbps) * 1e9);
  const double host = 4.0 * calls * p.launch_us * 1e-6;
  // On a GPU the launches queue under the kernels (micro_batch_cost).
  return p.asynchronous() ? std::max(stream, host) : stream + host;
}

// Checkpoints: weights and both AdamW moments in fp32, each rank writing what it
// owns (sharded strategies 1/W, DDP's rank 0 all of it). A synchronous save copies
// to the host (a GPU's device -> host copy) and writes at the storage bandwidth;
// an asynchronous one blocks for the snapshot copy, and the next save waits for
// whatever of the write the interval's iterations did not cover.
void checkpoint_cost(const RunShape& r, const WorldLayout& w, const DeviceProfile& p, StepPrediction& out) {
  const bool sharded = r.strategy != StrategyKind::ddp;
  out.checkpoint_bytes = static_cast<double>(r.model.num_params()) * 3.0 * kParamBytes /
                         static_cast<double>(sharded ? w.world_size : 1);
  const bool gpu = p.d2h_gbps > 0;
  const double copy = out.checkpoint_bytes / ((gpu ? p.d2h_gbps : p.host_copy_gbps) * 1e9);
  const double write = out.checkpoint_bytes / (p.storage_gbps * 1e9);
  const auto interval = static_cast<double>(std::max<int64_t>(1, r.checkpoint_interval > 0 ? r.checkpoint_interval
                                                                                          : r.eval_interval));
  out.checkpoint_sync_s = (gpu ? copy : 0.0) + write;
  out.checkpoint_async_s = copy + std::max(0.0, write - interval * out.step_time_s);
  out.checkpoint_s = (r.checkpoint_async ? out.checkpoint_async_s : out.checkpoint_sync_s) / interval;
}

}  // namespace

RunShape RunShape::from_config(const Config& c, const ModelConfig& m) {
  RunShape r;
  r.model = m;
  r.dtype = c.dtype;
  r.batch_size = c.batch_size;
  r.grad_accum = c.gradient_accumulation_steps;
  r.strategy = c.strategy();
  r.fsdp_prefetch = c.fsdp_prefetch;
  r.bucket_bytes = c.ddp_bucket_mb * 1024.0 * 1024.0;
  r.checkpoint_interval = c.checkpoint_interval;
  r.eval_interval = c.eval_interval;
  r.checkpoint_async = c.checkpoint_async;
  r.param_bytes = c.param_dtype == ParamDtype::bfloat16 ? 2.0 : 4.0;
  // compile=True runs the fused kernels of src/kernels (one read and one write per op).
  r.elementwise = m.fused_kernels ? ElementwiseKernels::fused : ElementwiseKernels::llmtrain;
  return r;
}

std::vector<GemmShape> forward_gemms(const ModelConfig& m, int64_t batch_size) {
  const int64_t M = batch_size * m.block_size, C = m.n_embd, L = m.n_layer;
  const int64_t Hq = m.n_head * m.head_dim, Hkv = m.n_kv_head * m.head_dim;
  const int64_t fc = m.ffn == FfnKind::swiglu ? 2 * m.ffn_hidden : m.ffn_hidden;  // gate | up fused
  return {{M, Hq + 2 * Hkv, C, L},  // q | k | v
          {M, C, Hq, L},            // attention output projection
          {M, fc, C, L},            // fc
          {M, C, m.ffn_hidden, L},  // down projection
          {M, m.padded_vocab, C, 1}};  // LM head
}

StepPrediction predict_step(const RunShape& r, const WorldLayout& w, const DeviceProfile& p) {
  LLMTRAIN_CHECK(w.world_size >= 1 && w.ranks_per_node >= 1, "world layout: {} ranks, {} per node", w.world_size,
                 w.ranks_per_node);
  StepPrediction out;
  out.device = p.name;
  const ComputeCost c = micro_batch_cost(r, p);
  const double micro = static_cast<double>(r.grad_accum);
  out.forward_s = micro * c.forward();
  out.backward_s = micro * c.backward();
  out.matmul_s = micro * (c.fwd_matmul + c.bwd_matmul);
  out.attention_s = micro * (c.fwd_attn + c.bwd_attn);
  out.elementwise_s = micro * (c.fwd_elem + c.bwd_elem);
  out.launch_s = micro * (c.fwd_launch + c.bwd_launch);
  out.data_s = micro * p.data_batch_us * 1e-6;
  out.optimizer_s = optimizer_seconds(r, w, p);
  if (r.strategy == StrategyKind::fsdp)
    fsdp_comm(r, w, p, c, out);
  else
    bucket_comm(r, w, p, c.backward(), out.optimizer_s, out);
  // Per iteration also: the loss averaged over ranks, the global gradient norm
  // (sharded strategies), the stop-signal flag: small allreduces, latency only.
  const double scalars = w.world_size > 1 ? (r.strategy == StrategyKind::ddp ? 2.0 : 3.0) : 0.0;
  out.collectives.push_back({"scalar allreduces (loss, stop flag, gradient norm)", scalars * 8.0,
                             scalars * p.collective_latency_us * 1e-6, scalars * p.collective_latency_us * 1e-6});
  for (const auto& cc : out.collectives) {
    out.communication_s += cc.exposed_s;
    out.communication_total_s += cc.seconds;
  }
  out.step_time_s = out.data_s + out.forward_s + out.backward_s + out.communication_s + out.optimizer_s;
  checkpoint_cost(r, w, p, out);
  out.tokens_per_iter = static_cast<double>(r.batch_size * r.model.block_size * r.grad_accum * w.world_size);
  out.tokens_per_s = out.tokens_per_iter / out.step_time_s;
  if (!p.model.empty()) {
    const PeakMath math = peak_math(r.dtype, Fp32Matmuls::tf32);  // CUDA runs fp32 matmuls on TF32 (enable_tf32)
    for (const auto& e : device_peak_table())
      if (e.model == p.model && e.math == math)
        out.mfu_percent = 100.0 * r.model.flops_per_token() * out.tokens_per_s / (e.tflops * 1e12 * w.world_size);
  }
  out.confidence = prediction_confidence(r.model, is16(r.dtype), w.world_size, p, out.mfu_percent.value_or(0.0));
  return out;
}

std::string format_prediction(const StepPrediction& p, const WorldLayout& w) {
  auto ms = [](double s) { return s * 1e3; };
  std::string s = fmt::format("predicted step on {} x {} ({} per node): {:.4g} ms, {:.4g} tokens/s, MFU {}\n",
                              w.world_size, p.device, w.ranks_per_node, ms(p.step_time_s), p.tokens_per_s,
                              p.mfu_percent ? fmt::format("{:.1f}%", *p.mfu_percent) : std::string("unknown (no peak)"));
  auto row = [&](const char* name, double v, const std::string& note) {
    s += fmt::format("  {:<15}{:>11.4g} ms  {:5.1f}%  {}\n", name, ms(v), 100.0 * v / p.step_time_s, note);
  };
  row("data", p.data_s, "");
  row("forward", p.forward_s, "");
  row("backward", p.backward_s,
      fmt::format("fwd+bwd: matmul {:.4g}, attention {:.4g}, element-wise {:.4g}, launches {:.4g} ms",
                  ms(p.matmul_s), ms(p.attention_s), ms(p.elementwise_s), ms(p.launch_s)));
  row("communication", p.communication_s, fmt::format("exposed, of {:.4g} ms on the link", ms(p.communication_total_s)));
  row("optimizer", p.optimizer_s, "");
  s += fmt::format("  {:<15}{:>11.4g} ms         amortized per iteration, not in the step; one save ({:.3g} GB per "
                   "rank) blocks {:.3g} s synchronous, {:.3g} s asynchronous\n",
                   "checkpoint", ms(p.checkpoint_s), p.checkpoint_bytes / 1e9, p.checkpoint_sync_s,
                   p.checkpoint_async_s);
  for (const auto& c : p.collectives)
    s += fmt::format("    {}: {:.4g} MB, {:.4g} ms, {:.4g} ms exposed\n", c.what, c.bytes / 1e6, ms(c.seconds),
                     ms(c.exposed_s));
  if (const std::string conf = format_confidence(p.confidence); !conf.empty()) s += "  how sure: " + conf + "\n";
  s.pop_back();
  return s;
}

nlohmann::json prediction_json(const StepPrediction& p) {
  nlohmann::json collectives = nlohmann::json::array();
  for (const auto& c : p.collectives)
    collectives.push_back({{"what", c.what}, {"bytes", c.bytes}, {"seconds", c.seconds}, {"exposed_s", c.exposed_s}});
  nlohmann::json j = {{"device", p.device},
          {"step_time_s", p.step_time_s},
          {"tokens_per_s", p.tokens_per_s},
          {"phases",
           {{"data_s", p.data_s},
            {"forward_s", p.forward_s},
            {"backward_s", p.backward_s},
            {"forward_backward_s", p.forward_backward_s()},
            {"communication_s", p.communication_s},
            {"optimizer_s", p.optimizer_s},
            {"checkpoint_amortized_s", p.checkpoint_s}}},
          {"checkpoint",
           {{"bytes_per_rank", p.checkpoint_bytes},
            {"blocking_sync_s", p.checkpoint_sync_s},
            {"blocking_async_s", p.checkpoint_async_s}}},
          {"detail",
           {{"matmul_s", p.matmul_s},
            {"attention_s", p.attention_s},
            {"elementwise_s", p.elementwise_s},
            {"launch_s", p.launch_s},
            {"communication_total_s", p.communication_total_s},
            {"collectives", collectives}}}};
  // Absent, never null, where the device has no dense peak (a CPU profile).
  if (p.mfu_percent) j["mfu"] = *p.mfu_percent;
  if (p.confidence.have_range) {
    j["mfu_range"] = {p.confidence.mfu_lo, p.confidence.mfu_hi};
    j["checked_on"] = p.confidence.checked_on;
  }
  j["outside_checked"] = p.confidence.outside;
  return j;
}

}  // namespace llmtrain
