#!/usr/bin/env python3
"""The PyTorch peer of llmtrain's benchmark against PyTorch: the same GPT-2- and
LLaMA-style models written plainly in PyTorch (nothing imported from llmtrain),
trained on the same synthetic tokens with the same AdamW (fused), clipping and LR
schedule, from the project's Python environment (the torch wheel llmtrain links).

It reads an llmtrain preset (inputs/*.cfg, `key = value` lines) so both sides
train the same shapes, plus `key=value` overrides as llmtrain takes them:

  python benchmarks/python_reference.py inputs/bench_gpt2_small.cfg --mode compile \
      --data DIR/train.bin --iters 30 --warmup 5 --threads 2 dtype=bfloat16
  python benchmarks/python_reference.py inputs/full_llama_1.36b.cfg --device cuda --mode compile \
      --data DIR/train.bin --iters 10 --warmup 5 gradient_accumulation_steps=1

Keys that shape the model or the step are read (activation_checkpointing too,
with torch.utils.checkpoint per block); keys that do not (eval, logging,
attention_backend, compile, ...) are llmtrain's alone and ignored; keys whose
effect is not modelled here (dropout > 0, param_dtype=bfloat16,
document_masking=True, init_from=hf:DIR) are refused rather than ignored.

Devices: `cpu` (default) and `cuda` (one GPU: model and data on it, fp32
parameters, bfloat16 under torch.autocast("cuda") when dtype=bfloat16, TF32
matmuls when dtype=float32, as llmtrain; attention is
F.scaled_dot_product_attention(is_causal=True); RMSNorm is F.rms_norm; each
step's clock is read after torch.cuda.synchronize()).

Modes: `eager`, and `compile` (torch.compile, default mode, of the model; the
time of the first steps, where compilation happens, is reported as compile_s
and excluded from the step time). Prints one JSON line: median ms/step over the
timed steps, tokens/s, peak RSS (ru_maxrss), compile_s, the final loss, the
parameter count and the device; on cuda also peak_gpu_bytes
(torch.cuda.max_memory_allocated(): the most bytes of tensors held at once).
"""
import argparse
import contextlib
import json
import math
import os
import resource
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

DEFAULTS = dict(vocab_size=0, vocab_pad_multiple=1, n_layer=12, n_head=12, n_kv_head=0, n_embd=768, head_dim=0,
                ffn_hidden=0, norm="rmsnorm", pos_encoding="rope", ffn="swiglu", qk_norm=False, rope_theta=10000.0,
                norm_eps=1e-5, bias=False, tie_embeddings=False, dropout=0.0, block_size=1024, batch_size=12,
                gradient_accumulation_steps=1, learning_rate=6e-4, min_lr=6e-5, weight_decay=0.1, beta1=0.9,
                beta2=0.95, grad_clip=1.0, decay_lr=True, warmup_iters=2000, lr_decay_iters=600000,
                dtype="float32", seed=1337, activation_checkpointing="none", activation_checkpointing_every=2,
                param_dtype="float32", document_masking=False, init_from="scratch")


def parse_value(text, like):
    if isinstance(like, bool):
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise SystemExit(f"python_reference: expected True/False, got {text!r}")
    return type(like)(text)


def read_config(preset, overrides):
    cfg = dict(DEFAULTS)
    items = []
    if preset:
        for n, line in enumerate(open(preset), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if "=" not in line:
                raise SystemExit(f"python_reference: {preset}:{n}: expected key = value")
            items.append(tuple(s.strip() for s in line.split("=", 1)))
    for o in overrides:
        items.append(tuple(s.strip() for s in o.lstrip("-").split("=", 1)))
    for k, v in items:
        if k in cfg:  # keys that do not shape the model or the step (eval, logging ...) are llmtrain's alone
            cfg[k] = parse_value(v, cfg[k])
    if cfg["n_kv_head"] == 0:
        cfg["n_kv_head"] = cfg["n_head"]
    if cfg["head_dim"] == 0:
        cfg["head_dim"] = cfg["n_embd"] // cfg["n_head"]
    if cfg["ffn_hidden"] == 0:
        cfg["ffn_hidden"] = (4 * cfg["n_embd"] if cfg["ffn"] == "gelu"
                             else (8 * cfg["n_embd"] // 3 + 255) // 256 * 256)
    m = cfg["vocab_pad_multiple"]
    cfg["padded_vocab"] = (cfg["vocab_size"] + m - 1) // m * m
    # What llmtrain would do differently with these, this model does not do: refuse, never measure something else.
    unmodelled = [f"dropout={cfg['dropout']}"] if cfg["dropout"] > 0 else []
    unmodelled += [f"param_dtype={cfg['param_dtype']}"] if cfg["param_dtype"] != "float32" else []
    unmodelled += ["document_masking=True"] if cfg["document_masking"] else []
    unmodelled += [f"init_from={cfg['init_from']}"] if cfg["init_from"].startswith("hf:") else []
    if unmodelled:
        raise SystemExit(f"python_reference: not modelled here: {', '.join(unmodelled)}")
    if cfg["activation_checkpointing"] not in ("none", "full", "selective"):
        raise SystemExit(f"python_reference: activation_checkpointing must be none, full or selective, "
                         f"got {cfg['activation_checkpointing']!r}")
    return cfg


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        if x.is_cuda:  # the fused kernel, what PyTorch offers on a GPU (nn.RMSNorm); the same math, in fp32
            return F.rms_norm(x.float(), self.weight.shape, self.weight, self.eps)
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.to(x.dtype) * self.weight


def make_norm(c, n):
    if c["norm"] == "layernorm":
        return nn.LayerNorm(n, eps=c["norm_eps"], bias=c["bias"])
    return RMSNorm(n, c["norm_eps"])


def rope(x, cos, sin):  # x (B, T, h, D); rotate-half layout
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.H, self.K, self.D = c["n_head"], c["n_kv_head"], c["head_dim"]
        self.c_attn = nn.Linear(c["n_embd"], (self.H + 2 * self.K) * self.D, bias=c["bias"])
        self.c_proj = nn.Linear(self.H * self.D, c["n_embd"], bias=c["bias"])
        self.qk_norm = c["qk_norm"]
        if self.qk_norm:
            self.q_norm = RMSNorm(self.D, c["norm_eps"])
            self.k_norm = RMSNorm(self.D, c["norm_eps"])

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        H, K, D = self.H, self.K, self.D
        q, k, v = self.c_attn(x).split([H * D, K * D, K * D], -1)
        q, k, v = q.view(B, T, H, D), k.view(B, T, K, D), v.view(B, T, K, D)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if cos is not None:
            q, k = rope(q, cos[:T], sin[:T]), rope(k, cos[:T], sin[:T])
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=K != H)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, H * D))


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.swiglu = c["ffn"] == "swiglu"
        f = c["ffn_hidden"]
        self.c_fc = nn.Linear(c["n_embd"], 2 * f if self.swiglu else f, bias=c["bias"])
        self.c_proj = nn.Linear(f, c["n_embd"], bias=c["bias"])

    def forward(self, x):
        h = self.c_fc(x)
        if self.swiglu:
            g, u = h.chunk(2, -1)
            h = F.silu(g) * u
        else:
            h = F.gelu(h, approximate="tanh")
        return self.c_proj(h)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1, self.attn = make_norm(c, c["n_embd"]), Attention(c)
        self.ln_2, self.mlp = make_norm(c, c["n_embd"]), Mlp(c)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.ln_1(x), cos, sin)
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        V, C = c["padded_vocab"], c["n_embd"]
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(c["block_size"], C) if c["pos_encoding"] == "learned" else None
        self.h = nn.ModuleList(Block(c) for _ in range(c["n_layer"]))
        # llmtrain's activation_checkpointing: full = every block, selective = blocks k-1, 2k-1, ...
        k = 1 if c["activation_checkpointing"] == "full" else c["activation_checkpointing_every"]
        self.recompute = [c["activation_checkpointing"] != "none" and (i + 1) % k == 0 for i in range(c["n_layer"])]
        self.ln_f = make_norm(c, C)
        self.lm_head = None if c["tie_embeddings"] else nn.Linear(C, V, bias=False)
        if c["pos_encoding"] == "rope":
            D = c["head_dim"]
            inv = c["rope_theta"] ** (-2.0 * torch.arange(D // 2, dtype=torch.float64) / D)
            ang = torch.outer(torch.arange(c["block_size"], dtype=torch.float64), inv)
            self.register_buffer("cos", ang.cos().float().unsqueeze(1), persistent=False)
            self.register_buffer("sin", ang.sin().float().unsqueeze(1), persistent=False)
        else:
            self.cos = self.sin = None
        # GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 L)), biases 0, norms 1.
        g = torch.Generator(self.wte.weight.device).manual_seed(c["seed"])
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 1:
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * c["n_layer"]) if name.endswith("c_proj.weight") else 0.02
                with torch.no_grad():
                    p.normal_(0.0, std, generator=g)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe.weight[:T]
        for b, recompute in zip(self.h, self.recompute):
            if recompute and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(b, x, self.cos, self.sin, use_reentrant=False)
            else:
                x = b(x, self.cos, self.sin)
        x = self.ln_f(x)
        logits = self.lm_head(x) if self.lm_head is not None else F.linear(x, self.wte.weight)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def lr_at(c, it):
    if not c["decay_lr"]:
        return c["learning_rate"]
    if it < c["warmup_iters"]:
        return c["learning_rate"] * (it + 1) / (c["warmup_iters"] + 1)
    if it > c["lr_decay_iters"]:
        return c["min_lr"]
    r = (it - c["warmup_iters"]) / max(1, c["lr_decay_iters"] - c["warmup_iters"])
    return c["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * r)) * (c["learning_rate"] - c["min_lr"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("preset", help="llmtrain preset (inputs/*.cfg)")
    ap.add_argument("overrides", nargs="*", help="key=value, as on llmtrain's command line")
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--data", required=True, help="uint16 token file (nanoGPT train.bin) to sample windows from")
    ap.add_argument("--iters", type=int, default=30, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="steps before timing (compilation happens here)")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0: leave torch's default)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: the model, the data and the step on the current GPU")
    ap.add_argument("--profile_step", type=int, default=-1,
                    help="trace this step (0-based, warm-up included) with torch.profiler: CPU ops with shapes "
                         "(+ CUDA kernels on a GPU) as a ProfilerStep#N span, the form llmtrain's profile_steps "
                         "writes (llmtrain-report --profile counts both alike)")
    ap.add_argument("--profile_out", help="the Chrome-trace JSON file of --profile_step")
    a = ap.parse_intermixed_args()  # overrides may come before or after the options
    if a.profile_step >= 0 and not a.profile_out:
        raise SystemExit("python_reference: --profile_step needs --profile_out FILE")
    c = read_config(a.preset, a.overrides)
    if c["vocab_size"] <= 0:
        raise SystemExit("python_reference: the preset must set vocab_size")
    if c["dtype"] not in ("float32", "bfloat16"):
        raise SystemExit(f"python_reference: dtype {c['dtype']} is not measured (float32, bfloat16)")
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("python_reference: --device cuda, but torch sees no GPU")
    if a.threads:
        torch.set_num_threads(a.threads)
    if cuda:  # fp32 matmuls and convolutions on TF32 tensor cores, as llmtrain's dtype=float32 on CUDA
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    dev = torch.device(a.device)
    torch.manual_seed(c["seed"])
    with dev:  # built and initialized where it trains
        model = Transformer(c)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=c["learning_rate"], betas=(c["beta1"], c["beta2"]), eps=1e-8, fused=True)
    fwd = torch.compile(model) if a.mode == "compile" else model
    tokens = np.memmap(a.data, dtype=np.uint16, mode="r")
    B, T, A = c["batch_size"], c["block_size"], c["gradient_accumulation_steps"]
    rng = np.random.default_rng(c["seed"])
    bf16 = c["dtype"] == "bfloat16"

    def batch():
        starts = rng.integers(0, len(tokens) - T - 1, size=B)
        w = np.stack([tokens[s:s + T + 1] for s in starts]).astype(np.int64)
        w = torch.from_numpy(w).to(dev)
        return w[:, :-1], w[:, 1:]

    def sync():  # the GPU's queued work done before the clock is read
        if cuda:
            torch.cuda.synchronize()

    times, loss_v = [], float("nan")
    sync()
    t_start = time.perf_counter()
    for it in range(a.warmup + a.iters):
        sync()
        traced = contextlib.ExitStack()
        if it == a.profile_step:
            acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
            prof = traced.enter_context(torch.profiler.profile(activities=acts, record_shapes=True,
                                                               profile_memory=True))
            traced.enter_context(torch.profiler.record_function(f"ProfilerStep#{it}"))
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(c, it)
        for _ in range(A):
            x, y = batch()
            with torch.autocast(a.device, dtype=torch.bfloat16, enabled=bf16):
                loss = fwd(x, y) / A
            loss.backward()
        if c["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), c["grad_clip"], foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_v = loss.item() * A
        sync()
        times.append(time.perf_counter() - t0)
        if it == a.profile_step:
            traced.close()
            prof.export_chrome_trace(a.profile_out)
    timed = times[a.warmup:]
    med = statistics.median(timed) * 1e3
    # Compilation (and the first-step allocations) happen in the warm-up steps:
    # what they took beyond a timed step is the cost of getting started.
    compile_s = sum(times[:a.warmup]) - a.warmup * med / 1e3
    out = {"impl": f"pytorch_{a.mode}", "torch": torch.__version__, "preset": a.preset, "dtype": c["dtype"],
           "threads": torch.get_num_threads(), "batch": B * A, "block": T,
           "params": sum(p.numel() for p in model.parameters()), "device": a.device,
           "device_name": torch.cuda.get_device_name(dev) if cuda else "cpu",
           "median_ms": med, "tokens_per_s": B * A * T / (med / 1e3),
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "startup_s": compile_s, "wall_s": time.perf_counter() - t_start, "final_loss": loss_v,
           "step_ms": [round(t * 1e3, 3) for t in times]}
    if cuda:
        out["peak_gpu_bytes"] = torch.cuda.max_memory_allocated(dev)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
